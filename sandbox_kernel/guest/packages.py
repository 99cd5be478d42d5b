"""`%pip` inside the sandbox: install, list and uninstall in the session's own package folder.

Runs INSIDE the sandbox's CPython, loaded as the module "sandbox_kernel_packages" with the
shell (shell.py). `%pip install` asks the host through the door ("pip"): the host's pip
chooses pure-Python wheels from its package index and fetches them (host/packages.py); this
module then asks for each wheel ("wheel", a binary answer), checks its SHA-256 and unpacks it
into the session's folder (`<workspace>/.packages`, on sys.path after the image's own
packages), where it is importable at once and after a restart. The host writes nothing into
the workspace: the guest unpacks, in a folder it could write anyway.

Must import only the standard library.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import os
import platform
import shlex
import shutil
import sys
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = ["pip"]

RESTART_NOTE = "Note: you may need to restart the kernel to use updated packages."
_USAGE = (
    "%pip in the sandbox: `install NAME...` (pure-Python wheels from the host's package "
    "index; -U/--upgrade, --no-deps), `list`, `show NAME...`, `uninstall NAME...` (packages "
    "this session installed)"
)


class PipUsageError(ValueError):
    """A %pip line the sandbox does not run."""


def pip(driver: Any, line: str, folder: str) -> None:
    """`%pip <line>`: the session's packages live in `folder`. As pip under ipykernel, a
    failure is an `ERROR:` line on stderr and the cell goes on."""
    try:
        _run(driver, line, Path(folder))
    except (PipUsageError, PermissionError, RuntimeError, OSError, zipfile.BadZipFile) as exc:
        print(f"ERROR: {exc}", file=sys.stderr)


def _run(driver: Any, line: str, folder: Path) -> None:
    try:
        args = shlex.split(line)
    except ValueError as exc:
        raise PipUsageError(f"%pip {line}: {exc}") from None
    command, rest = (args[0], args[1:]) if args else ("", [])
    if command == "install":
        _install(driver, rest, folder)
    elif command == "list":
        _list(folder)
    elif command == "show":
        _show([a for a in rest if not a.startswith("-")])
    elif command == "uninstall":
        _uninstall([a for a in rest if a not in ("-y", "--yes")], folder)
    else:
        raise PipUsageError(f"%pip {line.strip()} is not available. {_USAGE}")


def _install(driver: Any, args: list[str], folder: Path) -> None:
    answer = driver.call("pip", args=args, installed=_installed(folder), environment=_markers())
    for line in answer.get("log", []):
        print(line)
    if answer.get("error"):
        raise RuntimeError(answer["error"])
    wheels = answer.get("wheels", [])
    if not wheels:
        return
    print("Installing collected packages: " + ", ".join(w["name"] for w in wheels))
    folder.mkdir(parents=True, exist_ok=True)
    for wheel in wheels:
        data = driver.call_binary("wheel", sha256=wheel["sha256"])
        if hashlib.sha256(data).hexdigest() != wheel["sha256"]:
            raise RuntimeError(f"{wheel['filename']} arrived damaged (its SHA-256 differs)")
        _remove(wheel["name"], folder)
        _unpack(data, folder)
    sys.modules["sandbox_kernel_driver"].forget_finders(str(folder))
    print("Successfully installed " + " ".join(f"{w['name']}-{w['version']}" for w in wheels))
    print(RESTART_NOTE)


def _installed(folder: Path) -> dict[str, dict[str, Any]]:
    """Every distribution the session can import: the image's and the session's own."""
    found: dict[str, dict[str, Any]] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name and name not in found:
            where = getattr(dist, "_path", None)
            own = where is not None and Path(str(where)).parent == folder
            found[name] = {"version": dist.version, "session": own}
    return found


def _markers() -> dict[str, str]:
    """The guest's environment markers (PEP 508), as packaging computes them."""
    version = platform.python_version_tuple()
    implementation = sys.implementation
    info = implementation.version
    return {
        "implementation_name": implementation.name,
        "implementation_version": f"{info.major}.{info.minor}.{info.micro}",
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "python_version": ".".join(version[:2]),
        "sys_platform": sys.platform,
    }


def _unpack(data: bytes, folder: Path) -> None:
    """A pure-Python wheel into `folder`: its packages and .dist-info; of its .data only
    purelib (scripts, headers and data files have no place here). RECORD lists what was
    written, for uninstall."""
    written: list[str] = []
    record: PurePosixPath | None = None
    with zipfile.ZipFile(io.BytesIO(data)) as wheel:
        for info in wheel.infolist():
            parts = PurePosixPath(info.filename).parts
            if info.filename.startswith("/") or ".." in parts or "\\" in info.filename:
                raise RuntimeError(f"the wheel holds a path outside its folder: {info.filename}")
            if info.is_dir() or not parts:
                continue
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                parts = parts[2:]
            target = PurePosixPath(*parts)
            if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == "RECORD":
                record = target
                continue
            path = folder / target
            path.parent.mkdir(parents=True, exist_ok=True)
            with wheel.open(info) as source, open(path, "wb") as out:
                shutil.copyfileobj(source, out)
            written.append(str(target))
    if record is not None:
        (folder / record.parent / "INSTALLER").write_text("sandbox-kernel\n")
        listed = [*written, str(record.parent / "INSTALLER"), str(record)]
        (folder / record).write_text("".join(f"{path},,\n" for path in listed))


def _own(folder: Path) -> dict[str, tuple[str, Path]]:
    """The session's own distributions: normalized name -> (name, version, dist-info)."""
    found: dict[str, tuple[str, Path]] = {}
    if folder.is_dir():
        for info in folder.glob("*.dist-info"):
            dist = importlib.metadata.Distribution.at(info)
            name = dist.metadata["Name"] or info.name
            found[_normal(name)] = (f"{name} {dist.version}", info)
    return found


def _remove(name: str, folder: Path) -> bool:
    """Remove the session's copy of `name` (the files its RECORD lists)."""
    own = _own(folder).get(_normal(name))
    if own is None:
        return False
    info = own[1]
    record = info / "RECORD"
    lines = record.read_text().splitlines() if record.is_file() else []
    for line in lines:
        relative = PurePosixPath(line.split(",", 1)[0])
        if relative.parts and not relative.is_absolute() and ".." not in relative.parts:
            path = folder / relative
            if path.is_file() or path.is_symlink():
                path.unlink()
            parent = path.parent
            while parent != folder and parent.is_dir() and not any(parent.iterdir()):
                parent.rmdir()
                parent = parent.parent
    shutil.rmtree(info, ignore_errors=True)
    return True


def _uninstall(names: list[str], folder: Path) -> None:
    if not names:
        raise PipUsageError("%pip uninstall needs at least one package name")
    own = _own(folder)
    for name in names:
        found = own.get(_normal(name))
        if found is None:
            print(f"WARNING: Skipping {name}: not installed in this session's packages")
            continue
        _remove(name, folder)
        print(f"Successfully uninstalled {found[0].replace(' ', '-')}")
    sys.modules["sandbox_kernel_driver"].forget_finders(str(folder))
    print(RESTART_NOTE)


def _list(folder: Path) -> None:
    rows = sorted(_installed(folder).items(), key=lambda item: item[0].lower())
    width = max([len(name) for name, _ in rows] + [7])
    print(f"{'Package':<{width}} Version")
    print(f"{'-' * width} -------")
    for name, dist in rows:
        print(f"{name:<{width}} {dist['version']}{'  (this session)' if dist['session'] else ''}")


def _show(names: list[str]) -> None:
    """`pip show NAME...`: the fields pip shows, from the installed distributions' metadata."""
    if not names:
        print("WARNING: ERROR: Please provide a package name or names.", file=sys.stderr)
        return
    found, missing = [], []
    for name in names:
        try:
            found.append(importlib.metadata.distribution(name))
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    if missing:
        print(f"WARNING: Package(s) not found: {', '.join(missing)}", file=sys.stderr)
    required_by = _required_by()
    for index, dist in enumerate(found):
        meta = dist.metadata
        name = meta["Name"] or ""
        requires = sorted(
            {_requirement_name(r) for r in dist.requires or () if "extra ==" not in r}
        )
        if index:
            print("---")
        print(f"Name: {name}")
        print(f"Version: {dist.version}")
        for field, key in (
            ("Summary", "Summary"),
            ("Home-page", "Home-page"),
            ("Author", "Author"),
            ("Author-email", "Author-email"),
            ("License", "License"),
        ):
            print(f"{field}: {meta.get(key) or ''}")
        print(f"Location: {dist.locate_file('')}")
        print(f"Requires: {', '.join(requires)}")
        print(f"Required-by: {', '.join(sorted(required_by.get(_normal(name), ())))}")


def _requirement_name(requirement: str) -> str:
    for index, char in enumerate(requirement):
        if not (char.isalnum() or char in "-_."):
            return requirement[:index]
    return requirement


def _required_by() -> dict[str, set[str]]:
    """For each normalized name, the installed distributions that require it."""
    found: dict[str, set[str]] = {}
    for dist in importlib.metadata.distributions():
        for requirement in dist.requires or ():
            if "extra ==" not in requirement:
                name = _normal(_requirement_name(requirement.strip()))
                found.setdefault(name, set()).add(dist.metadata["Name"] or "")
    return found


def _normal(name: str) -> str:
    """PEP 503's normalized name."""
    out = name.lower()
    for char in "_.":
        out = out.replace(char, "-")
    while "--" in out:
        out = out.replace("--", "-")
    return out

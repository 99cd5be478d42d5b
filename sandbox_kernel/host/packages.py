"""`%pip install` for a session: pure-Python wheels from the package index, chosen and fetched by
the host, unpacked by the guest.

The guest cannot reach the network, and the host must never run code on the guest's behalf: building
an sdist runs its setup.py. So the host's pip only ever downloads wheels tagged `none-any`
(`--only-binary=:all: --platform any --implementation py`) from the one index the kernel was
configured with, one level of requirements at a time, with `--no-deps`; the dependencies are
resolved here from the wheels' metadata, against what the guest says it has (the image's packages
are kept: a requirement they satisfy is not fetched, one they do not is refused rather than
shadowed). Each wheel's SHA-256 is computed here, logged and sent with it. The guest then unpacks
the wheels itself, in its own workspace (driver.py): the host writes nothing into a folder the guest
controls.

A requirement is parsed into a closed form and handed to pip as a canonical name (only letters,
digits and '-'), its extras and its version specifier: nothing pip could read as a file, an
archive, a folder or a URL. pip runs isolated from everything of the user's (`python -I -m pip
--isolated`, no configuration file, no PIP_* variable, an empty private working folder, no cache),
so no local archive, pip.conf, constraint file or environment can change what it does. Every pip
run is bounded by the cell's deadline and ended by an interrupt (`stop`); a request is bounded in
wheels and bytes; what pip says reaches the guest without host paths. The bytes are capped while
pip downloads, not after: pip writes its downloads into the run's private folder, which is measured
at every poll (pip is ended as soon as it holds more than what is left of the request's limit), and
no file pip writes can grow past that (RLIMIT_FSIZE on pip's process). A wheel is then hashed in
pieces: a download is never read whole into this process. A package with compiled code has no such
wheel: it is refused with that reason.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import email.parser
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Mapping
from email.message import Message
from pathlib import Path

from packaging.markers import InvalidMarker, Marker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict

from sandbox_kernel.core.errors import SandboxExecutionError
from sandbox_kernel.core.results import WheelRecord
from sandbox_kernel.host.pip_bounds import (
    PipSaid,
    bytes_in,
    files_under,
    limit_file_size,
    remove,
    sha256,
)

__all__ = ["InstalledDist", "PackageError", "PipRequest", "WheelFetcher", "parse_pip_args"]

MAX_WHEELS = 100  # wheels one %pip install may bring (a package and its dependencies)
_MAX_METADATA_BYTES = 1024 * 1024
_MAX_SPEC_CHARS = 200
_POLL_SECONDS = 0.05
_INSTALL_FLAGS = {"-U": "upgrade", "--upgrade": "upgrade", "--no-deps": "no_deps"}
_IGNORED_FLAGS = frozenset({"-q", "--quiet", "-qq", "--user", "--no-cache-dir"})
_NO_MATCH = re.compile(r"No matching distribution found for (\S+)")
_VERSIONS = re.compile(r"\(from versions: ([^)]*)\)")
_HOST_PATH = re.compile(r"file:\S+|(?<![\w:/.])/[^\s'\"]+")  # a host path in pip's words
# pip reads a requirement that ends so as a local archive (pip._internal.utils.filetypes).
_ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz",
                     ".txz", ".tlz", ".tar.lz", ".tar.lzma")  # fmt: skip
# The only variables pip's process gets: none of the user's PIP_* settings, configuration files
# (PIP_CONFIG_FILE=os.devnull makes pip skip every one, the global ones included), Python
# settings or home; proxies are passed on, since they are how the host reaches the index.
_PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy",
                    "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR")  # fmt: skip


class PackageError(SandboxExecutionError):
    """What %pip cannot do: a refused request, a package with no pure-Python wheel, a limit."""


class InstalledDist(BaseModel):
    """A distribution the guest has: in its image (kept) or in the session's own folder."""

    model_config = ConfigDict(frozen=True)

    version: str
    session: bool = False


class PipRequest(BaseModel):
    """`pip install ...` as the sandbox understands it."""

    model_config = ConfigDict(frozen=True)

    requirements: tuple[str, ...]
    upgrade: bool = False
    no_deps: bool = False


def parse_pip_args(args: list[str]) -> PipRequest:
    """The arguments after `install`. Requirements by name only: a URL, a path, an index or
    an option that changes where pip looks is refused (the host decides the index)."""
    flags: dict[str, bool] = {}
    specs: list[str] = []
    for arg in args:
        if not isinstance(arg, str) or len(arg) > _MAX_SPEC_CHARS:
            raise PackageError("each %pip argument is a string of at most 200 characters")
        if arg in _INSTALL_FLAGS:
            flags[_INSTALL_FLAGS[arg]] = True
        elif arg in _IGNORED_FLAGS:
            continue
        elif arg.startswith("-"):
            raise PackageError(
                f"%pip install {arg} is not available in the sandbox: it installs packages by "
                "name from the host's package index (options: -U/--upgrade, --no-deps, -q)"
            )
        else:
            specs.append(_requirement(arg).__str__())
    if not specs:
        raise PackageError("%pip install needs at least one package name")
    if len(specs) > MAX_WHEELS:
        raise PackageError(f"%pip install takes at most {MAX_WHEELS} packages at once")
    return PipRequest(requirements=tuple(specs), **flags)


def _requirement(spec: str) -> Requirement:
    """`spec` in its closed form: a canonical name (letters, digits and '-' only: nothing pip
    could read as a file, an archive, a folder or a URL), canonical extras, the specifier and
    the marker. A name that is a file's (`evil-1.0.tar.gz`) or a URL is refused."""
    try:
        requirement = Requirement(spec)
    except InvalidRequirement as exc:
        raise PackageError(f"{spec!r} is not a package requirement: {exc}") from None
    if requirement.url:
        raise PackageError(
            f"{spec!r} names a URL: the sandbox installs packages by name from the host's index"
        )
    if requirement.name.lower().endswith(_ARCHIVE_SUFFIXES):
        raise PackageError(
            f"{spec!r} names a file: the sandbox installs packages by name from the host's "
            "index, never from an archive"
        )
    requirement.name = canonicalize_name(requirement.name)
    requirement.extras = {canonicalize_name(extra) for extra in requirement.extras}
    return requirement


def _for_pip(requirement: Requirement) -> str:
    """What pip is given: the closed form without the marker (markers are evaluated here)."""
    extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
    return f"{requirement.name}{extras}{requirement.specifier}"


class WheelFetcher:
    """Chooses and downloads the wheels one `%pip install` needs into `folder` (the host's,
    private): `resolve()` returns them in install order, dependencies first."""

    def __init__(
        self,
        folder: Path,
        *,
        python_version: str,
        max_bytes: int,
        stop: Callable[[], bool],
        deadline: float,
        log: Callable[[str], None],
        index_url: str,
    ) -> None:
        self.folder = folder
        self.index_url = index_url
        self.python_version = python_version
        self.max_bytes = max_bytes
        self.stop = stop
        self.deadline = deadline  # time.monotonic() value: every pip run ends by it
        self.log = log  # progress lines, as pip prints them

    def resolve(
        self,
        request: PipRequest,
        installed: Mapping[str, InstalledDist],
        environment: Mapping[str, str],
    ) -> list[WheelRecord]:
        have = {canonicalize_name(name): dist for name, dist in installed.items()}
        chosen: dict[str, WheelRecord] = {}
        order: list[str] = []
        total = 0
        pending: list[tuple[Requirement, tuple[str, ...], bool]] = [
            (_requirement(spec), (), True) for spec in request.requirements
        ]  # (requirement, the extras it is evaluated for, asked for by the user)
        while pending:
            wanted: dict[str, Requirement] = {}
            for requirement, extras, top in pending:
                if not _applies(requirement, extras, environment):
                    continue
                name = canonicalize_name(requirement.name)
                if name in chosen:
                    _check_chosen(requirement, chosen[name])
                elif self._satisfied(requirement, have.get(name), top and request.upgrade):
                    continue
                elif name in wanted:
                    wanted[name].specifier &= requirement.specifier
                else:
                    wanted[name] = requirement
            if not wanted:
                break
            if len(chosen) + len(wanted) > MAX_WHEELS:
                raise PackageError(f"%pip install would bring more than {MAX_WHEELS} packages")
            extras_of = {name: tuple(req.extras) for name, req in wanted.items()}
            pending = []
            for record, metadata in self._download(list(wanted.values()), total):
                name = canonicalize_name(record.name)
                total += record.size
                if total > self.max_bytes:
                    raise self._over_limit()
                chosen[name] = record
                order.append(name)
                if not request.no_deps:
                    pending += [
                        (_requirement(dep), extras_of.get(name, ()), False)
                        for dep in metadata.get_all("Requires-Dist") or []
                    ]
        return [chosen[name] for name in reversed(order)]

    def _satisfied(
        self, requirement: Requirement, have: InstalledDist | None, upgrade: bool
    ) -> bool:
        """True when the guest already has what `requirement` asks; a requirement the image's
        own package does not satisfy is refused (the image's packages are kept)."""
        if have is None:
            return False
        fits = requirement.specifier.contains(have.version, prereleases=True)
        if fits and not (upgrade and have.session):
            where = "the session's packages" if have.session else "the sandbox image"
            self.log(f"Requirement already satisfied: {requirement} in {where} ({have.version})")
            return True
        if have.session:
            return False  # the session's own packages can be replaced
        if fits:  # --upgrade of an image package: kept, as it is
            self.log(f"Requirement already satisfied: {requirement} in the sandbox image "
                     f"({have.version}; the image's packages are not upgraded)")  # fmt: skip
            return True
        raise PackageError(
            f"{requirement} cannot be installed: {requirement.name} {have.version} is part of "
            "the sandbox image, which a session cannot replace"
        )

    def _over_limit(self) -> PackageError:
        return PackageError(
            f"the packages come to more than {self.max_bytes:,} bytes, this session's limit "
            "for one %pip install"
        )

    def _download(
        self, requirements: list[Requirement], used_bytes: int
    ) -> list[tuple[WheelRecord, Message]]:
        """One pip run for one level of requirements (`used_bytes` already fetched): each gets
        a pure-Python wheel or the whole request is refused with the reason."""
        for requirement in requirements:
            self.log(f"Collecting {requirement}")
        before = {path.name for path in self.folder.iterdir()}
        budget = self.max_bytes - used_bytes
        try:
            self._pip(
                "download", "--no-deps", "--only-binary=:all:", "--platform", "any",
                "--implementation", "py", "--abi", "none", "--python-version",
                self.python_version, "--dest", str(self.folder), "--",
                *[_for_pip(req) for req in requirements], budget_bytes=budget,
            )  # fmt: skip
            new = sorted(path for path in self.folder.iterdir() if path.name not in before)
            if bytes_in(new) > budget:  # before a byte of them is read here
                raise self._over_limit()
        except PackageError:
            remove(path for path in self.folder.iterdir() if path.name not in before)
            raise
        fetched: dict[str, tuple[WheelRecord, Message]] = {}
        for path in new:
            record, metadata = _inspect(path)
            fetched[canonicalize_name(record.name)] = (record, metadata)
            self.log(f"  Downloaded {path.name} ({_size(record.size)}, sha256 {record.sha256})")
        missing = [r.name for r in requirements if canonicalize_name(r.name) not in fetched]
        if missing:
            raise PackageError(f"pip brought no wheel for {', '.join(missing)}")
        return list(fetched.values())

    def _pip(self, *args: str, budget_bytes: int) -> None:
        """Run the host's pip, isolated from the user's files and settings, in an empty private
        folder, ending it at the deadline, on an interrupt, or once its downloads (in that
        folder and in ours) come to more than `budget_bytes`."""
        command = [
            sys.executable, "-I", "-m", "pip", "--isolated", "--disable-pip-version-check",
            "--no-input", "--quiet", *args[:1], "--progress-bar", "off", "--no-cache-dir",
            "--index-url", self.index_url, *args[1:],
        ]  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="sandbox-kernel-pip-") as private:
            scratch = Path(private) / "tmp"  # pip downloads here first (TMPDIR), then copies
            scratch.mkdir()
            env = {name: os.environ[name] for name in _PROXY_VARIABLES if name in os.environ}
            env.update(PATH=os.defpath, HOME=private, PIP_CONFIG_FILE=os.devnull, LC_ALL="C")
            env.update(TMPDIR=str(scratch))
            before = {path.name for path in self.folder.iterdir()}

            def held() -> int:  # pip copies its downloads here at the end: not twice
                ours = (p for p in self.folder.iterdir() if p.name not in before)
                return max(bytes_in(files_under(scratch)), bytes_in(ours))

            with subprocess.Popen(
                command,
                cwd=private,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
            ) as process:
                limit_file_size(process.pid, budget_bytes + 1)
                assert process.stderr is not None
                err = PipSaid(process.stderr)
                try:
                    self._wait(process, lambda: held() > budget_bytes)
                finally:
                    said = err.text()
        if process.returncode != 0 and "[Errno 27]" in said:  # EFBIG: the file-size limit
            raise self._over_limit()
        if process.returncode != 0:
            raise PackageError(self._refusal(said))

    def _wait(self, process: subprocess.Popen[bytes], over: Callable[[], bool]) -> None:
        while True:
            try:
                process.wait(timeout=_POLL_SECONDS)
                return
            except subprocess.TimeoutExpired:
                stopped = self.stop() or time.monotonic() >= self.deadline
                if stopped or over():
                    process.kill()
                    process.wait()
                    if not stopped:
                        raise self._over_limit() from None
                    raise PackageError(
                        "%pip install was stopped (an interrupt or the cell's time limit)"
                    ) from None

    def _refusal(self, pip_said: str) -> str:
        """Why pip found nothing, in the sandbox's words."""
        match = _NO_MATCH.search(pip_said)
        versions = _VERSIONS.search(pip_said)
        if match and versions and versions.group(1).strip() != "none":
            return (
                f"no usable wheel of {match.group(1)}: the index has versions "
                f"{_shorten(versions.group(1).strip())}, but none that fits what was asked (or its "
                "metadata does not match its name)"
            )
        if match:
            name = match.group(1)
            return (
                f"no pure-Python wheel of {name} for Python {self.python_version} on the "
                "package index: the sandbox installs only wheels without compiled code (a "
                "package with C or Rust extensions cannot load in WebAssembly) and never "
                "builds from source; or there is no package of that name"
            )
        lines = [line for line in pip_said.splitlines() if line.startswith("ERROR")]
        said = " / ".join(_shorten(line) for line in lines[-3:]) or pip_said.strip()[-500:]
        return "pip failed: " + _HOST_PATH.sub("<host path>", said)


def _shorten(text: str, max_chars: int = 300) -> str:
    return text if len(text) <= max_chars else f"{text[: max_chars - 20]} ... {text[-15:]}"


def _applies(
    requirement: Requirement, extras: tuple[str, ...], environment: Mapping[str, str]
) -> bool:
    """Whether a requirement's marker holds in the guest (for one of the extras asked)."""
    if requirement.marker is None:
        return True
    marker: Marker = requirement.marker
    for extra in (*extras, ""):
        try:
            if marker.evaluate({**environment, "extra": extra}):
                return True
        except (InvalidMarker, UndefinedComparison, UndefinedEnvironmentName):
            return False
    return False


def _check_chosen(requirement: Requirement, record: WheelRecord) -> None:
    if not requirement.specifier.contains(record.version, prereleases=True):
        raise PackageError(
            f"conflicting requirements: {requirement} but {record.name} {record.version} was "
            "chosen for another package"
        )


def _inspect(path: Path) -> tuple[WheelRecord, Message]:
    """A downloaded wheel's record (name, version, SHA-256, size) and METADATA; anything but
    a pure-Python wheel is refused here too, whatever pip was told."""
    if not path.name.endswith("-none-any.whl"):
        raise PackageError(f"{path.name} is not a pure-Python wheel")
    try:
        with zipfile.ZipFile(path) as wheel:
            names = [n for n in wheel.namelist() if n.count("/") == 1]
            meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
            if wheel.getinfo(meta).file_size > _MAX_METADATA_BYTES:
                raise PackageError(f"{path.name} has metadata over 1 MiB")
            text = wheel.read(meta).decode("utf-8", errors="replace")
    except (zipfile.BadZipFile, StopIteration, KeyError):
        raise PackageError(f"{path.name} is not a readable wheel") from None
    metadata = email.parser.Parser().parsestr(text)
    name, version = str(metadata.get("Name", "")), str(metadata.get("Version", ""))
    try:
        Version(version)
    except InvalidVersion:
        raise PackageError(f"{path.name} has no valid version in its metadata") from None
    record = WheelRecord(
        name=name,
        version=version,
        filename=path.name,
        sha256=sha256(path),
        size=path.stat().st_size,
    )
    return record, metadata


def _size(n: int) -> str:
    return f"{n / 1024:.0f} kB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f} MB"

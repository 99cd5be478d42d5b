"""Attacks that try to make the host's pip act for the guest where the user's files are: an
sdist beside the kernel (or one the cell writes into its workspace) whose setup.py would run on
the host, a `pip` package in the kernel's folder that `python -m pip` would import, and the
user's pip settings (PIP_* variables, pip.conf, a constraint file, find-links) that would point
pip at another index or at local archives. Each one: no code of the attacker's runs on the host,
nothing but the configured index is asked, errors carry no host path, the next cell works.

The index is real HTTP on 127.0.0.1 (tests/package_index.py), the sdists real tar archives.
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.host import guest_library
from sandbox_kernel.host.cache import cache_dir
from sandbox_kernel.host.packages import PackageError, parse_pip_args
from sandbox_kernel.repl import REPLConfig, ReplSandbox
from tests.package_index import PackageIndex

REPO = Path(__file__).resolve().parents[2]
POLICY = ExecutionPolicy(fuel_budget=200_000_000_000, timeout_seconds=60)


def hostile_sdist(name: str, marker: Path) -> bytes:
    """An sdist whose setup.py (and pyproject-less build) writes `marker` on whatever runs it."""
    setup = f"open({str(marker)!r}, 'w').write('host code ran')\nraise SystemExit(1)\n"
    files = {
        f"{name}-1.0/setup.py": setup,
        f"{name}-1.0/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture(scope="module")
def index() -> Iterator[PackageIndex]:
    index = PackageIndex()
    index.add("plain", "1.0", {"plain.py": "ORIGIN = 'the configured index'\n"})
    with index:
        yield index


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[PackageIndex]:
    """Another index, which only the user's pip settings name: never to be asked."""
    other = PackageIndex()
    other.add("plain", "9.0", {"plain.py": "ORIGIN = 'the user settings'\n"})
    with other:
        yield other


def _session(workspace: Path, index: PackageIndex) -> ReplSandbox:
    return ReplSandbox(
        REPLConfig(
            ipython=True,
            packages=True,
            policy=POLICY,
            workspace=workspace,
            package_index_url=index.url,
        )
    )


def _next_cell_works(repl: ReplSandbox) -> None:
    done = repl.execute("%pip install plain\nimport plain\nplain.ORIGIN")
    assert done.status == "ok" and done.result == {"text/plain": "'the configured index'"}, done


@pytest.mark.parametrize(
    "cell",
    [
        "%pip install evilpkg-1.0.tar.gz",
        "!pip install evilpkg-1.0.tar.gz",
        "__sandbox_kernel__.call('pip', args=['evilpkg-1.0.tar.gz'])",
        "__sandbox_kernel__.call('pip', args=['evilpkg-1.0.tar.gz', '--no-deps'])",
    ],
    ids=["magic", "shell-line", "door", "door-no-deps"],
)
def test_an_sdist_beside_the_kernel_is_never_built(
    tmp_path: Path, index: PackageIndex, monkeypatch: pytest.MonkeyPatch, cell: str
) -> None:
    """The kernel runs in the notebook's folder, where an sdist lies: its setup.py never runs."""
    marker = tmp_path / "owned"
    folder = tmp_path / "notebook"
    folder.mkdir()
    (folder / "evilpkg-1.0.tar.gz").write_bytes(hostile_sdist("evilpkg", marker))
    monkeypatch.chdir(folder)
    with _session(tmp_path / "workspace", index) as repl:
        done = repl.execute(f"answer = {cell}" if cell.startswith("__") else cell)
        assert not marker.exists(), "the sdist's setup.py ran on the host"
        said = done.stderr + str(repl.get_variable("answer") if cell.startswith("__") else "")
        assert "names a file" in said, done
        assert str(folder) not in said and str(tmp_path) not in said
        _next_cell_works(repl)


def test_an_sdist_the_cell_writes_into_its_workspace_is_never_built(
    tmp_path: Path, index: PackageIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workspace is the kernel's own folder (the notebook-folder set-up): the cell writes
    the archive itself, then asks for it, under its own name and under names pip would map to
    it."""
    marker = tmp_path / "owned"
    folder = tmp_path / "notebook"
    folder.mkdir()
    monkeypatch.chdir(folder)
    payload = base64.b64encode(hostile_sdist("evilpkg", marker)).decode()
    with _session(folder, index) as repl:
        wrote = repl.execute(
            "import base64\n"
            f"open('evilpkg-1.0.tar.gz', 'wb').write(base64.b64decode({payload!r}))\n"
            "import os; os.makedirs('evilpkg', exist_ok=True)\n"
            "import shutil; shutil.copy('evilpkg-1.0.tar.gz', 'evilpkg.zip')\n"
        )
        assert wrote.ok, wrote
        assert (folder / "evilpkg-1.0.tar.gz").is_file()
        for line in (
            "%pip install evilpkg-1.0.tar.gz",
            "%pip install evilpkg.zip",
            "%pip install evilpkg",
            "%pip install EvilPkg-1.0.TAR.GZ",
        ):
            done = repl.execute(line)
            assert done.status == "ok", (line, done)
            assert done.stderr.startswith("ERROR: "), (line, done.stderr)
            assert not marker.exists(), f"{line}: the sdist's setup.py ran on the host"
        _next_cell_works(repl)


def test_a_pip_package_in_the_kernels_folder_is_not_what_runs(
    tmp_path: Path, index: PackageIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python -m pip` run in the kernel's folder would import ./pip first."""
    marker = tmp_path / "owned"
    folder = tmp_path / "notebook"
    (folder / "pip").mkdir(parents=True)
    code = f"open({str(marker)!r}, 'w').write('host code ran')\n"
    (folder / "pip" / "__init__.py").write_text(code)
    (folder / "pip" / "__main__.py").write_text(code)
    (folder / "sitecustomize.py").write_text(code)
    monkeypatch.chdir(folder)
    monkeypatch.setenv("PYTHONPATH", str(folder))
    monkeypatch.setenv("PYTHONSTARTUP", str(folder / "sitecustomize.py"))
    with _session(tmp_path / "workspace", index) as repl:
        _next_cell_works(repl)
    assert not marker.exists(), "code from the kernel's folder ran as pip"
    # The guest library's installer (a kernel's first start) runs pip too.
    private = tmp_path / "private"
    private.mkdir()
    (private / "nothing.txt").write_text("")
    guest_library._pip(private, "download", "--dest", str(private), "-r", "nothing.txt")
    assert not marker.exists(), "code from the kernel's folder ran as the guest library's pip"


def test_the_users_pip_settings_never_reach_pip(
    tmp_path: Path,
    index: PackageIndex,
    elsewhere: PackageIndex,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PIP_* variables, a pip.conf in every place pip looks, a constraint file and local
    archives: none changes which index pip asks or what it installs."""
    archives = tmp_path / "archives"
    archives.mkdir()
    marker = tmp_path / "owned"
    (archives / "plain-99.0.tar.gz").write_bytes(hostile_sdist("plain", marker))
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("plain==99.0\n")
    conf = f"[global]\nindex-url = {elsewhere.url}\nfind-links = {archives}\nno-binary = :all:\n"
    home = tmp_path / "home"
    for place in (home / ".config" / "pip", home / ".pip", tmp_path / "xdg" / "pip"):
        place.mkdir(parents=True)
        (place / "pip.conf").write_text(conf)
    (tmp_path / "pip.conf").write_text(conf)
    cache = str(cache_dir())  # the compiled guest and its library stay where they are
    for name, value in {
        "SANDBOX_KERNEL_CACHE": cache,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "XDG_CONFIG_DIRS": str(tmp_path / "xdg"),
        "PIP_CONFIG_FILE": str(tmp_path / "pip.conf"),
        "PIP_INDEX_URL": elsewhere.url,
        "PIP_EXTRA_INDEX_URL": elsewhere.url,
        "PIP_FIND_LINKS": str(archives),
        "PIP_CONSTRAINT": str(constraints),
        "PIP_NO_BINARY": ":all:",
        "PIP_PRE": "1",
    }.items():
        monkeypatch.setenv(name, value)
    with _session(tmp_path / "workspace", index) as repl:
        _next_cell_works(repl)
    assert elsewhere.requests == []
    assert not marker.exists()


@pytest.mark.parametrize(
    "spec",
    ["evil.whl", "evil-1.0-py3-none-any.whl", "x.tar.bz2", "x.tgz", "x.zip", "y.tar.lzma"],
)
def test_names_pip_would_read_as_archives_are_refused(spec: str) -> None:
    with pytest.raises(PackageError, match="names a file"):
        parse_pip_args([spec])


def test_requirements_reach_pip_in_a_closed_form() -> None:
    """Whatever the spelling, pip is given a canonical name: letters, digits and '-'."""
    request = parse_pip_args(["Some_Pkg.Name[Extra_One]>=1.0; python_version >= '3'"])
    assert request.requirements == ('some-pkg-name[extra-one]>=1.0; python_version >= "3"',)


# -- a wheel over the limit (issue 47, item 10) ------------------------------------------------

MiB = 1024 * 1024
CAP_BYTES = 100 * MiB  # REPLConfig.max_package_bytes' default
HUGE_BYTES = 400 * MiB


def probe(index: PackageIndex, folder: Path, max_bytes: int, *specs: str) -> dict[str, Any]:
    """WheelFetcher.resolve in a process of its own (tests/attacks/pip_memory_probe.py)."""
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "tests.attacks.pip_memory_probe", index.url, str(folder),
         str(max_bytes), *specs],
        capture_output=True, text=True, timeout=600, cwd=REPO, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return report


@pytest.fixture(scope="module")
def huge_index() -> Iterator[PackageIndex]:
    index = PackageIndex()
    index.add_big("hugewheel", "1.0", HUGE_BYTES)
    index.add("needshuge", "1.0", {"needshuge.py": ""}, requires=["hugewheel"])
    with index:
        yield index


@pytest.mark.parametrize("spec", ["hugewheel", "needshuge"], ids=["asked", "a-dependency"])
def test_a_wheel_over_the_limit_is_refused_while_it_downloads(
    huge_index: PackageIndex, tmp_path: Path, spec: str
) -> None:
    """The host never holds the wheel: its peak memory and pip's stay far below the wheel's
    size, and no more than the limit (and a poll's worth) reaches the disk."""
    report = probe(huge_index, tmp_path / "wheels", CAP_BYTES, spec)
    assert report["error"] is not None and "limit for one %pip install" in report["error"], report
    assert str(CAP_BYTES) in report["error"].replace(",", ""), report
    grown_mib = (report["peak_kib"] - report["peak_before_kib"]) / 1024
    assert grown_mib < 50, f"the host grew by {grown_mib:.0f} MiB: {report}"
    assert report["children_peak_kib"] / 1024 < 300, f"pip held the wheel: {report}"
    assert report["folder_bytes"] < MiB, "a refused download is not left in the host's folder"


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=96), min_size=1, max_size=3),
    cap_kib=st.integers(min_value=16, max_value=160),
)
def test_the_limit_holds_for_any_sizes_across_dependencies(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], cap_kib: int
) -> None:
    """A chain of wheels (each requires the next) of `sizes` KiB of incompressible data: the
    install is refused exactly when the wheels come to more than the cap, whatever level the
    wheel that passes it is on."""
    index = PackageIndex()
    names = [f"chain{n}" for n in range(len(sizes))]
    total = 0
    for n, (name, kib) in enumerate(zip(names, sizes, strict=True)):
        requires = names[n + 1 : n + 2]
        filename = index.add(
            name, "1.0", {f"{name}.bin": os.urandom(kib * 1024)}, requires=requires
        )
        total += len(index.files[filename])
    folder = tmp_path_factory.mktemp("wheels")
    with index:
        report = probe(index, folder, cap_kib * 1024, names[0])
    if total > cap_kib * 1024:
        assert report["error"] is not None and "limit" in report["error"], (total, report)
    else:
        assert report["error"] is None, (total, report)
        assert sum(w["size"] for w in report["wheels"]) == total


def test_pips_words_are_kept_short_however_many_versions_the_index_lists(tmp_path: Path) -> None:
    """pip lists every version it saw when none fits: an index decides how long that is. The
    host keeps 64 KiB of each end of pip's stderr and the cell gets a short reason."""
    index = PackageIndex()
    for n in range(12_000):  # listed only: pip downloads none of them
        index.files[f"manyversions-1.{n}-py3-none-any.whl"] = b""
    with index:
        report = probe(index, tmp_path / "wheels", CAP_BYTES, "manyversions==0")
    error = report["error"]
    assert error is not None and error.startswith("no usable wheel of manyversions==0"), error
    assert "1.0, 1.1" in error and "1.11999" in error, error
    assert len(error) < 600, f"{len(error)} characters"

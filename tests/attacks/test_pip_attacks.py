"""Attacks through %pip: hostile wheels, lying metadata, forged door requests, options that
would point the host's pip elsewhere, dependency floods, oversized and never-ending downloads.
Each ends with a clear outcome, nothing written outside the session's package folder, no pip
process left running, and the next cell working. The index is real HTTP on 127.0.0.1
(tests/package_index.py); the host's pip runs unchanged against it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.repl import REPLConfig, ReplSandbox
from tests.kernel.conftest import processes_mentioning
from tests.package_index import PackageIndex

POLICY = ExecutionPolicy(fuel_budget=200_000_000_000, timeout_seconds=60)


@pytest.fixture(scope="module")
def index() -> Iterator[PackageIndex]:
    index = PackageIndex()
    index.add("plain", "1.0", {"plain.py": "OK = True\n"})
    index.add(
        "escaper",
        "1.0",
        {"escaper.py": ""},
        extra_members={"../../escaped.py": b"owned = 1\n", "/tmp/absolute.py": b""},
    )
    index.add("liar", "1.0", {"numpy/__init__.py": "FAKE = True\n"})
    index.files["liar-1.0-py3-none-any.whl"] = _renamed(index, "liar", "numpy")
    index.add("bulky", "1.0", {"bulky.bin": os.urandom(200_000)})
    index.add("flood", "1.0", {"flood.py": ""}, requires=[f"dep{i}" for i in range(150)])
    index.add("slowpoke", "1.0", {"slowpoke.py": ""})
    index.slow["slowpoke-1.0-py3-none-any.whl"] = 60.0
    with index:
        yield index


def _renamed(index: PackageIndex, name: str, claimed: str) -> bytes:
    """`name`'s wheel whose METADATA says it is `claimed` (a wheel that lies)."""
    import io
    import zipfile

    source = zipfile.ZipFile(io.BytesIO(index.files[f"{name}-1.0-py3-none-any.whl"]))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith("METADATA"):
                data = data.replace(f"Name: {name}".encode(), f"Name: {claimed}".encode())
            target.writestr(info, data)
    return out.getvalue()


def _config(tmp_path: Path, index: PackageIndex, **changes: object) -> REPLConfig:
    """An IPython session with %pip on `index`, in `tmp_path`, with `changes`."""
    settings: dict[str, object] = {
        "policy": POLICY,
        "max_package_bytes": 100_000,
        "package_index_url": index.url,
    }
    settings.update(changes)
    return REPLConfig(
        ipython=True,
        packages=True,
        workspace=tmp_path / "workspace",
        **settings,  # type: ignore[arg-type]
    )


@pytest.fixture
def session(tmp_path: Path, index: PackageIndex) -> Iterator[ReplSandbox]:
    with ReplSandbox(_config(tmp_path, index)) as repl:
        yield repl


def _next_cell_works(repl: ReplSandbox) -> None:
    done = repl.execute("%pip install plain\nimport plain\nplain.OK")
    assert done.status == "ok" and done.result == {"text/plain": "True"}, done


def test_a_wheel_with_paths_outside_its_folder_is_refused(
    session: ReplSandbox, tmp_path: Path
) -> None:
    done = session.execute("%pip install escaper")
    assert "the wheel holds a path outside its folder" in done.stderr
    assert not (tmp_path / "escaped.py").exists()
    assert not (session.workspace / "escaped.py").exists()
    assert not Path("/tmp/absolute.py").exists()
    _next_cell_works(session)


def test_a_wheel_that_lies_about_its_name_cannot_replace_an_image_package(
    session: ReplSandbox,
) -> None:
    done = session.execute("%pip install liar")
    assert "ERROR: no usable wheel of liar" in done.stderr
    assert session.execute("import numpy\nhasattr(numpy, 'FAKE')").result == {"text/plain": "False"}
    _next_cell_works(session)


def test_oversized_downloads_are_refused(session: ReplSandbox) -> None:
    done = session.execute("%pip install bulky")
    assert "more than 100,000 bytes" in done.stderr
    assert not (session.workspace / ".packages" / "bulky.bin").exists()
    _next_cell_works(session)


def test_a_dependency_flood_is_refused_before_pip_runs(
    session: ReplSandbox, index: PackageIndex
) -> None:
    done = session.execute("%pip install flood")
    assert "would bring more than 100 packages" in done.stderr
    assert not any("dep1" in path for path in index.requests)
    _next_cell_works(session)


def test_a_cell_cannot_run_pip_on_the_host_without_end(
    session: ReplSandbox, index: PackageIndex
) -> None:
    """Each %pip install runs pip on the host, outside the guest's fuel: a cell gets ten."""
    done = session.execute(
        "for i in range(30):\n    get_ipython().run_line_magic('pip', f'install nothere{i}')"
    )
    assert done.status == "ok", done
    assert done.stderr.count("ERROR: no pure-Python wheel of nothere") == 10
    assert done.stderr.count("at most 10 %pip installs in one cell") == 20
    assert len([r for r in index.requests if "nothere" in r]) <= 10 * 2  # simple page, retries
    _next_cell_works(session)


@pytest.mark.parametrize(
    "cell",
    [
        # Wheels nobody fetched: by a name, by a path.
        "__sandbox_kernel__.call_binary('wheel', sha256='0' * 64)",
        "__sandbox_kernel__.call_binary('wheel', sha256='../../../../etc/passwd')",
        # Options and requirements that would point pip elsewhere, sent to the door directly.
        "__sandbox_kernel__.call('pip', args=['--index-url=http://127.0.0.1:9/', 'plain'])",
        "__sandbox_kernel__.call('pip', args=['plain @ file:///etc/passwd'])",
        "__sandbox_kernel__.call('pip', args=['--', '--extra-index-url', 'http://x/'])",
        "__sandbox_kernel__.call('pip', args=['x'] * 10_000)",
        "__sandbox_kernel__.call('pip', args=['plain'], installed=['not', 'a', 'dict'])",
        "__sandbox_kernel__.call('pip', args=[{'not': 'text'}])",
    ],
)
def test_forged_door_requests_get_clear_errors(
    session: ReplSandbox, index: PackageIndex, cell: str
) -> None:
    asked = len(index.requests)
    done = session.execute(f"answer = {cell}\nanswer")
    if done.status == "ok":  # refused in the answer: pip never ran
        assert "error" in str(done.result), done
    else:
        assert done.ename in ("ValueError", "PermissionError"), done
    assert len(index.requests) == asked
    _next_cell_works(session)


def test_an_interrupt_ends_a_download_that_never_finishes(session: ReplSandbox) -> None:
    threading.Timer(2.0, session.cancel).start()
    started = time.monotonic()
    done = session.execute("%pip install slowpoke")
    assert time.monotonic() - started < 20, done
    assert done.status in ("cancelled", "ok"), done
    assert "stopped" in done.stderr or done.status == "cancelled", done
    _no_pip_left()
    _next_cell_works(session)


def test_the_cell_deadline_ends_a_download_that_never_finishes(
    tmp_path: Path, index: PackageIndex
) -> None:
    with ReplSandbox(
        _config(tmp_path, index, policy=POLICY.with_overrides(timeout_seconds=4))
    ) as repl:
        started = time.monotonic()
        done = repl.execute("%pip install slowpoke")
        assert time.monotonic() - started < 20, done
        # The download is stopped at the cell's deadline; the guest may still print that it
        # was stopped and end its cell just before its own clock stops it (a race of ms).
        assert done.status in ("timeout", "ok"), done
        assert "stopped" in done.stderr or done.status == "timeout", done
        _no_pip_left()
        _next_cell_works(repl)


def _no_pip_left() -> None:
    deadline = time.monotonic() + 5
    while processes_mentioning("sandbox-kernel-wheels-") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning("sandbox-kernel-wheels-") == []

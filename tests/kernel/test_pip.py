"""`%pip install` in a real sandbox-python kernel, against a real package index on 127.0.0.1
(tests/package_index.py): pure-Python wheels with their dependencies, importable at once and
after a restart, logged with their SHA-256; compiled packages, the image's own packages and
options that change where pip looks are refused with the reason, as ipykernel's %pip reports
pip's errors (an ERROR line, the cell goes on)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kernel.conftest import RunningKernel, start_kernel
from tests.package_index import PackageIndex

RESTART_NOTE = "Note: you may need to restart the kernel to use updated packages."
MiB = 1024 * 1024
HUGE_BYTES = 400 * MiB


def make_index() -> PackageIndex:
    index = PackageIndex()
    index.add(
        "greeting",
        "1.2",
        {"greeting/__init__.py": "from wordlist import WORDS\nhello = lambda: WORDS[0]\n"},
        requires=["wordlist>=1", "numpy>=1.20", "winreg-helper; sys_platform == 'win32'"],
    )
    index.add("wordlist", "1.0", {"wordlist.py": "WORDS = ['hello']\n"})
    index.add("wordlist", "2.0", {"wordlist.py": "WORDS = ['hi']\n"})
    index.add(
        "fastmath", "1.0", {"fastmath/__init__.py": ""}, tag="cp311-cp311-manylinux_2_17_x86_64"
    )
    index.add("oldnumpy-user", "1.0", {"oldnumpy_user.py": ""}, requires=["numpy<1"])
    index.add_big("hugewheel", "1.0", HUGE_BYTES)  # a valid wheel, 4x the session's limit
    return index


@pytest.fixture(scope="module")
def index() -> Iterator[PackageIndex]:
    with make_index() as served:
        yield served


@pytest.fixture(scope="module")
def pip_kernel(
    tmp_path_factory: pytest.TempPathFactory, index: PackageIndex
) -> Iterator[RunningKernel]:
    running = start_kernel(tmp_path_factory.mktemp("pip"), extra_env=index.pip_env())
    yield running
    running.shutdown()


def test_install_brings_dependencies_importable_at_once_and_logged(
    pip_kernel: RunningKernel, index: PackageIndex
) -> None:
    done = pip_kernel.run_ok("%pip install greeting")
    out = done.stream()
    assert "Collecting greeting" in out
    assert "Requirement already satisfied: numpy>=1.20 in the sandbox image" in out
    assert "Successfully installed wordlist-2.0 greeting-1.2" in out
    assert RESTART_NOTE in out
    sha = index.sha256("greeting-1.2-py3-none-any.whl")
    assert sha in out
    assert "winreg" not in out  # a marker for another platform: not fetched
    assert pip_kernel.run_ok("import greeting; greeting.hello()").result() == "'hi'"
    # The run log names every wheel with its SHA-256.
    events = [json.loads(line) for line in pip_kernel.run_log.read_text().splitlines()]
    installs = [e for e in events if e.get("event") == "pip_install"]
    assert installs, events
    logged = {w["filename"]: w["sha256"] for w in installs[-1]["wheels"]}
    assert logged == {
        "greeting-1.2-py3-none-any.whl": sha,
        "wordlist-2.0-py3-none-any.whl": index.sha256("wordlist-2.0-py3-none-any.whl"),
    }
    # Unpacked by the guest in its own workspace, nowhere else.
    assert (pip_kernel.workspace / ".packages" / "greeting" / "__init__.py").is_file()


def test_bang_pip_and_pinned_versions(pip_kernel: RunningKernel) -> None:
    done = pip_kernel.run_ok("!pip install wordlist==1.0")
    assert "Successfully installed wordlist-1.0" in done.stream()
    listed = pip_kernel.run_ok("%pip list").stream()
    assert "wordlist" in listed and "1.0  (this session)" in listed
    assert "numpy" in listed  # the image's packages too


def test_compiled_package_is_refused_with_the_reason(pip_kernel: RunningKernel) -> None:
    done = pip_kernel.run("%pip install fastmath")
    assert done.status == "ok", done.describe()  # as pip's errors under ipykernel
    err = done.stream("stderr")
    assert "ERROR: no pure-Python wheel of fastmath" in err
    assert "compiled code" in err
    assert pip_kernel.run("import fastmath").reply["ename"] == "ModuleNotFoundError"


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for {pid}")


def test_a_wheel_over_the_limit_is_refused_without_being_held(pip_kernel: RunningKernel) -> None:
    """Issue 47, item 10: the 400 MiB wheel was downloaded whole and read into the kernel
    (+400 MB) before the 100 MiB limit refused it. Now the download is cut at the limit."""
    pip_kernel.run_ok("1")
    before = peak_rss_mib(pip_kernel.pid)
    done = pip_kernel.run("%pip install hugewheel", timeout=300)
    assert done.status == "ok", done.describe()  # as pip's errors under ipykernel
    err = done.stream("stderr")
    assert "ERROR: the packages come to more than 104,857,600 bytes" in err, err
    assert "limit for one %pip install" in err
    grown = peak_rss_mib(pip_kernel.pid) - before
    assert grown < 100, f"the kernel's peak memory grew by {grown:.0f} MiB"
    assert pip_kernel.run("import hugewheel").reply["ename"] == "ModuleNotFoundError"


def test_the_image_packages_are_kept(pip_kernel: RunningKernel) -> None:
    err = pip_kernel.run_ok("%pip install oldnumpy-user").stream("stderr")
    assert "numpy<1 cannot be installed" in err and "part of the sandbox image" in err
    assert pip_kernel.run_ok("import numpy; numpy.__version__").result().startswith("'2.")


def test_options_that_change_the_index_are_refused(
    pip_kernel: RunningKernel, index: PackageIndex
) -> None:
    asked = len(index.requests)
    for line in (
        "%pip install --index-url http://127.0.0.1:9/simple greeting",
        "%pip install greeting @ http://127.0.0.1:9/greeting.whl",
        "%pip install -r requirements.txt",
        "%pip install ./local_folder",
    ):
        err = pip_kernel.run_ok(line).stream("stderr")
        assert err.startswith("ERROR: "), (line, err)
    assert len(index.requests) == asked  # pip never ran


def test_packages_survive_a_restart(tmp_path: Path, index: PackageIndex) -> None:
    kernel = start_kernel(tmp_path / "k", extra_env=index.pip_env())
    try:
        kernel.run_ok("%pip install wordlist==1.0")
        kernel.km.restart_kernel(now=False)
        kernel.kc.wait_for_ready(timeout=120)
        assert kernel.run_ok("import wordlist; wordlist.WORDS").result() == "['hello']"
        kernel.run_ok("%pip uninstall -y wordlist")
        kernel.km.restart_kernel(now=False)
        kernel.kc.wait_for_ready(timeout=120)
        assert kernel.run("import wordlist").reply["ename"] == "ModuleNotFoundError"
    finally:
        kernel.shutdown()


def test_pip_can_be_turned_off(tmp_path: Path) -> None:
    with make_index() as index:
        env = {**index.pip_env(), "SANDBOX_KERNEL_PIP": "off"}
        kernel = start_kernel(tmp_path / "k", extra_env=env)
        try:
            err = kernel.run_ok("%pip install wordlist").stream("stderr")
            assert "ERROR: %pip install is off in this session" in err
            assert index.requests == []
        finally:
            kernel.shutdown()

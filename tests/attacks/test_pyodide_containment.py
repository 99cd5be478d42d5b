"""What Node's permission model contains under the pyodide backend, and what it does not.

Pyodide under Node is no sandbox (`import js` reaches Node's `process`): the backend is
labelled unsafe, and these tests pin down both sides of the line, so a change in what holds
is seen. Contained: the host's files outside the workspace (read and write), child
processes, native addons, the inspector. Not contained (and said so in README.md): signals
to the user's other processes; the network is not forbidden, only out of reach the way the
backend is built.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_kernel import REPLConfig
from sandbox_kernel.repl.models import CodeExecution
from sandbox_kernel.repl.pyodide import PyodideReplSandbox

NODE = "import js\nfs = js.process.getBuiltinModule('fs')\n"


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PyodideReplSandbox]:
    repl = PyodideReplSandbox(REPLConfig(workspace=tmp_path_factory.mktemp("pyodide-attacks")))
    repl.initialize()
    yield repl
    repl.destroy()


def denied(result: CodeExecution) -> bool:
    return "ERR_ACCESS_DENIED" in str(result.evalue) or "Access to this API" in str(result.evalue)


def test_host_files_outside_the_workspace_cannot_be_read(session: PyodideReplSandbox) -> None:
    assert denied(session.execute(NODE + "fs.readFileSync('/etc/passwd', 'utf8')"))
    assert denied(session.execute(NODE + "fs.readdirSync('/root')"))
    plain = session.execute("open('/etc/passwd').read()")  # Pyodide's own in-memory files
    assert plain.ename == "FileNotFoundError"


def test_host_files_outside_the_workspace_cannot_be_written(
    session: PyodideReplSandbox, tmp_path: Path
) -> None:
    target = tmp_path / "planted.txt"
    assert denied(session.execute(NODE + f"fs.writeFileSync({str(target)!r}, 'x')"))
    assert not target.exists()
    inside = session.workspace / "allowed.txt"
    assert session.execute(NODE + f"fs.writeFileSync({str(inside)!r}, 'ok')").ok
    assert inside.read_text() == "ok"


def test_child_processes_cannot_be_started(session: PyodideReplSandbox) -> None:
    spawn = "import js\ncp = js.process.getBuiltinModule('child_process')\n"
    assert denied(session.execute(spawn + "cp.execSync('id > /tmp/pwned-by-pyodide')"))
    assert denied(session.execute(spawn + "cp.spawnSync('id')"))
    assert not Path("/tmp/pwned-by-pyodide").exists()
    binding = session.execute("import js\njs.process.binding('spawn_sync')")
    assert binding.ename == "JsException" and "not available" in str(binding.evalue)


def test_native_addons_and_the_inspector_are_refused(session: PyodideReplSandbox) -> None:
    addon = session.workspace / "planted.node"
    addon.write_bytes(b"\x7fELF")  # a cell can write one into the workspace; Node won't load it
    dlopen = session.execute(f"import js\njs.process.dlopen(js.Object.new(), {str(addon)!r})")
    assert "loading addons is disabled" in str(dlopen.evalue)
    inspector = session.execute("import js\njs.process.getBuiltinModule('inspector').open(0)")
    assert denied(inspector)


def test_not_contained_signals_to_the_users_other_processes(session: PyodideReplSandbox) -> None:
    victim = subprocess.Popen(["sleep", "60"])
    try:
        assert session.execute(f"import js\njs.process.kill({victim.pid}, 'SIGTERM')").ok
        assert victim.wait(10) == -15  # Node's permission model does not cover signals
    finally:
        victim.kill()
        victim.wait()


def test_the_network_is_not_reached_though_nothing_forbids_it(
    session: PyodideReplSandbox, listening: socket.socket
) -> None:
    """Node 20's permission model has no network rule. A connection still never leaves: Node
    opens sockets on its event loop, and the worker never returns to its loop (it blocks in
    the pipe between cells and in the door during them). That is how this backend is built,
    not a boundary: README.md says so."""
    port = listening.getsockname()[1]
    code = (
        "import js\nnet = js.process.getBuiltinModule('net')\n"
        f"client = net.connect({port}, '127.0.0.1')\n"
        "import time\ntime.sleep(0.5)"
    )
    assert session.execute(code).ok
    assert session.execute("1").ok  # between cells too
    listening.settimeout(1.0)
    with pytest.raises(TimeoutError):
        listening.accept()

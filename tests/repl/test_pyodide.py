"""The pyodide backend as a user meets it: Pyodide from the pinned npm package, run by
Node.js, with the REPL interface and the native backend's behaviour (unsafe: no sandbox)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from sandbox_kernel import ExecutionPolicy, REPLConfig, create_repl
from sandbox_kernel.repl.models import ExecutionStatus
from sandbox_kernel.repl.pyodide import (
    PYODIDE_VERSION,
    PyodideReplSandbox,
    PyodideUnavailable,
    cached_pyodide,
    install_pyodide,
    pyodide_folder,
)
from tests.local_http import LocalHTTPServer

heard: list[str] = []


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PyodideReplSandbox]:
    workspace = tmp_path_factory.mktemp("pyodide-workspace")
    config = REPLConfig(
        backend="pyodide",
        workspace=workspace,
        policy=ExecutionPolicy(timeout_seconds=5),
        interrupt_grace_seconds=1.0,
        on_stdout=heard.append,
        on_llm_query=lambda prompt: f"model says {prompt}",
        on_input=lambda prompt, password: "typed",
    )
    repl = create_repl(config)
    assert isinstance(repl, PyodideReplSandbox)
    repl.initialize(context={"rows": [1, 2, 3]})
    yield repl
    repl.destroy()


def test_cells_run_in_pyodide_with_context_bridges_and_state(session: PyodideReplSandbox) -> None:
    version = session.execute("import sys\nsys.platform, sys.version_info[:2]")
    assert version.result == {"text/plain": "('emscripten', (3, 14))"}
    assert session.execute("total = sum(context['rows'])").ok
    assert session.execute("total * 2").result == {"text/plain": "12"}
    assert session.get_variable("total") == 6
    assert session.execute("llm_query('hi')").result == {"text/plain": "'model says hi'"}
    assert session.execute("input('? ')").result == {"text/plain": "'typed'"}
    failed = session.execute("1/0")
    assert failed.status is ExecutionStatus.ERROR and failed.ename == "ZeroDivisionError"
    heard.clear()
    assert session.execute("for i in range(3):\n    print('line', i)").stdout == (
        "line 0\nline 1\nline 2\n"
    )
    assert heard == ["line 0\n", "line 1\n", "line 2\n"]


def test_the_workspace_is_mounted_at_app(session: PyodideReplSandbox) -> None:
    assert session.execute("import os\nos.getcwd()").result == {"text/plain": "'/app'"}
    assert session.execute("open('out.txt', 'w').write('from pyodide')").ok
    assert (session.workspace / "out.txt").read_text() == "from pyodide"


def test_cancel_raises_keyboard_interrupt_and_keeps_the_session(
    session: PyodideReplSandbox,
) -> None:
    assert session.execute("kept = 'yes'").ok
    threading.Timer(0.5, session.cancel).start()
    stopped = session.execute("while True:\n    pass")
    assert stopped.status is ExecutionStatus.CANCELLED and stopped.ename == "KeyboardInterrupt"
    assert session.get_variable("kept") == "yes"


def test_the_timeout_restarts_node_and_says_the_state_is_lost(
    session: PyodideReplSandbox,
) -> None:
    assert session.execute("doomed = 1").ok
    timed = session.execute("import time\ntime.sleep(60)")
    assert timed.status is ExecutionStatus.TIMEOUT
    assert "Pyodide session was restarted and its state was lost" in str(timed.evalue)
    assert session.get_variable("doomed") is None
    assert session.execute("context['rows']").result == {"text/plain": "[1, 2, 3]"}


def test_what_pyodide_cannot_load_offline_is_said_clearly(session: PyodideReplSandbox) -> None:
    missing = session.execute("import numpy")
    assert missing.ename == "ModuleNotFoundError"
    assert "Pyodide's CDN, which this machine cannot reach" in str(missing.evalue)
    assert session.execute("import json, sqlite3, decimal").ok  # the standard library is there


def test_index_url_is_a_folder_or_a_list_whose_first_entry_is_used(tmp_path: Path) -> None:
    installed = cached_pyodide()
    assert installed.name == PYODIDE_VERSION
    assert pyodide_folder([str(installed), "https://cdn.example/"]) == installed
    assert pyodide_folder(f"file://{installed}") == installed
    with pytest.raises(PyodideUnavailable, match="is a URL"):
        pyodide_folder("https://cdn.jsdelivr.net/pyodide/v0.29.0/full/")
    with pytest.raises(PyodideUnavailable, match=r"missing pyodide\.mjs"):
        pyodide_folder(str(tmp_path))
    with pytest.raises(PyodideUnavailable, match="empty list"):
        pyodide_folder([])


def test_the_install_refuses_a_tampered_tarball_and_says_when_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Tampered(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"not the pinned tarball"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    monkeypatch.setenv("SANDBOX_KERNEL_CACHE", str(tmp_path / "cache"))
    server = LocalHTTPServer(Tampered)
    server.start()
    try:
        with pytest.raises(PyodideUnavailable, match="is not the pinned pyodide"):
            install_pyodide(server.base)
    finally:
        server.stop()
    with pytest.raises(PyodideUnavailable, match="could not fetch"):
        install_pyodide("http://127.0.0.1:9")  # the discard port: nothing answers
    assert not cached_pyodide().exists()  # nothing half-unpacked is left to load

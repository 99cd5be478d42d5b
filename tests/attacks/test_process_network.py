"""Attacks through processes and the network: a guest has neither.

A socket to a real server listening on the host's loopback must fail, and the server must never
see a connection; starting a process must fail cleanly, as a Python exception in the guest.
"""

from __future__ import annotations

import re
import socket

import pytest

from sandbox_kernel import PythonSandbox
from tests.attacks.conftest import HostGuard


def _ends_in_python_exception(stderr: str) -> bool:
    """A clean failure: a traceback whose last line names an exception class."""
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    return "Traceback (most recent call last)" in stderr and bool(re.match(r"[\w.]+Error\b", last))


def _no_connection_arrived(server: socket.socket) -> bool:
    try:
        connection, _ = server.accept()
    except TimeoutError:
        return True
    connection.close()
    return False


@pytest.mark.parametrize(
    "code",
    [
        "s = socket.socket()\ns.connect(('127.0.0.1', PORT))\ns.sendall(b'hello')",
        "socket.create_connection(('127.0.0.1', PORT), timeout=2)",
        "socket.create_connection(('localhost', PORT), timeout=2)",
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.sendto(b'x', ('127.0.0.1', PORT))",
        "import urllib.request\nurllib.request.urlopen(f'http://127.0.0.1:{PORT}/', timeout=2)",
    ],
    ids=["tcp-connect", "create-connection", "by-name", "udp", "urllib"],
)
def test_no_connection_reaches_a_host_server(
    py: PythonSandbox, host: HostGuard, listening: socket.socket, code: str
) -> None:
    port = listening.getsockname()[1]
    result = py.execute(f"import socket\nPORT = {port}\n{code}\nprint('CONNECTED')")
    assert "CONNECTED" not in result.stdout
    assert result.success is False
    assert result.limit is None
    assert _ends_in_python_exception(result.stderr), result.stderr
    assert _no_connection_arrived(listening), "the guest's connection reached the host server"
    host.assert_healthy(py)


def test_the_guest_cannot_listen_either(py: PythonSandbox, host: HostGuard) -> None:
    result = py.execute("import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\ns.listen()")
    assert result.success is False
    assert "OSError: [Errno" in result.stderr, result.stderr
    host.assert_healthy(py)


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (
            "import subprocess\nsubprocess.run(['ls'])",
            "OSError: [Errno 58] wasi does not support processes",
        ),
        (
            "import subprocess\nsubprocess.check_output('id', shell=True)",
            "wasi does not support processes",
        ),
        ("import os\nos.system('ls')", "AttributeError: module 'os' has no attribute 'system'"),
        ("import os\nos.fork()", "AttributeError: module 'os' has no attribute 'fork'"),
        (
            "import os\nos.execv('/bin/sh', ['sh'])",
            "AttributeError: module 'os' has no attribute 'execv'",
        ),
        ("import os\nos.popen('ls').read()", "Error"),
        ("import os\nos.kill(1, 9)", "AttributeError: module 'os' has no attribute 'kill'"),
        ("import multiprocessing\nmultiprocessing.Process(target=print).start()", "Error"),
    ],
    ids=["subprocess", "shell", "system", "fork", "execv", "popen", "kill", "multiprocessing"],
)
def test_starting_a_process_fails_cleanly(
    py: PythonSandbox, host: HostGuard, code: str, message: str
) -> None:
    result = py.execute(code + "\nprint('STARTED')")
    assert "STARTED" not in result.stdout
    assert result.success is False
    assert result.exit_code == 1
    assert result.limit is None  # a clean Python exception, not a trap
    assert _ends_in_python_exception(result.stderr), result.stderr
    assert message in result.stderr, result.stderr
    host.assert_healthy(py)


def test_threads_cannot_be_started(py: PythonSandbox, host: HostGuard) -> None:
    result = py.execute(
        "import threading\nthreading.Thread(target=print).start()\nprint('STARTED')"
    )
    assert "STARTED" not in result.stdout
    assert result.success is False
    assert _ends_in_python_exception(result.stderr), result.stderr
    host.assert_healthy(py)

"""The REPL daemon: warm sandbox sessions held by a long-lived process, for clients on this
machine.

    server.py    the daemon (`sandbox-kernel daemon start`): the socket, the pool of workers
    worker.py    one warm worker process, which serves one client's session
    client.py    DaemonClientSandbox, the ReplBackend a kernel or script holds
    protocol.py  the frames between them, and what is checked on the way

Must not import: anything Jupyter.
"""

from __future__ import annotations

from sandbox_kernel.repl.daemon.protocol import DaemonUnavailable, default_socket
from sandbox_kernel.repl.daemon.server import (
    Daemon,
    DaemonSettings,
    daemon_answers,
    daemon_status,
    start_daemon,
    stop_daemon,
)

__all__ = [
    "Daemon",
    "DaemonSettings",
    "DaemonUnavailable",
    "daemon_answers",
    "daemon_status",
    "default_socket",
    "start_daemon",
    "stop_daemon",
]

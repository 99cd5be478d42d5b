"""The shell and iopub ports bound before anything else is imported (`bind_early`), for the
app to adopt (`take`).

A client connects to a kernel's ports as soon as it has launched it, before the kernel has
bound them, and libzmq retries a refused connect after 100-200 ms (its reconnect interval
plus a random part as long), each socket on its own draw. IPKernelApp binds them after
importing ipykernel, IPython and jupyter_client, about 130 ms after launch: a socket whose
first retry came sooner waited for a second one, and this kernel's first kernel_info reply
came at 170-200 ms in half the starts and at 270-330 ms in the other half. Bound here, after
importing only zmq (about 40 ms after launch), both sockets connect at their first retry.
Only the two ports the first reply waits for are bound early: the shell's (the request) and
iopub's (the kernel holds that reply until a client subscribes, app.py).

Only a plain TCP or IPC connection file is bound early; anything else (CurveZMQ keys, a port
of 0, a file that cannot be read) is left to ipykernel, as is every error here: the kernel
then starts as ipykernel starts. The app drops the sockets when its configuration, not the
file, gives CurveZMQ keys (app.py).

Must import only the standard library and zmq: it runs before the rest of the kernel.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq

__all__ = ["EarlySockets", "bind_early", "take"]

_LINGER_MS = 1000  # ipykernel's, for both


@dataclass
class EarlySockets:
    """A context and the shell (ROUTER) and iopub (XPUB) sockets bound in it."""

    context: zmq.Context[Any]
    shell: zmq.Socket[Any]
    iopub: zmq.Socket[Any]
    transport: str
    ip: str
    shell_port: int
    iopub_port: int

    def close(self) -> None:
        for socket in (self.shell, self.iopub):
            socket.close(linger=0)
        self.context.term()


_bound: EarlySockets | None = None


def connection_file(argv: list[str]) -> Path | None:
    """The `-f FILE` (or `-f=FILE`, `--f=FILE`) of a kernel's command line."""
    for index, arg in enumerate(argv):
        if arg == "-f" and index + 1 < len(argv):
            return Path(argv[index + 1])
        for prefix in ("-f=", "--f="):
            if arg.startswith(prefix):
                return Path(arg[len(prefix) :])
    return None


def bind_early(argv: list[str]) -> EarlySockets | None:
    """Bind the shell and iopub ports that argv's connection file names, and keep them for
    `take`; None (and nothing kept) when the file is not a plain one or binding fails."""
    global _bound
    path = connection_file(argv)
    if path is None:
        return None
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        transport, ip = str(info["transport"]), str(info["ip"])
        shell_port, iopub_port = int(info["shell_port"]), int(info["iopub_port"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if info.get("curve_secretkey") or transport not in ("tcp", "ipc"):
        return None
    if shell_port <= 0 or iopub_port <= 0:
        return None
    context: zmq.Context[Any] = zmq.Context()
    made = EarlySockets(
        context,
        context.socket(zmq.ROUTER),
        context.socket(zmq.XPUB),
        transport,
        ip,
        shell_port,
        iopub_port,
    )
    try:
        for socket, port in ((made.shell, shell_port), (made.iopub, iopub_port)):
            socket.linger = _LINGER_MS
            socket.bind(_address(transport, ip, port))
    except zmq.ZMQError:
        made.close()
        return None
    _bound = made
    return made


def take(transport: str, ip: str, shell_port: int, iopub_port: int) -> EarlySockets | None:
    """The sockets bound early, when they are the ones asked for (once); else None, and any
    that were bound are closed."""
    global _bound
    early, _bound = _bound, None
    if early is None:
        return None
    wanted = (transport, ip, shell_port, iopub_port)
    if (early.transport, early.ip, early.shell_port, early.iopub_port) != wanted:
        early.close()
        return None
    return early


def _address(transport: str, ip: str, port: int) -> str:
    """ipykernel's endpoint for a port (IPKernelApp._try_bind_socket)."""
    if transport == "tcp":
        return f"tcp://{ip}:{port}"
    return f"ipc://{ip}-{port}"

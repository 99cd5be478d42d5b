"""The REPL daemon: a long-lived process holding warm sandbox sessions for its clients.

    sandbox-kernel daemon start | stop | status   [--socket PATH] [--pool N] [--max-sessions M]

It listens on a Unix socket (~/.rlm/daemon.sock by default, the seed's path; its folder is made
0700, or must already be this user's own and writable by no one else, and the socket is 0600; its
log is never opened through a link) and serves only its own user (SO_PEERCRED). It keeps `pool`
worker processes warm (daemon/worker.py: wasmtime loaded, the guest mapped, the warm image restored
once). A client's `open` takes a warm worker, which receives the client's connection itself
(SCM_RIGHTS) and serves that one session; the daemon then starts a worker to refill the pool. The
daemon never runs guest code and never relays a cell's bytes.

Faults: a frame that is malformed or too large, a peer of another user, or one that sends
nothing for OPEN_TIMEOUT seconds gets an error and is closed; the daemon goes on. A client
that stops reading is given up by its worker once a send has waited past the cell's time
limit, its grace and 5 s. A worker that
dies is reaped and the pool refilled; its client's connection is at EOF and the client says so.
`stop` ends the daemon and its workers (their clients hear the session ended); an idle worker
whose daemon died exits by itself, a busy one serves its client to the end. A second daemon on
a live socket refuses to start; a stale socket file (nothing answers) is replaced.

POSIX only: a named pipe on Windows is out of scope.

Must not import: anything Jupyter.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final

from pydantic import BaseModel, ConfigDict, Field

from sandbox_kernel.core.launch import host_python
from sandbox_kernel.repl.daemon.protocol import (
    DaemonUnavailable,
    FrameError,
    default_socket,
    exchange,
    read_frame,
    same_user,
    send_frame,
)

__all__ = [
    "Daemon",
    "DaemonSettings",
    "daemon_answers",
    "daemon_status",
    "start_daemon",
    "stop_daemon",
]

logger = logging.getLogger("sandbox_kernel")

OPEN_TIMEOUT: Final = 5.0  # seconds a new connection has to send its first frame
_FIRST_FRAME_BYTES: Final = 64 * 1024 * 1024  # an open frame may carry a large policy
_WAIT_FOR_WORKER_SECONDS: Final = 300.0  # a cold cache compiles the guest once (~1 min)
_START_SECONDS: Final = 600.0


class DaemonSettings(BaseModel):
    """How a daemon runs."""

    model_config = ConfigDict(extra="forbid")

    socket: Path = Field(default_factory=default_socket)
    pool: int = Field(default=2, ge=0, le=64)  # warm workers kept waiting
    max_sessions: int = Field(default=16, ge=1, le=1024)  # sessions served at once


class _Worker:
    def __init__(self, process: subprocess.Popen[bytes], control: socket.socket) -> None:
        self.process = process
        self.control = control
        self.warm = threading.Event()
        self.busy = False


class Daemon:
    """The server: `serve()` runs until `stop()` (or a shutdown request, or SIGTERM)."""

    def __init__(self, settings: DaemonSettings | None = None) -> None:
        self.settings = settings if settings is not None else DaemonSettings()
        self.path = self.settings.socket.expanduser()
        self._workers: dict[int, _Worker] = {}
        self._lock = threading.Condition()
        self._stopping = threading.Event()
        self._listener: socket.socket | None = None
        self._started = time.time()
        self.sessions_served = 0
        self._waiters = 0  # connections waiting for a warm worker

    # -- the socket ----------------------------------------------------------------------------

    def _bind(self) -> socket.socket:
        private_folder(self.path.parent)
        if daemon_answers(self.path):
            raise DaemonUnavailable(f"a daemon already answers at {self.path}")
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # stale: nothing answers
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_mask = os.umask(0o177)  # the socket is 0600 from birth
        try:
            listener.bind(str(self.path))
        finally:
            os.umask(old_mask)
        self.path.chmod(0o600)
        listener.listen(socket.SOMAXCONN)
        return listener

    def serve(self) -> None:
        self._listener = self._bind()
        logger.info("sandbox-kernel daemon on %s (pid %d)", self.path, os.getpid())
        refill = threading.Thread(target=self._keep_pool, name="daemon-pool", daemon=True)
        refill.start()
        try:
            while not self._stopping.is_set():
                try:
                    conn, _ = self._listener.accept()
                except OSError:
                    break  # closed by stop()
                threading.Thread(
                    target=self._welcome, args=(conn,), name="daemon-conn", daemon=True
                ).start()
        finally:
            self.stop()

    def stop(self) -> None:
        """Stop accepting, end every worker, remove the socket."""
        self._stopping.set()
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        with self._lock:
            workers = list(self._workers.values())
            self._lock.notify_all()
        for worker in workers:
            with contextlib.suppress(ProcessLookupError):
                worker.process.terminate()
        for worker in workers:
            try:
                worker.process.wait(5)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
            worker.control.close()

    # -- connections ---------------------------------------------------------------------------

    def _welcome(self, conn: socket.socket) -> None:
        """A new connection's first frame: open, status or shutdown."""
        try:
            if not same_user(conn):
                _refuse(conn, "PermissionError", "the daemon serves only its own user")
                return
            conn.settimeout(OPEN_TIMEOUT)
            try:
                request = read_frame(conn, _FIRST_FRAME_BYTES)
            except FrameError as exc:
                _refuse(conn, "ValueError", str(exc))
                return
            except TimeoutError:
                _refuse(conn, "TimeoutError", f"no request within {OPEN_TIMEOUT:g} s")
                return
            if request is None:
                conn.close()
                return
            conn.settimeout(None)
            op = request["op"]
            if op == "status":
                send_frame(conn, {"op": "status", **self.status()})
                conn.close()
            elif op == "shutdown":
                send_frame(conn, {"op": "bye"})
                conn.close()
                self._stopping.set()
                threading.Thread(target=self.stop, daemon=True).start()
            elif op == "open":
                self._hand_off(conn, request)
            else:
                _refuse(conn, "ValueError", f"no request {op!r} (open, status, shutdown)")
        except OSError:
            conn.close()

    def _hand_off(self, conn: socket.socket, request: dict[str, Any]) -> None:
        worker = self._take_worker()
        if worker is None:
            with self._lock:
                busy = self._busy()
            _refuse(conn, "RuntimeError", f"the daemon is busy ({busy} sessions) or stopping")
            return
        payload = json.dumps(request).encode("utf-8")
        try:
            socket.send_fds(worker.control, [payload], [conn.fileno()])
        except OSError:
            _refuse(conn, "RuntimeError", "the worker for this session ended; try again")
            return
        finally:
            conn.close()  # the worker holds its own copy
        self.sessions_served += 1

    def _take_worker(self) -> _Worker | None:
        """A warm idle worker, marked busy; None when at max_sessions or stopping."""
        deadline = time.monotonic() + _WAIT_FOR_WORKER_SECONDS
        with self._lock:
            self._waiters += 1
            try:
                while not self._stopping.is_set():
                    if self._busy() >= self.settings.max_sessions:
                        return None
                    for worker in self._workers.values():
                        if not worker.busy and worker.warm.is_set():
                            worker.busy = True
                            return worker
                    self._lock.notify_all()  # the pool thread starts one
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    self._lock.wait(min(left, 1.0))
                return None
            finally:
                self._waiters -= 1
                self._lock.notify_all()  # the pool thread refills

    # -- the pool ------------------------------------------------------------------------------

    def _busy(self) -> int:
        """Workers serving a session (call with the lock held)."""
        return sum(worker.busy for worker in self._workers.values())

    def _keep_pool(self) -> None:
        while not self._stopping.is_set():
            with self._lock:
                self._reap()
                idle = len(self._workers) - self._busy()
                wanted = max(self.settings.pool, self._waiters)  # pool 0: on demand
                room = self.settings.max_sessions - self._busy()
                if idle < min(wanted, room) and not self._stopping.is_set():
                    self._spawn()
                    continue
                self._lock.wait(0.5)

    def _reap(self) -> None:
        for pid, worker in list(self._workers.items()):
            if worker.process.poll() is not None:
                if not worker.warm.is_set():
                    logger.error(
                        "a daemon worker exited while warming (%s)", worker.process.returncode
                    )
                del self._workers[pid]
                worker.control.close()

    def _spawn(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv = host_python("-m", "sandbox_kernel.repl.daemon.worker", str(theirs.fileno()))
        process = subprocess.Popen(argv, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        theirs.close()
        worker = _Worker(process, mine)
        self._workers[process.pid] = worker
        threading.Thread(
            target=self._watch, args=(worker,), name="daemon-worker", daemon=True
        ).start()

    def _watch(self, worker: _Worker) -> None:
        """Wait for the worker's `warm`; then its control socket's EOF means it ended."""
        with contextlib.suppress(OSError, FrameError):
            message = read_frame(worker.control)
            if message is not None and message.get("op") == "warm":
                worker.warm.set()
                with self._lock:
                    self._lock.notify_all()
        worker.process.wait()
        with self._lock:
            self._lock.notify_all()

    def status(self) -> dict[str, Any]:
        with self._lock:
            workers = list(self._workers.values())
            busy = self._busy()
        return {
            "pid": os.getpid(),
            "socket": str(self.path),
            "uptime_seconds": round(time.time() - self._started, 1),
            "warm_workers": sum(not w.busy and w.warm.is_set() for w in workers),
            "starting_workers": sum(not w.busy and not w.warm.is_set() for w in workers),
            "sessions": busy,
            "sessions_served": self.sessions_served,
            "pool": self.settings.pool,
            "max_sessions": self.settings.max_sessions,
        }


def _refuse(conn: socket.socket, kind: str, message: str) -> None:
    with contextlib.suppress(OSError):
        send_frame(conn, {"op": "error", "type": kind, "message": message})
    conn.close()


def daemon_answers(path: Path | None = None, timeout: float = 1.0) -> bool:
    """Whether a daemon of this user answers at `path` (default ~/.rlm/daemon.sock)."""
    path = (path or default_socket()).expanduser()
    if not path.exists():
        return False
    try:
        daemon_status(path, timeout)
    except DaemonUnavailable:
        return False
    return True


def _ask(path: Path, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One request to the daemon at `path` and its answer."""
    sock, answer = exchange(path, request, timeout)
    sock.close()
    if answer is None or answer.get("op") == "error":
        detail = answer.get("message") if answer else "it closed the connection"
        raise DaemonUnavailable(f"the daemon at {path} refused: {detail}")
    return answer


def daemon_status(path: Path | None = None, timeout: float = 5.0) -> dict[str, Any]:
    """The running daemon's status; DaemonUnavailable when none answers."""
    answer = _ask((path or default_socket()).expanduser(), {"op": "status"}, timeout)
    answer.pop("op", None)
    return answer


def start_daemon(settings: DaemonSettings, log: Path | None = None) -> dict[str, Any]:
    """Start a daemon in the background (a new session, its output to `log`) and wait until
    it answers with a warm worker; its status. An answering daemon is left as it is."""
    path = settings.socket.expanduser()
    with contextlib.suppress(DaemonUnavailable):
        return daemon_status(path)
    private_folder(path.parent)
    log = log or path.with_suffix(".log")
    argv = host_python(
        "-m", "sandbox_kernel.repl.daemon", "--socket", str(path),
        "--pool", str(settings.pool), "--max-sessions", str(settings.max_sessions),
    )  # fmt: skip
    with _append_nofollow(log) as output:
        # --detach: the process forks and its first half exits at once, so the daemon is
        # nobody's child (never a zombie of ours, never killed with our terminal).
        code = subprocess.run(
            [*argv, "--detach"], stdin=subprocess.DEVNULL, stdout=output, stderr=output,
            timeout=60, check=False,
        ).returncode  # fmt: skip
    if code != 0:
        raise DaemonUnavailable(f"the daemon could not start (exit {code}); see {log}")
    deadline = time.monotonic() + _START_SECONDS
    while time.monotonic() < deadline:
        try:
            status = daemon_status(path)
        except DaemonUnavailable:
            if not _log_says_stopped(log, path):
                time.sleep(0.2)
                continue
            raise
        if status["warm_workers"] or not settings.pool:
            return status
        time.sleep(0.2)
    raise DaemonUnavailable(f"the daemon did not warm up within {_START_SECONDS:g} s; see {log}")


def private_folder(folder: Path) -> None:
    """Make `folder` (0700), or check that the one there is this user's own and no one
    else's to write: a folder another user can write (a shared /tmp, a planted link) could
    swap the socket or the log for a link to a file of theirs or of root's."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.lstat()
    problem = None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        problem = "is a link or not a folder"
    elif info.st_uid != os.getuid():
        problem = f"belongs to another user (uid {info.st_uid})"
    elif info.st_mode & 0o022:
        problem = f"can be written by other users (mode {stat.filemode(info.st_mode)})"
    if problem is not None:
        raise DaemonUnavailable(
            f"the daemon's folder {folder} {problem}: give --socket a path in a folder of "
            "your own (the default is ~/.rlm/daemon.sock)"
        )


@contextlib.contextmanager
def _append_nofollow(log: Path) -> Iterator[BinaryIO]:
    """The log opened to append, never through a link (O_NOFOLLOW), created 0600."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        descriptor = os.open(log, flags, 0o600)
    except OSError as exc:
        raise DaemonUnavailable(
            f"the daemon's log {log} cannot be opened: {exc.strerror}"
        ) from None
    with os.fdopen(descriptor, "ab") as output:
        yield output


def _log_says_stopped(log: Path, path: Path) -> bool:
    """Whether the daemon's log says it ended (then waiting on is pointless)."""
    with contextlib.suppress(OSError):
        return f"daemon stopped: {path}" in log.read_text(errors="replace")[-4096:]
    return False


def stop_daemon(path: Path | None = None, timeout: float = 30.0) -> bool:
    """Ask the daemon to stop and wait until its socket is gone; False when none answered."""
    path = (path or default_socket()).expanduser()
    try:
        _ask(path, {"op": "shutdown"}, 5.0)
    except DaemonUnavailable:
        return False
    deadline = time.monotonic() + timeout
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


def main(argv: list[str] | None = None) -> int:
    """`python -m sandbox_kernel.repl.daemon`: serve in the foreground."""
    import argparse

    parser = argparse.ArgumentParser(prog="sandbox-kernel daemon")
    parser.add_argument("--socket", type=Path, default=default_socket())
    parser.add_argument("--pool", type=int, default=2)
    parser.add_argument("--max-sessions", type=int, default=16)
    parser.add_argument("--detach", action="store_true", help="fork into the background")
    args = parser.parse_args(argv)
    settings = DaemonSettings(socket=args.socket, pool=args.pool, max_sessions=args.max_sessions)
    if args.detach:
        if os.fork() > 0:  # no thread exists yet: forking is safe here
            os._exit(0)
        os.setsid()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    daemon = Daemon(settings)
    signal.signal(signal.SIGTERM, lambda *_: daemon.stop())
    try:
        daemon.serve()
    except DaemonUnavailable as exc:
        print(f"sandbox-kernel daemon: {exc}", file=sys.stderr)
        print(f"daemon stopped: {settings.socket.expanduser()}", file=sys.stderr, flush=True)
        return 1
    logger.info("daemon stopped: %s", settings.socket.expanduser())
    return 0

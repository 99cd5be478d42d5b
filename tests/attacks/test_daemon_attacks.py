"""Attacks on the REPL daemon's socket and its sessions: bad frames, silence, floods, a
client that leaves mid-cell, a worker killed mid-cell, a daemon killed under its clients,
another user at the socket. After each: a clear error, the daemon lives, the next session
works."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from sandbox_kernel.repl.daemon import Daemon, DaemonSettings, daemon_status, stop_daemon
from sandbox_kernel.repl.daemon.client import DaemonClientSandbox
from sandbox_kernel.repl.daemon.protocol import DaemonUnavailable, connect, read_frame
from sandbox_kernel.repl.models import ExecutionStatus
from tests.repl.conftest import repl_config
from tests.repl.daemon_fixtures import (
    alive,
    daemon_client,
    daemon_session,
    pool_is_warm,
    running_daemon,
    wait_for,
)


def raw(path: Path, data: bytes, timeout: float = 10.0) -> dict[str, object] | None:
    """Send `data` as it is and read the daemon's answer."""
    with connect(path, timeout) as sock:
        sock.sendall(data)
        return read_frame(sock)


def framed(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def still_serves(path: Path, workspace: Path) -> None:
    with daemon_session(path, workspace) as repl:
        assert repl.execute("6 * 7").result == {"text/plain": "42"}


@pytest.mark.parametrize(
    "data",
    [
        framed(b"not json"),
        framed(b"[1, 2]"),
        framed(b'{"no": "op"}'),
        framed(b"\xff\xfe"),
        framed(b"[" * 100_000 + b"]" * 100_000),
        framed(b'{"op": "format-disk"}'),
        framed(b'{"op": "open", "config": {"secret_field": 1}, "callbacks": []}'),
        framed(b'{"op": "open", "config": {"policy": {"timeout_seconds": -5}}, "callbacks": []}'),
        framed(b'{"op": "open", "config": {}, "callbacks": ["os.system"]}'),
        struct.pack(">I", 2**32 - 1) + b"x" * 100,
    ],
    ids=[
        "not-json",
        "array",
        "no-op",
        "not-utf8",
        "deep",
        "unknown-op",
        "unknown-config",
        "bad-config",
        "unknown-callback",
        "oversized",
    ],
)
def test_a_bad_frame_gets_an_error_and_the_daemon_lives(
    daemon: Path, workspace: Path, data: bytes
) -> None:
    answer = raw(daemon, data)
    assert answer is not None and answer["op"] == "error", answer
    assert isinstance(answer["message"], str) and answer["message"]
    still_serves(daemon, workspace)


def test_silent_and_half_sent_connections_time_out_and_block_nobody(
    daemon: Path, workspace: Path
) -> None:
    held = []
    for data in (b"", b"\x00\x00", framed(b'{"op": "status"}')[:-3]):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(daemon))
        sock.sendall(data)
        held.append(sock)
    try:
        assert daemon_status(daemon)["pid"] > 0  # answered while the three are held
        still_serves(daemon, workspace)
        for sock in held:
            sock.settimeout(15)
            answer = read_frame(sock)  # the daemon gives up on them and says why
            assert answer is not None and answer["type"] in {"TimeoutError", "ValueError"}
    finally:
        for sock in held:
            sock.close()


def test_a_flood_of_connections_leaves_the_daemon_serving(daemon: Path, workspace: Path) -> None:
    answers: list[object] = []

    def knock() -> None:
        answer = raw(daemon, framed(b'{"op": "status"}'), timeout=60)
        answers.append(answer and answer["op"])

    threads = [threading.Thread(target=knock) for _ in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    assert answers == ["status"] * 200
    still_serves(daemon, workspace)


def test_a_client_that_leaves_mid_cell_frees_its_session(daemon: Path, workspace: Path) -> None:
    repl = daemon_client(daemon, workspace, policy={"timeout_seconds": 600})
    pid = repl.worker_pid
    assert pid is not None
    runner = threading.Thread(target=repl.execute, args=("while True: pass",), daemon=True)
    runner.start()
    time.sleep(0.5)
    assert repl._sock is not None
    repl._sock.shutdown(socket.SHUT_RDWR)  # the client process's end, as if it died
    wait_for(lambda: not alive(pid), seconds=30, what="the worker's exit")
    wait_for(lambda: daemon_status(daemon)["sessions"] == 0, what="the session freed")
    still_serves(daemon, workspace)


def test_a_client_that_stops_reading_does_not_hold_its_worker_forever(daemon: Path) -> None:
    """The client opens a session and asks for a cell that prints without end, then never
    reads again: the worker's sends block, the cell's limit passes, and the worker gives the
    client up and exits instead of waiting in a send forever."""
    sock = connect(daemon, 10)
    try:
        open_ = b'{"op": "open", "config": {}, "callbacks": ["stdout"]}'
        sock.sendall(framed(open_))
        ready = read_frame(sock)
        assert ready is not None and ready["op"] == "ready", ready
        pid = ready["pid"]
        assert isinstance(pid, int)
        cell = b'{"op": "execute", "id": 1, "code": "while True: print(\'x\' * 1000)"}'
        sock.sendall(framed(cell))
        wait_for(lambda: not alive(pid), seconds=60, what="the worker giving the client up")
    finally:
        sock.close()
    wait_for(lambda: daemon_status(daemon)["sessions"] == 0, what="the session freed")


def test_a_worker_killed_mid_cell_is_reported_and_replaced(daemon: Path, workspace: Path) -> None:
    repl = daemon_client(daemon, workspace)
    try:
        assert repl.execute("x = 1").ok
        pid = repl.worker_pid
        assert pid is not None
        threading.Timer(0.5, os.kill, (pid, signal.SIGKILL)).start()
        lost = repl.execute("import time\ntime.sleep(20)")
        assert lost.status is ExecutionStatus.ERROR and lost.ename == "SandboxSessionLost"
        assert "lost" in str(lost.evalue)
        again = repl.execute("x")  # a new session: the old variables are gone, plainly
        assert again.ename == "NameError"
        assert repl.worker_pid != pid and repl.sessions_opened == 2
    finally:
        repl.destroy()
    wait_for(lambda: pool_is_warm(daemon), what="the pool refilled")


def test_a_daemon_killed_under_its_clients_hangs_nobody(tmp_path: Path, workspace: Path) -> None:
    with running_daemon(tmp_path / "killed") as path:
        repl = daemon_client(path, workspace)
        try:
            assert repl.execute("kept = 'here'").ok
            os.kill(daemon_status(path)["pid"], signal.SIGKILL)
            # the busy worker serves its client to the end
            assert repl.get_variable("kept") == "here"
            started = time.monotonic()
            with pytest.raises(DaemonUnavailable):
                daemon_client(path, workspace)  # the stale socket answers nobody
            assert time.monotonic() - started < 10
            assert not stop_daemon(path)
            assert not DaemonClientSandbox.available(path)
        finally:
            repl.destroy()
        # a new daemon replaces the stale socket
        with running_daemon(tmp_path / "killed") as again:
            still_serves(again, workspace)


def test_a_daemon_stopped_under_a_running_cell_answers_its_client(
    tmp_path: Path, workspace: Path
) -> None:
    with running_daemon(tmp_path / "stopped") as path:
        repl = daemon_client(path, workspace)
        try:
            threading.Timer(0.5, stop_daemon, (path,)).start()
            started = time.monotonic()
            lost = repl.execute("import time\ntime.sleep(60)")
            assert lost.ename == "SandboxSessionLost"  # told plainly, within seconds
            assert time.monotonic() - started < 15
            with pytest.raises(DaemonUnavailable, match="no daemon answers"):
                repl.execute("1")  # and no daemon to open a new session with: said so
        finally:
            repl.destroy()


def test_a_second_daemon_on_a_live_socket_refuses(daemon: Path) -> None:
    with pytest.raises(DaemonUnavailable, match="already answers"):
        Daemon(DaemonSettings(socket=daemon)).serve()
    assert daemon_status(daemon)["pid"] > 0


@pytest.mark.skipif(os.getuid() != 0, reason="switching to another user needs root")
def test_another_user_is_refused_even_when_the_socket_is_opened_to_all() -> None:
    with (
        tempfile.TemporaryDirectory(prefix="sandbox-kernel-open-", dir="/tmp") as top,
        running_daemon(Path(top)) as path,
    ):
        for opened in (Path(top), path.parent):
            opened.chmod(0o777)
        path.chmod(0o666)  # the daemon makes it 0600; the peer check must hold anyway
        probe = (
            "import socket, struct, sys\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            f"s.connect({str(path)!r})\n"
            'body = b\'{"op": "status"}\'\n'
            "try:\n"  # the daemon may refuse, answer and close before the request is sent
            "    s.sendall(struct.pack('>I', len(body)) + body)\n"
            "except BrokenPipeError:\n"
            "    pass\n"
            "print(s.recv(4096))\n"
        )
        done = subprocess.run(
            ["/usr/bin/python3", "-c", probe],
            user=65534,
            cwd="/",
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        assert "PermissionError" in done.stdout and "pid" not in done.stdout


def test_frames_from_a_client_over_the_cap_end_only_that_session(
    daemon: Path, workspace: Path
) -> None:
    repl = DaemonClientSandbox(repl_config(workspace, daemon_socket=daemon, backend="daemon"))
    repl.initialize()
    try:
        sock = repl._sock
        assert sock is not None
        sock.settimeout(10)
        sock.sendall(struct.pack(">I", 2**31) + b"x" * 64)
        answer = read_frame(sock)
        assert answer is not None and answer["op"] == "error" and "over" in str(answer["message"])
    finally:
        repl.destroy()

    still_serves(daemon, workspace)


# -- the daemon's folder (issue 31, item 6) ----------------------------------------------------


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim" / "passwd"
    victim.parent.mkdir()
    victim.write_text("root:x:0:0\n")
    return victim


@pytest.mark.parametrize("folder_kind", ["other-users-shared", "world-writable", "link-to-folder"])
def test_a_folder_the_daemon_did_not_make_is_refused(tmp_path: Path, folder_kind: str) -> None:
    """`daemon start --socket DIR/d.sock` in a folder others can write: refused before anything
    is written there, and a log planted as a link to another file is never followed."""
    victim = _victim(tmp_path)
    folder = tmp_path / "shared"
    if folder_kind == "link-to-folder":
        (tmp_path / "real").mkdir(mode=0o700)
        folder.symlink_to(tmp_path / "real")
    else:
        folder.mkdir()
        os.chmod(folder, 0o1777 if folder_kind == "other-users-shared" else 0o777)
        if folder_kind == "other-users-shared":
            os.chown(folder, 65534, 65534)  # nobody's, as /tmp is root's
    (folder / "d.log").symlink_to(victim)
    command = [sys.executable, "-m", "sandbox_kernel.cli", "daemon", "start"]
    done = subprocess.run(
        [*command, "--socket", str(folder / "d.sock"), "--pool", "1"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "folder of your own" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert victim.read_text() == "root:x:0:0\n"
    assert not (folder / "d.sock").exists()


def test_a_log_planted_as_a_link_is_not_followed(tmp_path: Path) -> None:
    from sandbox_kernel.repl.daemon import start_daemon

    victim = _victim(tmp_path)
    folder = tmp_path / "mine"
    folder.mkdir(mode=0o700)
    (folder / "d.log").symlink_to(victim)
    with pytest.raises(DaemonUnavailable, match="cannot be opened"):
        start_daemon(DaemonSettings(socket=folder / "d.sock", pool=1))
    assert victim.read_text() == "root:x:0:0\n"

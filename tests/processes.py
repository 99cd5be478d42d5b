"""Servers the tests start as users start them (a gateway, a Jupyter server, the agent
server): wait until one answers, and stop it for good."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx


def wait_until_up(
    answers: Callable[[], bool],
    process: subprocess.Popen[bytes],
    log: Path,
    what: str,
    timeout: float = 60.0,
) -> None:
    """Poll `answers` until it is true; fail with the server's log if the process ends or
    `timeout` seconds pass. A connection refused counts as "not yet"."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if answers():
                return
        except (httpx.TransportError, OSError):
            pass
        assert process.poll() is None, f"{what} ended: {log.read_text()[-5000:]}"
        assert time.monotonic() < deadline, (
            f"{what} did not answer within {timeout:g} s: " + (log.read_text()[-3000:])
        )
        time.sleep(0.2)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 30 s."""
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on at `host` right now."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])

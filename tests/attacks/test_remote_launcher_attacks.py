"""Attacks on the Enterprise Gateway launcher's communication port (kernel/remote.py).

The port takes the gateway's signal requests, unauthenticated (the protocol has no secret for
it), so anyone who reaches it can send one. Enterprise Gateway's own launcher obeys any signal
number and reads a request until the sender stops; ours obeys only the gateway's four, reads at
most 4 KB within 5 s, and drops anything else. After each attack: the kernel answers, its
session is intact, and the gateway's own interrupt still works through the same port.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.kernel.remote_launch import LaunchedKernel, start_launched

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaunchedKernel]:
    kernel = start_launched(tmp_path_factory.mktemp("launched-attacks"))
    try:
        kernel.run_ok("treasure = [1, 2, 3]")
        yield kernel
    finally:
        kernel.stop()


def _still_whole(kernel: LaunchedKernel) -> None:
    """The process lives, the session is kept, and the gateway's interrupt still lands."""
    assert kernel.process.poll() is None, kernel.log.read_text()[-3000:]
    cell = kernel.run("print(treasure)", timeout=30)
    assert cell.status == "ok" and cell.stream() == "[1, 2, 3]\n", cell.describe()
    running = kernel.send("import time\ntime.sleep(60)")
    time.sleep(1.0)
    kernel.request(json.dumps({"signum": int(signal.SIGINT)}).encode())
    interrupted = kernel.collect(running, timeout=30)
    assert interrupted.reply["ename"] == "KeyboardInterrupt", interrupted.describe()


@pytest.mark.parametrize(
    "request_",
    [
        {"signum": int(signal.SIGSTOP)},  # would freeze the kernel for good
        {"signum": int(signal.SIGQUIT)},  # would kill it with a core dump
        {"signum": int(signal.SIGUSR1)},  # would kill it (no handler)
        {"signum": int(signal.SIGSEGV)},
        {"signum": -1},
        {"signum": 10**30},
        {"signum": "9"},
        {"signum": 2.0},
        {"signum": True},
        {"signum": [2]},
    ],
    ids=["sigstop", "sigquit", "sigusr1", "sigsegv", "negative", "huge", "string", "float",
         "bool", "list"],
)  # fmt: skip
def test_a_signal_the_gateway_never_sends_is_ignored(
    launched: LaunchedKernel, request_: dict[str, object]
) -> None:
    launched.request(json.dumps(request_).encode())
    time.sleep(0.3)
    _still_whole(launched)


@pytest.mark.parametrize(
    "data",
    [
        b"x" * (1 << 20),
        json.dumps({"signum": 0, "pad": "x" * 10_000}).encode(),
        b"\xff\xfe not utf-8",
        b"{not json",
        b"[2, 15]",
        b"",
    ],
    ids=["one-megabyte", "padded-json", "not-utf8", "not-json", "json-array", "empty"],
)
def test_malformed_and_oversized_requests_are_dropped(
    launched: LaunchedKernel, data: bytes
) -> None:
    # The listener may close on an oversized request before it is all sent.
    with contextlib.suppress(OSError):
        launched.request(data)
    _still_whole(launched)


def test_a_client_that_connects_and_says_nothing_does_not_hold_the_port(
    launched: LaunchedKernel,
) -> None:
    """A silent connection is dropped after 5 s; the gateway's next request is served."""
    silent = socket.create_connection(("127.0.0.1", launched.comm_port), timeout=10)
    try:
        _still_whole(launched)  # its interrupt waits at most the 5 s, then lands
    finally:
        silent.close()


def test_a_flood_of_connections_leaves_the_kernel_whole(launched: LaunchedKernel) -> None:
    for _ in range(200):
        # A full backlog refuses some: that is the flood's cost, not the kernel's.
        with contextlib.suppress(OSError):
            launched.request(json.dumps({"signum": 0}).encode())
    _still_whole(launched)


def test_clients_sending_a_byte_a_second_do_not_delay_the_gateway(
    launched: LaunchedKernel,
) -> None:
    """Each read used to have its own 5 s, and connections were read one at a time: a byte a
    second held the port (and the gateway's interrupt) for as long as the sender liked."""
    stop = threading.Event()

    def trickle() -> None:
        with contextlib.suppress(OSError):
            sock = socket.create_connection(("127.0.0.1", launched.comm_port), timeout=10)
            with sock:
                for byte in b'{"signum": 0' + b" " * 100:
                    if stop.is_set():
                        return
                    sock.sendall(bytes([byte]))
                    time.sleep(1.0)

    senders = [threading.Thread(target=trickle, daemon=True) for _ in range(3)]
    for sender in senders:
        sender.start()
    time.sleep(1.0)  # the slow senders are connected first
    try:
        _still_whole(launched)
    finally:
        stop.set()
        for sender in senders:
            sender.join(timeout=5)

"""The host process's sys.stdout and sys.stderr (`QuietOutStream`), on ipykernel's real iopub
thread and a real subscriber: a flush with nothing written returns without a trip through the
iopub thread, and what was written still reaches the subscriber by the flush's end."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq
from jupyter_client.session import Session

from sandbox_kernel.kernel.app import ListenedIOPub, QuietOutStream, SandboxKernelApp

RECEIVE_MS = 5000


class _Counted:
    """The iopub thread's `schedule`, counted (the trips a flush makes through that thread)."""

    def __init__(self, schedule: Callable[[Callable[[], Any]], None]) -> None:
        self.calls = 0
        self._schedule = schedule

    def __call__(self, function: Callable[[], Any]) -> None:
        self.calls += 1
        self._schedule(function)


def quiet_stream(thread: ListenedIOPub, session: Session, name: str) -> QuietOutStream:
    return QuietOutStream(session, thread, name, watchfd=False)  # type: ignore[no-untyped-call]


def next_stream(subscriber: zmq.Socket[bytes], session: Session, wait_ms: int) -> dict[str, Any]:
    """The next stream message's content, past others (ipykernel welcomes a subscriber)."""
    while subscriber.poll(wait_ms):
        message = session.deserialize(session.feed_identities(subscriber.recv_multipart())[1])
        if message["msg_type"] == "stream":
            return dict(message["content"])
    raise AssertionError(f"no stream message within {wait_ms} ms")


@pytest.fixture
def iopub() -> Iterator[tuple[ListenedIOPub, zmq.Socket[bytes], Session]]:
    context = zmq.Context()
    publisher = context.socket(zmq.XPUB)
    port = publisher.bind_to_random_port("tcp://127.0.0.1")
    session = Session(key=b"test-key")
    thread = ListenedIOPub(publisher, pipe=True, session=session)
    thread.start()  # type: ignore[no-untyped-call]
    subscriber = context.socket(zmq.SUB)
    subscriber.setsockopt(zmq.SUBSCRIBE, b"")
    subscriber.connect(f"tcp://127.0.0.1:{port}")
    assert thread.subscribed.wait(RECEIVE_MS / 1000)
    try:
        yield thread, subscriber, session
    finally:
        thread.stop()  # type: ignore[no-untyped-call]
        thread.close()  # type: ignore[no-untyped-call]
        subscriber.close(linger=0)
        context.term()


def test_a_flush_with_nothing_written_does_not_wait_for_the_iopub_thread(
    iopub: tuple[ListenedIOPub, zmq.Socket[bytes], Session],
) -> None:
    thread, _, session = iopub
    stream = quiet_stream(thread, session, "stdout")
    counted = _Counted(thread.schedule)
    thread.schedule = counted  # type: ignore[method-assign]
    for _ in range(5):
        stream.flush()
    assert counted.calls == 0


def test_what_was_written_is_sent_by_the_end_of_the_flush(
    iopub: tuple[ListenedIOPub, zmq.Socket[bytes], Session],
) -> None:
    thread, subscriber, session = iopub
    stream = quiet_stream(thread, session, "stderr")
    stream.flush_interval = 60.0  # only the flush below can send it in time
    stream.write("from the host\n")
    stream.flush()
    assert next_stream(subscriber, session, 0) == {"name": "stderr", "text": "from the host\n"}
    counted = _Counted(thread.schedule)
    thread.schedule = counted  # type: ignore[method-assign]
    stream.flush()  # sent: nothing is pending any more
    assert counted.calls == 0


def test_a_write_from_another_thread_between_flushes_is_sent(
    iopub: tuple[ListenedIOPub, zmq.Socket[bytes], Session],
) -> None:
    thread, subscriber, session = iopub
    stream = quiet_stream(thread, session, "stdout")
    stream.flush()
    writer = threading.Thread(target=stream.write, args=("late\n",))
    writer.start()
    writer.join()
    stream.flush()
    assert next_stream(subscriber, session, RECEIVE_MS)["text"] == "late\n"


def test_the_kernel_application_uses_it() -> None:
    app = SandboxKernelApp()  # type: ignore[no-untyped-call]
    assert app.outstream_class == "sandbox_kernel.kernel.app.QuietOutStream"

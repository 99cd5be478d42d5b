"""The host process's sys.stdout and sys.stderr (`QuietOutStream`), on ipykernel's real iopub
thread and a real subscriber: a flush with nothing written returns without a trip through the
iopub thread, and what was written is still sent by the flush (not a minute later by the
stream's timer)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import zmq
from jupyter_client.session import Session

from sandbox_kernel.kernel.app import ListenedIOPub, QuietOutStream, SandboxKernelApp

RECEIVE_MS = 5000
_START_TURNS = 3  # turns of the iopub loop past its start (_loop_started)


@dataclass
class IOPub:
    """ipykernel's iopub thread on a real socket, a subscriber to it, and their session."""

    thread: ListenedIOPub
    subscriber: zmq.Socket[bytes]
    session: Session

    def stream(self, name: str) -> QuietOutStream:
        made: QuietOutStream = QuietOutStream(  # type: ignore[no-untyped-call]
            self.session, self.thread, name, watchfd=False
        )
        return made

    def trips(self, stream: QuietOutStream, flushes: int = 1) -> int:
        """How many times `flushes` flushes of `stream` went through the iopub thread."""
        schedule, calls = self.thread.schedule, []

        def counted(function: Callable[[], Any]) -> None:
            calls.append(function)
            schedule(function)  # type: ignore[no-untyped-call]

        self.thread.schedule = counted  # type: ignore[method-assign]
        try:
            for _ in range(flushes):
                stream.flush()
        finally:
            self.thread.schedule = schedule  # type: ignore[method-assign]
        return len(calls)

    def next_stream(self, wait_ms: int) -> dict[str, Any]:
        """The next stream message's content, past others (ipykernel welcomes a subscriber)."""
        while self.subscriber.poll(wait_ms):
            frames = self.subscriber.recv_multipart()
            message = self.session.deserialize(self.session.feed_identities(frames)[1])
            if message["msg_type"] == "stream":
                return dict(message["content"])
        raise AssertionError(f"no stream message within {wait_ms} ms")


def _loop_started(thread: ListenedIOPub) -> None:
    """Wait until the iopub thread runs its lasting loop. It first runs the loop briefly
    (`run_sync`, a few turns) to start its own task, and may already answer the subscriber
    then; a callback that lands in those turns runs there, and a stop is taken by them. Three
    turns of the loop, one after another, are past them."""
    for _ in range(_START_TURNS):
        turned = threading.Event()
        thread.io_loop.add_callback(turned.set)
        assert turned.wait(RECEIVE_MS / 1000)


def _stop_from_inside(thread: ListenedIOPub) -> None:
    """End the iopub thread's loop from inside it, once its own task is cancelled and done
    (ipykernel's stop() leaves that task pending, and Python complains of it at exit).
    `_stopped` first, as ipykernel's stop() does: a stop that lands while the thread is still
    starting its loop is otherwise taken by that start, and the loop then runs forever."""

    async def finish() -> None:
        task: asyncio.Task[None] | None = thread._event_pipe_gc_task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        thread.io_loop.stop()

    thread._stopped = True
    thread.io_loop.add_callback(finish)


@pytest.fixture
def iopub() -> Iterator[IOPub]:
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
    _loop_started(thread)
    try:
        yield IOPub(thread, subscriber, session)
    finally:
        _stop_from_inside(thread)
        thread.thread.join(RECEIVE_MS / 1000)
        assert not thread.thread.is_alive()
        for pipe in thread._event_pipes.values():
            pipe.close()
        thread.close()  # type: ignore[no-untyped-call]
        subscriber.close(linger=0)
        context.term()


def test_a_flush_with_nothing_written_does_not_wait_for_the_iopub_thread(iopub: IOPub) -> None:
    assert iopub.trips(iopub.stream("stdout"), flushes=5) == 0


def test_what_was_written_is_sent_by_the_end_of_the_flush(iopub: IOPub) -> None:
    stream = iopub.stream("stderr")
    stream.flush_interval = 60.0  # the stream's own timer would send it a minute later
    stream.write("from the host\n")
    stream.flush()
    assert iopub.next_stream(RECEIVE_MS) == {"name": "stderr", "text": "from the host\n"}
    assert iopub.trips(stream) == 0  # sent: nothing is pending any more


def test_a_write_from_another_thread_between_flushes_is_sent(iopub: IOPub) -> None:
    stream = iopub.stream("stdout")
    stream.flush()
    writer = threading.Thread(target=stream.write, args=("late\n",))
    writer.start()
    writer.join()
    assert iopub.trips(stream) > 0
    assert iopub.next_stream(RECEIVE_MS)["text"] == "late\n"


def test_the_kernel_application_uses_it() -> None:
    app = SandboxKernelApp()  # type: ignore[no-untyped-call]
    assert app.outstream_class == "sandbox_kernel.kernel.app.QuietOutStream"

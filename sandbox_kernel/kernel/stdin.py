"""input() for guest code: one input_request at a time on the stdin socket, and stoppable.

ipykernel's own reader (Kernel._input_request) waits for a reply forever. A guest's input()
is answered on a bridge helper thread that the session abandons when the cell is interrupted
or times out; with ipykernel's reader each abandoned input() left a thread polling the stdin
socket, several threads then used one zmq socket at once (libzmq aborts the process), or an
old thread took the answer meant for the next prompt. Here:

- a lock lets one request use the socket at a time;
- the wait polls in short slices and ends as soon as `stop()` says the execution it serves
  was interrupted or ran out of time (EOFError: the guest never sees it, the session has moved
  on), and also when the next request wants the socket;
- replies queued before a request are dropped, and a reply whose parent header names another
  request is ignored, so a late answer to an abandoned prompt is never given to the next one
  (jupyter_client's `input()` sends no parent header: such a reply is taken as it comes).

Must not import: wasmtime, sandbox_kernel.host.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import zmq

__all__ = ["StdinReader"]

_POLL_SECONDS = 0.01
_EOF = "\x04"  # what a frontend sends for end of input


class StdinReader:
    """Sends input_requests and waits for their replies, for one kernel."""

    def __init__(self, session: Any, socket: zmq.Socket[Any]) -> None:
        self._session = session
        self._socket = socket
        self._lock = threading.Lock()  # the socket's user
        self._counter = threading.Lock()
        self._generation = 0  # bumped by each new request: an older wait gives way

    def request(
        self,
        prompt: str,
        password: bool,
        ident: Any,
        parent: dict[str, Any],
        stop: Callable[[], bool],
    ) -> str:
        """The line the user typed for `prompt`; EOFError when the user sent end of input,
        or when `stop()` turned True (or a newer request came) before the answer."""
        with self._counter:  # a wait still holding the socket sees this and gives way
            self._generation += 1
            generation = self._generation
        while not self._lock.acquire(timeout=_POLL_SECONDS):
            if stop() or generation != self._generation:
                raise EOFError("input() was interrupted")
        try:
            self._purge()
            content = {"prompt": prompt, "password": password}
            sent = self._session.send(self._socket, "input_request", content, parent, ident=ident)
            request_id = sent["header"]["msg_id"]
            while True:
                if stop() or generation != self._generation:
                    raise EOFError("input() was interrupted")
                if not self._socket.poll(int(_POLL_SECONDS * 1000)):
                    continue
                reply = self._receive()
                if reply is not None and _answers(reply, request_id):
                    return self._value(reply)
        finally:
            self._lock.release()

    def _purge(self) -> None:
        """Drop replies to earlier prompts still queued on the socket."""
        while self._socket.poll(0):
            self._receive()

    def _receive(self) -> dict[str, Any] | None:
        try:
            _, reply = self._session.recv(self._socket, mode=zmq.NOBLOCK)
        except (zmq.ZMQError, ValueError, KeyError, TypeError):
            return None  # a malformed message is skipped, as ipykernel does
        return reply if isinstance(reply, dict) else None

    @staticmethod
    def _value(reply: dict[str, Any]) -> str:
        content = reply.get("content")
        value = content.get("value") if isinstance(content, dict) else None
        if not isinstance(value, str):
            return ""
        if value == _EOF:
            raise EOFError("EOF when reading a line")
        return value


def _answers(reply: dict[str, Any], request_id: str) -> bool:
    parent = reply.get("parent_header")
    named = parent.get("msg_id") if isinstance(parent, dict) else None
    return not named or named == request_id

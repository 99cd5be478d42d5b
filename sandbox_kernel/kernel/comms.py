"""Comms between the page and the guest (ipywidgets), for the kernel.

    page -> guest   comm_open, comm_msg and comm_close on the shell channel: each is handed
                    to the guest's comm manager as a turn of its own (ReplSandbox.deliver_comm:
                    the policy's fuel and time, ended by an interrupt, rolled back if it must
                    be stopped); what the handler prints or displays goes out with the message
                    as its parent, as ipykernel's does (an Output widget captures it)
    page <- guest   a guest comm's messages (REPLConfig.on_comm) through the widget firewall
                    (widgets.py) to IOPub, with their buffers
    comm_info_request   the guest's open comms

A slider moved while a cell runs is handled after the cell, and every comm message and cell
in the order they came, as a synchronous cell on ipykernel has it: ipykernel 7 dispatches a
comm message that arrives during a cell at once (for async cells), and a cell here runs on a
thread, so the kernel orders them itself (`gate`, which cells take too). A comm's handler runs
on the event loop, as ipykernel's does, so comm messages that follow one another are handled
one after another, each with its busy and idle status. A message from the
page over MAX_INBOUND_BYTES is dropped (logged).

Must not import: wasmtime.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, Protocol

from sandbox_kernel.kernel.firewall import OutputFirewall, removal_note
from sandbox_kernel.kernel.streams import StreamPublisher
from sandbox_kernel.kernel.widgets import WidgetFirewall
from sandbox_kernel.repl.models import COMM_TYPES, CommMessage

if TYPE_CHECKING:
    import logging

    from sandbox_kernel.kernel.publisher import Publisher
    from sandbox_kernel.repl.sandbox import ReplSandbox

__all__ = ["KernelComms"]

MAX_INBOUND_BYTES: Final = 16 * 1024 * 1024


class CommHost(Protocol):
    """What the comm handlers use of the kernel (ipykernel's Kernel and ours): its session,
    publisher and firewall, its shell channel's handlers and parents, its log."""

    repl: ReplSandbox
    out: Publisher
    firewall: OutputFirewall
    shell_handlers: dict[str, Any]
    iopub_socket: Any
    session: Any
    log: logging.Logger
    _shell_parent_ident: Any

    # Methods, ipykernel's untyped there (send_response: stream, msg_type, content, ...,
    # buffers=, metadata=), as read-only members.
    @property
    def send_response(self) -> Callable[..., Any]: ...
    @property
    def get_parent(self) -> Callable[..., dict[str, Any]]: ...
    @property
    def set_parent(self) -> Callable[..., None]: ...
    @property
    def _get_shell_context_var(self) -> Callable[[Any], Any]: ...
    @property
    def _send_stream(self) -> Callable[[str, str, dict[str, Any]], None]: ...
    @property
    def _session_ready(self) -> Callable[..., Awaitable[None]]: ...


class Gate:
    """First come, first served, across threads and event loops (ipykernel 7 dispatches on
    more than one loop, so an asyncio.Lock cannot be shared): each caller takes a ticket as
    it arrives and goes in when its number is served. A caller that gives up (cancelled)
    gives its turn away."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._issued = 0
        self._serving = 0
        self._abandoned: set[int] = set()

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        with self._changed:
            ticket = self._issued
            self._issued += 1
        try:
            if not self._served(ticket):  # no await when it is free: the caller runs now
                await asyncio.to_thread(self._wait, ticket)
        except BaseException:
            self._leave(ticket, abandoned=True)
            raise
        try:
            yield
        finally:
            self._leave(ticket, abandoned=False)

    def _served(self, ticket: int) -> bool:
        with self._changed:
            return self._serving == ticket

    def _wait(self, ticket: int) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._serving >= ticket)  # passed, if given away

    def _leave(self, ticket: int, abandoned: bool) -> None:
        with self._changed:
            if abandoned and self._serving != ticket:
                self._abandoned.add(ticket)  # skipped when its turn comes
                return
            self._serving += 1
            while self._serving in self._abandoned:
                self._abandoned.discard(self._serving)
                self._serving += 1
            self._changed.notify_all()


class KernelComms:
    """The kernel's comm handlers and its publishing of guest comms."""

    def __init__(self, kernel: CommHost) -> None:
        self.kernel = kernel
        self.firewall = WidgetFirewall(kernel.firewall)
        # Cells and comm messages into the guest, one at a time in the order they came.
        self.gate = Gate()

    async def handle(self, msg_type: str, stream: Any, ident: Any, parent: dict[str, Any]) -> None:
        """A comm message or comm_info_request from the kernel's shell channel."""
        if msg_type == "comm_info_request":
            await self.comm_info_request(stream, ident, parent)
        elif msg_type in COMM_TYPES:
            await self.deliver(msg_type, parent)

    # -- guest -> page -----------------------------------------------------------------------

    def publish(self, message: CommMessage) -> None:
        """A guest comm's message (on the thread that runs the guest), through the firewall."""
        kernel = self.kernel
        if kernel.out.silent:
            return
        kernel.out.flush()  # what the cell printed before comes first
        admitted, removed = self.firewall.admit(message)
        if removed:
            kernel.out.removed.extend(removed)
            kernel.out.stream("stderr", removal_note(tuple(removed)))
        if admitted is None:
            return
        kernel.send_response(
            kernel.iopub_socket,
            message.msg_type,
            admitted.content,
            buffers=admitted.buffers or None,
            metadata=admitted.metadata,
        )

    def parent(self) -> dict[str, Any]:
        """The request the guest is answering now, as a kernel's get_parent() gives it."""
        header = self.kernel.get_parent("shell").get("header") or {}
        return {
            "header": {"msg_id": header.get("msg_id", ""), "msg_type": header.get("msg_type", "")}
        }

    @contextlib.asynccontextmanager
    async def ordered(self, kernel: CommHost) -> AsyncIterator[None]:
        """A cell's turn at the gate. ipykernel runs a comm message that came during a cell
        as a task of its own and, when it ends, sets the shell's parent back to what it was
        when the message came: for a cell that was waiting here, another cell's. So the
        cell's own parent is set again once the gate is passed."""
        parent = kernel.get_parent("shell")
        ident = kernel._get_shell_context_var(kernel._shell_parent_ident)
        async with self.gate.turn():
            kernel.set_parent(ident, parent, channel="shell")
            yield

    # -- page -> guest -----------------------------------------------------------------------

    async def deliver(self, msg_type: str, parent: dict[str, Any]) -> None:
        kernel = self.kernel
        buffers = [base64.b64encode(bytes(b)).decode("ascii") for b in parent.get("buffers") or ()]
        size = sum(len(b) for b in buffers) + len(str(parent.get("content")))
        if size > MAX_INBOUND_BYTES:
            kernel.log.warning("a %s of %d bytes from the frontend was dropped", msg_type, size)
            return
        try:
            await kernel._session_ready()
        except Exception:
            kernel.log.exception("no session to deliver a %s to", msg_type)
            return
        message = {
            "header": dict(parent.get("header") or {}),
            "parent_header": dict(parent.get("parent_header") or {}),
            "metadata": dict(parent.get("metadata") or {}),
            "content": dict(parent.get("content") or {}),
            "buffers": buffers,
        }
        parent_now = kernel.get_parent("shell")
        async with self.gate.turn():
            self.firewall.heard(msg_type, message["content"])  # before the guest answers it
            kernel.out.begin(silent=False)
            with StreamPublisher(kernel._send_stream, parent_now) as streams:
                kernel.out.streams = streams
                try:
                    # On the event loop itself, as ipykernel runs a comm's handler: the next
                    # shell message waits for this one (with its own busy and idle), and a
                    # comm the page sends while it runs is not dispatched past it. Interrupts
                    # still reach the guest (the interrupt reader's thread cancels it).
                    kernel.repl.deliver_comm(msg_type, message, (streams.stdout, streams.stderr))
                except Exception:
                    kernel.log.exception("a %s could not be delivered", msg_type)
                finally:
                    kernel.out.streams = None

    async def comm_info_request(self, stream: Any, ident: Any, parent: dict[str, Any]) -> None:
        kernel = self.kernel
        target = (parent.get("content") or {}).get("target_name")
        comms: dict[str, dict[str, str]] = {}
        try:
            await kernel._session_ready()
            comms = await asyncio.to_thread(
                kernel.repl.comm_info, target if isinstance(target, str) else None
            )
        except Exception:  # a reply always goes: no comms
            kernel.log.exception("sandbox-kernel could not list the comms")
        content = {"status": "ok", "comms": comms}
        session = kernel.session
        if session is not None:
            session.send(stream, "comm_info_reply", content, parent, ident)

"""The kernel application: ipykernel's IPKernelApp with the sandbox kernel, an iopub that knows
whether anyone listens, and an orderly close.

A client connects its iopub (SUB) and shell sockets separately, and both retry every 100 ms while
the kernel starts. A reply to kernel_info can therefore reach a client whose iopub is not yet
subscribed; jupyter console then sends the first cell at once, the publisher drops its 'busy' and
'idle' as it drops anything nobody has subscribed to, and the console waits for an 'idle' that
will never come (about 1 start in 12 on a busy 2-core machine). `ListenedIOPub.subscribed` says
whether a subscriber is connected; the kernel holds kernel_info replies on it (kernel.py).

ipykernel's close() shuts the iopub thread down before it stops the control thread. When the
control thread is still publishing its 'idle' status for the shutdown request, that publish
never completes and the process does not exit (seen with this kernel in about 1 shutdown in
3). Stopping and joining the control thread first lets it finish publishing while iopub lives.

The kernel class is imported in `init_kernel`, after ipykernel has bound the sockets, not
when this module is. A client that started the kernel retries its connections every 100 ms
until they are bound, so every ms before the bind is paid again in the client's wait. The
class itself is light (7 ms): its settings, the firewall and the session, about 100 ms of
imports, come on its start thread after the first kernel_info reply (kernel.py).

`QuietOutStream` is the host process's sys.stdout and sys.stderr: ipykernel flushes both twice
per cell (before the reply and before the idle status), and each flush waits for a round trip
through the iopub thread even when nothing was written. Cells write through the guest, never
to these streams, so the flush with nothing pending returns at once; the kernel's own barrier
before a reply (`SandboxKernel._outputs_sent`) keeps outputs ahead of it. Four thread hops
less per cell: a trivial cell's round trip 0.92-0.95x of ipykernel's OutStream's
(bench/bench_host_streams.py).

Must not import: wasmtime, the kernel module (sandbox_kernel.kernel.kernel) at import time.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

import zmq
from ipykernel.iostream import IOPubThread, OutStream
from ipykernel.kernelapp import IPKernelApp
from ipykernel.kernelbase import Kernel
from traitlets import DottedObjectName, Type

__all__ = ["ListenedIOPub", "QuietOutStream", "SandboxKernelApp"]

_CONTROL_JOIN_SECONDS = 5.0
_SUBSCRIBE, _UNSUBSCRIBE = 1, 0  # the first byte of an XPUB subscription event


class ListenedIOPub(IOPubThread):
    """ipykernel's iopub thread, with an event set while at least one client is subscribed.

    The XPUB socket reports the first subscription to a topic and the last unsubscription from
    it (it is not verbose), so the event follows "anyone listening" exactly."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.subscribed = threading.Event()
        super().__init__(*args, **kwargs)

    def _handle_subscription(self, frames: list[bytes]) -> None:
        for frame in frames:
            if frame[:1] == bytes([_SUBSCRIBE]):
                self.subscribed.set()
            elif frame[:1] == bytes([_UNSUBSCRIBE]):
                self.subscribed.clear()
        super()._handle_subscription(frames)


class QuietOutStream(OutStream):
    """ipykernel's stream, whose flush returns at once when nothing was written since the last
    one (ipykernel's waits for the iopub thread regardless). Text written just as a flush
    checks goes out with the stream's own timer, as any write between flushes does."""

    def flush(self) -> None:
        if self._flush_pending or self._subprocess_flush_pending or self.echo is not None:
            super().flush()


class SandboxKernelApp(IPKernelApp):
    name = "sandbox-kernel"
    outstream_class = DottedObjectName(
        "sandbox_kernel.kernel.app.QuietOutStream", help="The host's sys.stdout and sys.stderr"
    ).tag(config=True)
    # The sandbox kernel unless configured otherwise; resolved in init_kernel (see above).
    kernel_class = Type(Kernel, config=True)

    def init_kernel(self) -> None:
        if self.kernel_class is Kernel:
            from sandbox_kernel.kernel.kernel import SandboxKernel

            self.kernel_class = SandboxKernel
        super().init_kernel()

    def init_sockets(self) -> None:
        """ipykernel's (7.4), adopting the shell and iopub sockets that `python -m
        sandbox_kernel` bound before its imports (early.py), when it did."""
        from sandbox_kernel.kernel import early

        bound = early.take(self.transport, self.ip, self.shell_port, self.iopub_port)
        if bound is not None and self.curve_secretkey is not None:  # keys from configuration
            bound.close()  # sockets bound without them are never used
            bound = None
        if bound is None:
            super().init_sockets()
            return
        self._early_iopub: zmq.Socket[Any] | None = bound.iopub
        self.log.info("Starting the kernel at pid: %i", os.getpid())
        self.context = context = bound.context
        atexit.register(self.close)
        if self.transport == "tcp":
            self.log.warning(
                "Kernel is running over TCP without encryption. All communication (including "
                "code and outputs) is sent in plain text and is susceptible to eavesdropping. "
                "Use IPC transport or launch with kernel manager-provisioned CurveZMQ keys to "
                "enable transport encryption."
            )
        self.shell_socket = bound.shell
        self.stdin_socket = context.socket(zmq.ROUTER)
        self.stdin_socket.linger = 1000
        self.stdin_port = self._bind_socket(self.stdin_socket, self.stdin_port)
        if hasattr(zmq, "ROUTER_HANDOVER"):  # as ipykernel: ipython/ipykernel#270
            self.shell_socket.router_handover = self.stdin_socket.router_handover = 1
        self.init_control(context)
        self.init_iopub(context)

    def init_iopub(self, context: zmq.Context[Any]) -> None:
        """ipykernel's, with `ListenedIOPub` as the iopub thread (on the socket bound early,
        when there is one)."""
        early, self._early_iopub = getattr(self, "_early_iopub", None), None
        if early is not None:
            self.iopub_socket = early
        else:
            self.iopub_socket = context.socket(zmq.XPUB)
            self.iopub_socket.linger = 1000
            self._apply_curve_server_options(self.iopub_socket)
            self.iopub_port = self._bind_socket(self.iopub_socket, self.iopub_port)
        self.log.debug("iopub PUB Channel on port: %i", self.iopub_port)
        self.configure_tornado_logger()
        self.iopub_thread = ListenedIOPub(self.iopub_socket, pipe=True, session=self.session)
        self.iopub_thread.start()
        self.iopub_socket = self.iopub_thread.background_socket

    def close(self) -> Any:
        control = self.control_thread
        if control is not None and control.is_alive():
            control.stop()
            control.join(_CONTROL_JOIN_SECONDS)
        return super().close()

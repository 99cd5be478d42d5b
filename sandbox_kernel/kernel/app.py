"""The kernel application: ipykernel's IPKernelApp with the sandbox kernel and an orderly close.

ipykernel's close() shuts the iopub thread down before it stops the control thread. When the
control thread is still publishing its 'idle' status for the shutdown request, that publish
never completes and the process does not exit (seen with this kernel in about 1 shutdown in
3). Stopping and joining the control thread first lets it finish publishing while iopub lives.

Must not import: wasmtime.
"""

from __future__ import annotations

from typing import Any

from ipykernel.kernelapp import IPKernelApp
from traitlets import Type

from sandbox_kernel.kernel.kernel import SandboxKernel

__all__ = ["SandboxKernelApp"]

_CONTROL_JOIN_SECONDS = 5.0


class SandboxKernelApp(IPKernelApp):
    name = "sandbox-kernel"
    kernel_class = Type(SandboxKernel, config=True)

    def close(self) -> Any:
        control = self.control_thread
        if control is not None and control.is_alive():
            control.stop()
            control.join(_CONTROL_JOIN_SECONDS)
        return super().close()

"""Comms in the guest: the `comm` package's Comm and CommManager, wired to the sandbox's door.

Runs INSIDE the sandbox's CPython, as the guest module "sandbox_kernel_comms" (a shell module:
the kernel's sessions load it with IPython). ipykernel 6+ and ipywidgets 8 reach comms only
through `comm.create_comm` and `comm.get_comm_manager`, which the `comm` package leaves for
a kernel to replace; `patch` replaces them as soon as `comm` is imported:

    guest -> frontend   a Comm's publish_msg is one door request, "comm" (its type, content,
                        metadata and base64 buffers), which the host passes through its widget
                        firewall to IOPub
    frontend -> guest   the host runs `handle(msg_type, message)` as a turn of its own (the
                        policy's limits, interrupt, rollback), which calls the manager's
                        comm_open, comm_msg or comm_close as ipykernel would
    comm_info_request   `info(target_name)`

`comm.kernel` is a stand-in whose get_parent() asks the host which request the guest is
answering now: ipywidgets' Output widget captures the outputs of that request.

Must import only the standard library at module level (`comm` is imported by the cell that
needs it); never imports sandbox_kernel.
"""

from __future__ import annotations

import base64
import builtins
import json
import sys
from typing import Any

__all__ = ["GuestKernel", "handle", "info", "patch"]

DRIVER_NAME = "__sandbox_kernel__"
_HANDLERS = frozenset({"comm_open", "comm_msg", "comm_close"})


def _driver() -> Any:
    return getattr(builtins, DRIVER_NAME)


class GuestKernel:
    """What ipywidgets asks of a comm's `kernel`: only which request is being answered."""

    def get_parent(self, channel: str = "shell") -> dict[str, Any]:
        parent = _driver().request("parent")
        return parent if isinstance(parent, dict) else {}


def patch(comm: Any) -> None:
    """Make the `comm` package's factories the sandbox's (called once `comm` is imported)."""
    from comm.base_comm import BaseComm, CommManager

    class SandboxComm(BaseComm):
        """A comm whose messages leave through the door."""

        kernel = GuestKernel()

        def publish_msg(
            self,
            msg_type: str,
            data: Any = None,
            metadata: Any = None,
            buffers: Any = None,
            **keys: Any,
        ) -> None:
            content = {"data": {} if data is None else data, "comm_id": self.comm_id, **keys}
            encoded = [base64.b64encode(bytes(buffer)).decode("ascii") for buffer in buffers or ()]
            # As ipykernel's packer converts a message (bytes as base64, ...); what has no
            # JSON form is a ValueError in the code that sent it.
            to_message = sys.modules["sandbox_kernel_bundles"].to_message
            _driver().call(
                "comm",
                msg_type=msg_type,
                content=to_message(content),
                metadata=to_message({} if metadata is None else metadata),
                buffers=encoded,
            )

    manager = CommManager()
    comm.create_comm = SandboxComm
    comm.get_comm_manager = lambda: manager


def _manager() -> Any:
    import comm  # patched by the import hook as it loads

    return comm.get_comm_manager()


def handle(msg_type: str, message_json: str) -> None:
    """A comm message from the frontend, given to the manager as ipykernel gives it; reports
    back with a value ("__comm__": whether it was delivered)."""
    delivered = False
    try:
        if msg_type in _HANDLERS:
            message = json.loads(message_json)
            message["buffers"] = [
                memoryview(base64.b64decode(item)) for item in message.get("buffers") or ()
            ]
            getattr(_manager(), msg_type)(None, None, message)
            delivered = True
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        _driver().request("value", name="__comm__", found=True, value=delivered)


def info(target_name: str | None) -> None:
    """comm_info_reply's comms: {comm_id: {"target_name": ...}}, for one target or all."""
    comms: dict[str, dict[str, str]] = {}
    if "comm" in sys.modules:
        for comm_id, comm in list(_manager().comms.items()):
            if target_name is None or comm.target_name == target_name:
                comms[comm_id] = {"target_name": comm.target_name}
    _driver().request("value", name="__comm_info__", found=True, value=comms)

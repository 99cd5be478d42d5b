"""StopTurn: how a door handler ends the running turn (GuestSession turns it into a trap).

In core, apart from host/session.py, so that the bridges (and the kernel that imports them) and
the native backends use it without importing host/ or wasmtime.

Must not import: anything of sandbox_kernel but core, wasmtime, anything Jupyter.
"""

from __future__ import annotations

__all__ = ["StopTurn"]


class StopTurn(Exception):
    """Raised by a door handler to end the running turn now; `reason` is "timeout" or
    "cancelled". The session turns it into a trap and reports the reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

"""The Jupyter kernel `sandbox-python`: ipykernel's Kernel over one ReplSandbox."""

from __future__ import annotations

__all__ = ["KERNEL_NAME"]

KERNEL_NAME = "sandbox-python"

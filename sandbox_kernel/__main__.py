"""`python -m sandbox_kernel -f CONNECTION_FILE` starts the sandbox-python kernel."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # The ports a client waits on, bound before ipykernel is imported (early.py).
    from sandbox_kernel.kernel.early import bind_early

    bind_early(sys.argv[1:])

    from sandbox_kernel.kernel.app import SandboxKernelApp

    SandboxKernelApp.launch_instance()

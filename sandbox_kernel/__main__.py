"""`python -m sandbox_kernel -f CONNECTION_FILE` starts the sandbox-python kernel."""

from __future__ import annotations

from sandbox_kernel.kernel.app import SandboxKernelApp

if __name__ == "__main__":
    SandboxKernelApp.launch_instance()

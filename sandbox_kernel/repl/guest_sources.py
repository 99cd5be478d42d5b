"""Guest modules (the Python in sandbox_kernel/guest) as source a turn can load.

    loader_source((("sandbox_kernel_driver", "driver.py"),), then="...install()")

The code defines each module under its name in the guest's sys.modules (a module already
there is kept, so sending the loader again costs a parse, not a reload), then runs `then`.
The sources are ours, read from the package, never from the guest's files.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import functools
import importlib.resources

__all__ = ["GuestModules", "loader_source", "read_sources"]

GuestModules = tuple[tuple[str, str], ...]  # (module name in the guest, file in guest/)


@functools.cache
def read_sources(modules: GuestModules) -> dict[str, str]:
    """Each module's source, read once per process."""
    files = importlib.resources.files("sandbox_kernel.guest")
    return {module: files.joinpath(name).read_text() for module, name in modules}


@functools.cache
def loader_source(modules: GuestModules, then: str = "") -> str:
    """A turn's code that loads `modules` into the guest and then runs `then`."""
    return (
        "def __sandbox_kernel_boot__(sources):\n"
        "    import sys, types\n"
        "    for name, source in sources.items():\n"
        "        if name not in sys.modules:\n"
        "            module = types.ModuleType(name)\n"
        "            exec(compile(source, f'<sandbox-kernel {name}>', 'exec'), module.__dict__)\n"
        "            sys.modules[name] = module\n"
        f"__sandbox_kernel_boot__({read_sources(modules)!r})\n"
        "del __sandbox_kernel_boot__\n"
        f"{then}"
    )

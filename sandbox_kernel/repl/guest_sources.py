"""Guest modules (the Python in sandbox_kernel/guest) as source a turn can load, and the turns
that install a session's driver (`install_source`) and warm its imports (`warm_imports`).

    loader_source((("sandbox_kernel_driver", "driver.py"),), then="...install()")

The code defines each module under its name in the guest's sys.modules (a module already
there is kept, so sending the loader again costs a parse, not a reload), then runs `then`.
The sources are ours, read from the package, never from the guest's files.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import functools
import importlib.resources

from sandbox_kernel.host.guest_library import (
    DATA_FOLDER,
    GUEST_PATH,
    PACKAGE_DATA,
    PACKAGE_MODULES,
    requirements_text,
)
from sandbox_kernel.repl.protocol import DRIVER_NAME, DRIVER_PARTS

__all__ = [
    "GUEST_MODULES",
    "NOTEBOOK_PATH",
    "PACKAGES_FOLDER",
    "SHELL_MODULES",
    "GuestModules",
    "driver_source",
    "install_source",
    "loader_source",
    "read_sources",
    "warm_imports",
]

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


# The guest modules, in load order: (module name in the guest, file in sandbox_kernel/guest).
GUEST_MODULES = (
    ("sandbox_kernel_imports", "imports.py"),
    ("sandbox_kernel_numpy", "numpy64.py"),
    ("sandbox_kernel_mmap", "mmapfile.py"),
    ("sandbox_kernel_introspect", "introspect.py"),
    *DRIVER_PARTS,
    ("sandbox_kernel_driver", "driver.py"),
)


# With IPython (REPLConfig.ipython): the shell, `!cmd` and %pip (IPython is imported when the
# shell starts).
SHELL_MODULES = (
    ("sandbox_kernel_coreutils", "coreutils.py"),  # `!cmd`: the commands
    ("sandbox_kernel_commands", "commands.py"),  # `!cmd`: the line
    ("sandbox_kernel_speedups", "speedups.py"),  # IPython's repeated work, done once
    ("sandbox_kernel_shell", "shell.py"),
    ("sandbox_kernel_packages", "packages.py"),
    ("sandbox_kernel_comms", "comms.py"),  # ipywidgets and every comm: the door's
)
PACKAGES_FOLDER = ".packages"  # %pip's, in the workspace
NOTEBOOK_PATH = "/notebook"  # REPLConfig.notebook_dir, read-only, the working folder


def driver_source(
    ipython: bool = False, workspace: str = "/app", workdir: str | None = None
) -> str:
    """What a warm image depends on besides the binary and modules: the turn that installs
    the driver (all guest sources, the folders) and, with IPython, the guest library's
    requirements."""
    return install_source(workspace, ipython, workdir) + (requirements_text() if ipython else "")


def install_source(workspace: str, ipython: bool = False, workdir: str | None = None) -> str:
    """The turn that loads the guest modules and installs the driver, working in `workdir`
    (default: the workspace, where %pip's folder is too)."""
    workdir = workdir or workspace
    if not ipython:
        return loader_source(GUEST_MODULES, then=install_call(workdir=workdir, shell=False))
    packages = f"{workspace}/{PACKAGES_FOLDER}"
    data = {
        package: f"{GUEST_PATH}/{DATA_FOLDER}/{package}"
        for package in (*PACKAGE_DATA, *PACKAGE_MODULES)
    }
    install = install_call(
        workdir=workdir, shell=True, library=GUEST_PATH, packages=packages, package_data=data
    )
    return loader_source(GUEST_MODULES + SHELL_MODULES, then=install)


def install_call(**arguments: object) -> str:
    """The driver's install() with `arguments` (repr'd: ours, never a user's text)."""
    given = ", ".join(f"{name}={value!r}" for name, value in arguments.items())
    # `and None`: the turn has no value, so the session's `_` is not the driver.
    return f"__import__('sys').modules['sandbox_kernel_driver'].install({given}) and None\n"


def warm_imports(modules: tuple[str, ...], ipython: bool = False) -> str:
    """A turn that imports `modules` without binding their names: a session starts with the
    names an ordinary Python session has (`numpy` is there once a cell imports it). With
    IPython, a traceback is then formatted once (shell.warm_tracebacks), so that what it works
    out about the imported modules is in the image rather than in a user's first error.

    It ends by moving every object alive into the collector's permanent generation
    (`gc.freeze()`, as forking servers do before they fork): a later collection walks only
    what cells made, so it leaves the image's pages alone. A full collection writes to every
    object it visits, and made all 40 MB of an IPython session's heap a kernel's own copy.
    Then the driver lists those objects for the host to make immortal (Driver.list_image):
    their reference counts are not written again either."""
    name = "__sandbox_kernel_module__"
    imports = f"for {name} in {modules!r}:\n    __import__({name})\ndel {name}\n"
    if ipython:  # imported as a cell imports them: with IPython's builtins (get_ipython), which
        # pandas asks for as it loads, to lay out its reprs for a notebook
        imports = "with __import__('IPython').get_ipython().builtin_trap:\n" + _indented(imports)
        imports += "__import__('sys').modules['sandbox_kernel_shell'].warm_tracebacks()\n"
    # The image is shared by every kernel of the machine: its modules come from the image's own
    # folders only, never a notebook's folder or a workspace (Driver.image_only, check_image).
    imports = f"with {DRIVER_NAME}.image_only():\n" + _indented(imports)
    imports += f"{DRIVER_NAME}.check_image()\n"
    frozen = "__import__('gc').collect()\n__import__('gc').freeze()\n"
    return imports + frozen + f"{DRIVER_NAME}.list_image()\n"


def _indented(source: str) -> str:
    return "".join(f"    {line}\n" for line in source.splitlines())

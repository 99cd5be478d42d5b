"""Corrections to the guest image's packages, made the moment a package is imported.

Runs INSIDE the sandbox's CPython, loaded as the module "sandbox_kernel_imports" with the
driver, which registers what to do after which import (`after_import`):

- numpy: its default integer made 64-bit where cells ask for it (numpy64.py);
- mmap: a map that reads the file into memory, where WASI has none (mmapfile.py);
- sklearn.datasets: the sample images the image left out, restored from the same version's
  wheel into the guest library (host/guest_library.py), added to the package's __path__;
- os: the user and group ids WASI lacks (`user_ids`).

A module already imported is corrected at once; one imported later, when its code has run
and before the importer sees it (a warm image is made after the driver is installed, so the
modules it holds are corrected too).

Must import only the standard library.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["after_import", "extend_path", "user_ids"]

_AFTER: dict[str, list[Callable[[Any], None]]] = {}


def after_import(name: str, callback: Callable[[Any], None]) -> None:
    """Call `callback(module)` once module `name` has run (now, if it already has)."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    _AFTER.setdefault(name, []).append(callback)
    if not any(isinstance(finder, _AfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())


def extend_path(folder: str) -> Callable[[Any], None]:
    """A callback that adds `folder` to a package's __path__ (its subpackages are found there)."""

    def extend(package: Any) -> None:
        path = getattr(package, "__path__", None)
        if path is not None and folder not in path:
            path.append(folder)

    return extend


def user_ids(os_module: Any) -> None:
    """os.getuid(), geteuid(), getgid() and getegid(), which WASI's os lacks: modules that read
    them when imported failed with AttributeError (send2trash, which courses have readers
    install). WASI gives every file st_uid and st_gid 0, so the ids are 0 too: a check that the
    user owns a file agrees with os.stat."""
    for name in ("getuid", "geteuid", "getgid", "getegid"):
        if not hasattr(os_module, name):
            setattr(os_module, name, _zero_id(name))


def _zero_id(name: str) -> Callable[[], int]:
    def user_id() -> int:
        return 0

    user_id.__name__ = user_id.__qualname__ = name
    return user_id


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds a registered module as the other finders do; its loader then runs the callbacks."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in _AFTER:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, _AFTER.pop(name))
                return spec
        return None


class _Loader(importlib.abc.Loader):
    """The module's own loader (often shared with others: a zip's importer), then the
    callbacks."""

    def __init__(self, loader: Any, callbacks: list[Callable[[Any], None]]) -> None:
        self.loader = loader
        self.callbacks = callbacks

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        for callback in self.callbacks:
            callback(module)

    def __getattr__(self, name: str) -> Any:  # is_package, get_resource_reader, ...
        return getattr(self.loader, name)

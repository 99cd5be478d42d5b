"""Public names imported on first use: one module `__getattr__` (PEP 562) for the packages
whose re-exports would otherwise load everything at import (the kernel needs only some)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_exports", "lazy_getattr"]


def lazy_getattr(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The `__getattr__` of `package`: each name in `homes` is imported from its home module
    the first time it is asked for, then kept in the package like an ordinary import."""
    namespace = vars(sys.modules[package])

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        namespace[name] = value
        return value

    return __getattr__


def lazy_exports(
    package: str, names: Sequence[str], modules: Sequence[str]
) -> Callable[[str], Any]:
    """The `__getattr__` of `package` for `names`, each found in the first of `modules` (in
    order, imported as needed) that defines it, then kept in the package."""
    namespace = vars(sys.modules[package])
    exported = frozenset(names)

    def __getattr__(name: str) -> Any:
        if name in exported:
            for module in modules:
                found = getattr(importlib.import_module(module), name, None)
                if found is not None:
                    namespace[name] = found
                    return found
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__

"""The driver's place in the guest: binding its helpers where cells find them, keeping what
running cells needs, and putting it back after a cell that replaced it.

Runs INSIDE the sandbox's CPython, as the guest module "sandbox_kernel_binding" (a part of
the cell driver, driver.py). The memory image is taken after each cell, so a broken driver in
it would come back with every rollback: after each cell `repair()` puts back the builtins, the
helpers, linecache, the driver's own methods (on every class it is made of) and the shell's,
and the standard streams (streams.py), and says so on stderr. Under host CPython 3.11 in the
unit tests: no newer syntax.

Must import only the standard library and the driver's earlier parts; never sandbox_kernel.
"""

from __future__ import annotations

import builtins
import linecache
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from sandbox_kernel_calls import HostCalls
from sandbox_kernel_cells import DRIVER_NAME, FLAG_NAME, turn_runner
from sandbox_kernel_helpers import chunk_text
from sandbox_kernel_streams import mend_streams, warn

__all__ = ["Binding"]

_KEPT_BUILTINS = ("__import__", "compile", "exec", "eval", "repr", "isinstance", "len")
_KEPT_HELPERS = ("display", "input")  # the sandbox's, in builtins: as IPython keeps display
_KEPT_LINECACHE = ("cache", "_interactive_cache", "getline")
_MISSING = object()
# The shell's methods the driver calls: an instance attribute of that name is a cell's, removed.
_SHELL_METHODS = frozenset(
    {"run_cell", "run_cell_async", "transform_cell", "transform_ast", "run_ast_nodes"}
)


class _ClassMethods:
    """A class's methods as keep() found them, put back after a cell that replaced them; names
    in `foreign` a cell may not add to the class (they would shadow a base class's)."""

    def __init__(self, cls: type, foreign: frozenset[str] = frozenset()) -> None:
        self.cls = cls
        self.methods = {name: value for name, value in vars(cls).items() if callable(value)}
        self._items = self.methods.items()
        self._foreign = foreign - self.methods.keys()

    def put_back(self) -> list[str]:
        """What was put back, by name. Every cell comes here: the usual answer, nothing
        changed, is one containment test of the kept (name, method) pairs in the class's, in
        C (a third of looking each name up)."""
        namespace = vars(self.cls)
        added = [name for name in self._foreign if name in namespace]
        if not added and self._items <= namespace.items():
            return []
        repaired = []
        for name, value in self.methods.items():
            if namespace.get(name) is not value:
                setattr(self.cls, name, value)
                repaired.append(f"{self.cls.__name__}.{name}")
        for name in added:
            delattr(self.cls, name)
            repaired.append(f"{self.cls.__name__}.{name}")
        return repaired


class Binding(HostCalls):
    """bind(), keep(), repair() and uninstall() of the driver (the Driver subclasses this).

    The driver sets `shell` (IPython's, or None) before keep() runs.
    """

    shell: Any

    def __init__(self, door: Callable[[bytes], bytes], main_module: Any) -> None:
        super().__init__(door)
        self.main = main_module
        self._undo: list[Callable[[], None]] = []
        # What running cells needs, as keep() found it at install (repair() puts it back).
        self._kept: list[tuple[Any, str, Any]] = []
        self._methods: list[_ClassMethods] = []
        self._method_names: frozenset[str] = frozenset()
        self._shell_kept: list[_ClassMethods] = []
        self._shell_names: frozenset[str] = frozenset()  # the shell class's methods, by name

    def keep(self) -> None:
        """Remember what the sandbox needs to run the next cell, to put it back after a cell
        that replaced it (the memory image is taken after each cell: a broken driver in it
        would come back with every rollback)."""
        self._kept = [
            *((vars(builtins), name, vars(builtins)[name]) for name in _KEPT_BUILTINS),
            *((vars(builtins), name, vars(builtins).get(name)) for name in _KEPT_HELPERS),
            *((vars(linecache), name, vars(linecache).get(name)) for name in _KEPT_LINECACHE),
            (vars(builtins), DRIVER_NAME, self),
            (vars(builtins), FLAG_NAME, self.flag),
            (vars(self.main), DRIVER_NAME, self),
            (sys.modules, "sandbox_kernel_driver", sys.modules.get("sandbox_kernel_driver")),
        ]
        reactor = sys.modules.get("_reactor")
        if reactor is not None:  # the turn runner bind() gave it
            self._kept.append((vars(reactor), "_run_turn", vars(reactor).get("_run_turn")))
        # every class the driver is made of (not object): a cell may replace a method on any
        self._methods = [_ClassMethods(cls) for cls in type(self).__mro__[:-1]]
        self._method_names = frozenset(n for kept in self._methods for n in kept.methods)
        self._shell_kept = []
        self._shell_names = frozenset()
        if self.shell is not None:  # its class and IPython's: methods a cell could replace
            shell_class = type(self.shell)
            self._shell_kept = [_ClassMethods(c, _SHELL_METHODS) for c in shell_class.__mro__[:2]]
            self._shell_names = frozenset(
                n for n in dir(shell_class) if callable(getattr(shell_class, n, None))
            )

    def repair(self) -> None:
        """Put back what keep() remembered, and say so on stderr."""
        repaired = []
        for space, name, value in self._kept:
            if value is not None and space.get(name, _MISSING) is not value:
                space[name] = value
                repaired.append(name)
        own = vars(self)
        for name in sorted(own.keys() & self._method_names):
            del own[name]
            repaired.append(f"{DRIVER_NAME}.{name}")
        for kept in self._methods:
            repaired.extend(kept.put_back())
        repaired.extend(self._repair_shell())
        repaired.extend(mend_streams())
        if repaired:
            warn(
                "[sandbox] this cell replaced what the sandbox needs to run cells ("
                + ", ".join(repaired)
                + "): it was put back"
            )

    def _repair_shell(self) -> list[str]:
        """Put back the shell's methods: on its class, and where the instance shadows one."""
        repaired = [name for kept in self._shell_kept for name in kept.put_back()]
        shell = self.shell
        if shell is not None and not self._shell_names.isdisjoint(vars(shell)):
            attributes = vars(shell)
            for name in sorted(attributes.keys() & self._shell_names):
                if not callable(attributes[name]) or name in _SHELL_METHODS:
                    del attributes[name]
                    repaired.append(f"get_ipython().{name}")
        return repaired

    # -- install -------------------------------------------------------------------------

    def bind(self) -> None:
        """Put the driver and the helpers where cells find them; uninstall() undoes it all."""
        helpers = {
            DRIVER_NAME: self,  # also here, so a cell that rebinds the name keeps loops working
            FLAG_NAME: self.flag,
            "display": self.display,
            "input": self.input,
            "llm_query": self.llm_query,
            "llm_query_batched": self.llm_query_batched,
            "rlm_query": self.rlm_query,
            "chunk_text": chunk_text,
            "search_context": self.search_context,
        }
        for name, value in helpers.items():
            self._patch(builtins, name, value)
        self._patch(self.main, DRIVER_NAME, self)
        if "context" not in vars(self.main):
            self._patch(self.main, "context", None)
        self._patch(time, "sleep", self.sleep)
        reactor = sys.modules.get("_reactor")  # the image's turn runner (none in unit tests)
        if reactor is not None and callable(getattr(reactor, "_run_turn", None)):
            self._patch(reactor, "_run_turn", turn_runner(reactor._run_turn, vars(self.main)))
        try:
            import getpass
        except ImportError:  # an image without it: nothing to patch
            pass
        else:
            self._patch(getpass, "getpass", self.getpass)
        backend = os.environ.get("MPLBACKEND")
        os.environ["MPLBACKEND"] = "Agg"  # before any cell imports matplotlib
        self._undo.append(lambda: _restore_env("MPLBACKEND", backend))
        self.keep()
        for stream in (sys.stdout, sys.stderr):  # so output streams while a cell runs
            try:
                buffered = stream.line_buffering
                stream.reconfigure(line_buffering=True)
            except Exception:  # a stream that is not a TextIOWrapper stays as it is
                continue
            self._undo.append(lambda s=stream, b=buffered: s.reconfigure(line_buffering=b))

    def uninstall(self) -> None:
        """Undo bind(): builtins, __main__, time.sleep, getpass, MPLBACKEND, stdout/stderr."""
        while self._undo:
            self._undo.pop()()

    def _patch(self, target: Any, name: str, value: Any) -> None:
        old = vars(target).get(name, _MISSING)
        setattr(target, name, value)
        self._undo.append(lambda: _restore(target, name, old))


def _restore(target: Any, name: str, old: Any) -> None:
    if old is _MISSING:
        vars(target).pop(name, None)
    else:
        setattr(target, name, old)


def _restore_env(name: str, old: str | None) -> None:
    if old is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = old

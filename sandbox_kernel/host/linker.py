"""The linker every guest of an engine is instantiated with, built once per engine.

WASI from wasmtime, with the guard's shadows laid over the calls in `run_guard.SIGNATURES`,
and the Python image's door (`host.call`). Host functions are defined once: wasmtime-py keeps
every defined function in a process-wide table, so a linker per run would grow it without end.
The trampoline modules the guard forwards through are compiled here too, once per engine.

Must not import: sandbox_kernel.runtimes, repl, anything Jupyter.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import wasmtime

from sandbox_kernel.host import python_abi, wasi_guards
from sandbox_kernel.host.engine import EngineHandle
from sandbox_kernel.host.run_guard import SIGNATURES

__all__ = ["Linkers", "linkers_for"]


@dataclass(frozen=True)
class Linkers:
    guarded: wasmtime.Linker  # what guests link against
    plain: wasmtime.Linker  # wasmtime's own WASI, for the trampolines' imports
    trampolines: tuple[wasmtime.Module, wasmtime.Module]


def _kinds() -> dict[str, wasmtime.ValType]:
    return {"i32": wasmtime.ValType.i32(), "i64": wasmtime.ValType.i64()}


def _build(handle: EngineHandle) -> Linkers:
    engine = handle.engine
    kinds = _kinds()
    plain = wasmtime.Linker(engine)
    plain.define_wasi()
    guarded = wasmtime.Linker(engine)
    guarded.define_wasi()
    guarded.allow_shadowing = True
    for name, params in SIGNATURES.items():
        ty = wasmtime.FuncType([kinds[p] for p in params], [kinds["i32"]])
        guarded.define_func("wasi_snapshot_preview1", name, ty, wasi_guards.shadow(name), True)
    door_ty = wasmtime.FuncType([kinds["i32"]] * 4, [kinds["i32"]])
    guarded.define_func("host", "call", door_ty, python_abi.door, True)
    trampolines = (
        wasmtime.Module(engine, wasi_guards.trampoline_wat()),
        wasmtime.Module(engine, wasi_guards.private_trampoline_wat()),
    )
    return Linkers(guarded, plain, trampolines)


_LINKERS: weakref.WeakKeyDictionary[EngineHandle, Linkers] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def linkers_for(handle: EngineHandle) -> Linkers:
    with _LOCK:
        found = _LINKERS.get(handle)
        if found is None:
            found = _LINKERS[handle] = _build(handle)
        return found

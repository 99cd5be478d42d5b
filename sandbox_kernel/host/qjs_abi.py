"""The QuickJS-NG WASI reactor's ABI (qjs-wasi-reactor.wasm 0.17.0): the one module that knows it.

    exports   _initialize()                   wasi-libc constructors, once per instance
              malloc(n) -> ptr                guest memory for argv
              qjs_init_argv(argc, argv) -> i32
                                              parse `qjs` options, create the runtime, run the
                                              script: 0 finished, -1 an uncaught exception or a
                                              syntax error (already printed on stderr)
    imports   wasi_snapshot_preview1 only; WASI argv is never read (args come through
              qjs_init_argv), and std.exit(n) is proc_exit -> an ExitTrap with n.

The reactor exports no event loop: promise continuations and timers still pending when the
script's synchronous part ends are dropped, except under a top-level `await`, which drives
jobs and timers until it settles.

Must not import: sandbox_kernel.runtimes, repl, anything Jupyter.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

import wasmtime

__all__ = ["script_entry"]

MASK32 = 0xFFFFFFFF


def _func(instance: wasmtime.Instance, store: wasmtime.Store, name: str) -> wasmtime.Func:
    found = instance.exports(store).get(name)
    if not isinstance(found, wasmtime.Func):
        raise wasmtime.WasmtimeError(f"the QuickJS image exports no function {name!r}")
    return found


def _write_argv(instance: wasmtime.Instance, store: wasmtime.Store, argv: Sequence[str]) -> int:
    """argv as C wants it, in guest memory: NUL-terminated strings and a NULL-ended array."""
    memory = instance.exports(store).get("memory")
    if not isinstance(memory, wasmtime.Memory):
        raise wasmtime.WasmtimeError("the QuickJS image exports no memory")
    malloc = _func(instance, store, "malloc")
    pointers = []
    for arg in argv:
        data = arg.encode() + b"\0"
        where = int(malloc(store, len(data))) & MASK32
        if not where:
            raise wasmtime.WasmtimeError("guest malloc failed while writing argv")
        memory.write(store, data, where)
        pointers.append(where)
    table = struct.pack(f"<{len(pointers) + 1}I", *pointers, 0)
    where = int(malloc(store, len(table))) & MASK32
    if not where:
        raise wasmtime.WasmtimeError("guest malloc failed while writing argv")
    memory.write(store, table, where)
    return where


def script_entry(argv: Sequence[str]) -> Callable[[wasmtime.Instance, wasmtime.Store], int]:
    """An entry that runs `qjs <argv...>`: exit status 0 on success, 1 on an uncaught error."""

    def entry(instance: wasmtime.Instance, store: wasmtime.Store) -> int:
        _func(instance, store, "_initialize")(store)
        table = _write_argv(instance, store, ["qjs", *argv])
        status = int(_func(instance, store, "qjs_init_argv")(store, len(argv) + 1, table))
        return 0 if status == 0 else 1

    return entry

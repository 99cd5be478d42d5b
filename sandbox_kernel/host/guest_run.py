"""One guest run: a fresh Store under the run's limits, the guest entered, the outcome classified.

    fuel          Store fuel set before the entry, read back after; OUT_OF_FUEL -> LimitKind.FUEL
    wall clock    an epoch deadline in ticks; INTERRUPT -> LimitKind.TIMEOUT (sleeps end at it)
    memory        Store limits on linear memory; the guest sees failed growth (MemoryError)
    output        capped streams; what is cut is counted
    files         the WASI guard (open files, file size, bytes written)

The Store is closed before `run_guest` returns, and any Store still open when the interpreter
exits is closed by an atexit hook: a Store alive at exit made wasmtime print a Rust panic. The
hook then waits until wasmtime has let go of every store's output callbacks, which it does on
threads of its own: one that entered Python during the interpreter's finalization was ended by
pthread_exit, and Rust printed a panic (1 exit in 9 on a loaded machine).

Must not import: sandbox_kernel.runtimes, repl, anything Jupyter.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import wasmtime

from sandbox_kernel.core.output import CappedStream
from sandbox_kernel.core.results import LimitKind
from sandbox_kernel.host.engine import EngineHandle
from sandbox_kernel.host.linker import linkers_for
from sandbox_kernel.host.run_guard import GuardLimits, RunGuard, guarding
from sandbox_kernel.host.wasi_config import Preopen, make_wasi_config, wait_for_outputs

__all__ = [
    "Entry",
    "RunLimits",
    "RunOutcome",
    "RunSpec",
    "classify_trap",
    "close_store",
    "instantiate_guarded",
    "run_guest",
    "running",
    "track_store",
    "trap_text",
]

Entry = Callable[[wasmtime.Instance, wasmtime.Store], int]


@dataclass(frozen=True)
class RunLimits:
    fuel: int
    memory_bytes: int
    timeout_seconds: float
    stdout_max_bytes: int
    stderr_max_bytes: int
    guard: GuardLimits


@dataclass(frozen=True)
class RunSpec:
    argv: Sequence[str]
    env: Mapping[str, str]
    preopens: Sequence[Preopen]
    limits: RunLimits
    on_stdout: Callable[[bytes], None] | None = None
    on_stderr: Callable[[bytes], None] | None = None
    start_path: str | None = None  # the script's path under its folder: its opening starts it


@dataclass
class RunOutcome:
    exit_code: int | None  # None when the guest did not end by itself
    limit: LimitKind | None
    trap_message: str | None
    fuel_consumed: int
    memory_used_bytes: int
    duration_ms: float
    stdout: CappedStream
    stderr: CappedStream
    refusals: list[tuple[str, str]] = field(default_factory=list)
    startup_fuel: int = 0  # of fuel_consumed, what ran before the user's code (0: unknown)
    user_fuel: int | None = None  # what the user's code ran (None: unknown)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.limit is None


_OPEN_STORES: weakref.WeakSet[wasmtime.Store] = weakref.WeakSet()
_STORES_LOCK = threading.Lock()
# Runs inside the guest right now, on any thread: what stops each one at interpreter exit.
_RUNNING: dict[int, tuple[EngineHandle, RunGuard, int]] = {}  # by id(store)
_EXIT_GRACE_SECONDS = 2.0
# How long exit waits for wasmtime's own threads to let go of the output callbacks: nothing in
# the normal case, seconds when the machine is busy (2 s was short with four processes per core).
_OUTPUTS_GRACE_SECONDS = 15.0


def track_store(store: wasmtime.Store) -> wasmtime.Store:
    with _STORES_LOCK:
        _OPEN_STORES.add(store)
    return store


def close_store(store: wasmtime.Store) -> None:
    with _STORES_LOCK:
        _OPEN_STORES.discard(store)
    store.close()


@contextmanager
def running(
    store: wasmtime.Store, handle: EngineHandle, guard: RunGuard, ticks: int
) -> Iterator[None]:
    """Mark a run as inside the guest, so interpreter exit can stop it before closing stores."""
    key = id(store)
    with _STORES_LOCK:
        _RUNNING[key] = (handle, guard, ticks)
    try:
        yield
    finally:
        with _STORES_LOCK:
            _RUNNING.pop(key, None)


@atexit.register
def _close_all_stores() -> None:
    """Stop guests still running on other threads (closing a Store in use crashes the process),
    then close every Store: one alive at exit made wasmtime print a Rust panic."""
    with _STORES_LOCK:
        active = list(_RUNNING.values())
    for handle, guard, ticks in active:
        if guard.cancel is not None:
            guard.cancel.set()  # ends a wait in poll_oneoff
        for _ in range(ticks + 2):  # moves the epoch past the run's deadline
            handle.engine.increment_epoch()
    deadline = time.monotonic() + _EXIT_GRACE_SECONDS
    while _RUNNING and time.monotonic() < deadline:
        time.sleep(0.01)
    with _STORES_LOCK:
        stores = [s for s in _OPEN_STORES if id(s) not in _RUNNING]
        _OPEN_STORES.clear()
    for store in stores:
        store.close()
    # wasmtime lets go of a closed store's output callbacks on its own threads, which must not
    # enter Python once the interpreter is finalizing (see wasi_config._Output).
    wait_for_outputs(_OUTPUTS_GRACE_SECONDS)


def run_guest(
    handle: EngineHandle, module: wasmtime.Module, spec: RunSpec, entry: Entry
) -> RunOutcome:
    """Instantiate `module` in a fresh Store, call `entry`, and report how it ended."""
    limits = spec.limits
    stdout = CappedStream("stdout", limits.stdout_max_bytes, spec.on_stdout)
    stderr = CappedStream("stderr", limits.stderr_max_bytes, spec.on_stderr)
    store = track_store(wasmtime.Store(handle.engine))
    try:
        store.set_limits(memory_size=limits.memory_bytes)
        store.set_wasi(
            make_wasi_config(spec.argv, spec.env, spec.preopens, stdout.write, stderr.write)
        )
        guard = RunGuard(limits.guard, deadline=None, cancel=threading.Event())
        guard.start_path = spec.start_path.encode() if spec.start_path else None
        ticks = handle.ticks_for(limits.timeout_seconds)
        started = time.perf_counter()
        with guarding(guard), handle.ticking(), running(store, handle, guard, ticks):
            if handle.metered:
                store.set_fuel(limits.fuel)
            store.set_epoch_deadline(ticks)
            guard.deadline = time.monotonic() + limits.timeout_seconds
            ended = _enter(store, handle, module, guard, entry)
        stdout.close()
        stderr.close()
        duration_ms = (time.perf_counter() - started) * 1000
        at_start, at_end = guard.fuel_left_at_start, guard.fuel_left_at_end
        return RunOutcome(
            exit_code=ended.exit_code,
            limit=ended.limit,
            trap_message=ended.message,
            fuel_consumed=limits.fuel - store.get_fuel() if handle.metered else 0,
            startup_fuel=limits.fuel - at_start if at_start is not None else 0,
            user_fuel=at_start - at_end if at_start is not None and at_end is not None else None,
            memory_used_bytes=_memory_size(store, ended.instance),
            duration_ms=duration_ms,
            stdout=stdout,
            stderr=stderr,
            refusals=guard.refusals,
        )
    finally:
        close_store(store)


@dataclass(frozen=True)
class _Ended:
    instance: wasmtime.Instance | None
    exit_code: int | None = None
    limit: LimitKind | None = None
    message: str | None = None


def instantiate_guarded(
    store: wasmtime.Store, handle: EngineHandle, module: wasmtime.Module, guard: RunGuard
) -> wasmtime.Instance:
    """Instantiate `module` with the guarded linker and bind the guard's trampolines to it."""
    linkers = linkers_for(handle)
    instance = linkers.guarded.instantiate(store, module)
    memory = instance.exports(store).get("memory")
    if not isinstance(memory, wasmtime.Memory):
        raise wasmtime.WasmtimeError("the image exports no memory")
    guard.bind(store, linkers.plain, linkers.trampolines, memory)
    return instance


def _enter(
    store: wasmtime.Store,
    handle: EngineHandle,
    module: wasmtime.Module,
    guard: RunGuard,
    entry: Entry,
) -> _Ended:
    instance = None
    try:
        instance = instantiate_guarded(store, handle, module, guard)
        return _Ended(instance, exit_code=entry(instance, store))
    except wasmtime.ExitTrap as exc:
        return _Ended(instance, exit_code=exc.code)
    except wasmtime.Trap as exc:
        limit = LimitKind.TIMEOUT if guard.stop_reason == "timeout" else classify_trap(exc)
        return _Ended(instance, limit=limit, message=trap_text(exc))
    except wasmtime.WasmtimeError as exc:
        return _Ended(instance, limit=LimitKind.TRAP, message=_first_line(str(exc)))


def _memory_size(store: wasmtime.Store, instance: wasmtime.Instance | None) -> int:
    """Linear memory never shrinks, so its size at the end is the run's peak."""
    if instance is None:
        return 0
    memory = instance.exports(store).get("memory")
    return int(memory.data_len(store)) if isinstance(memory, wasmtime.Memory) else 0


def classify_trap(exc: wasmtime.Trap) -> LimitKind:
    code = exc.trap_code
    if code == wasmtime.TrapCode.OUT_OF_FUEL:
        return LimitKind.FUEL
    if code == wasmtime.TrapCode.INTERRUPT:
        return LimitKind.TIMEOUT
    return LimitKind.TRAP


def trap_text(exc: wasmtime.Trap) -> str:
    """What a person can act on: the trap's kind, not wasmtime's backtrace header."""
    code = exc.trap_code
    if code == wasmtime.TrapCode.STACK_OVERFLOW:
        return "stack overflow (recursion too deep for the guest's stack)"
    if code is not None:
        return code.name.lower().replace("_", " ")
    return _first_line(str(exc))


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "wasm trap"

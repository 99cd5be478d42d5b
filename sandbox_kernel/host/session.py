"""A persistent guest: one Python instance kept across turns, its memory image, and its stops.

    GuestSession(image, config, door)   a Store + instance on an Engine of its own
    .turn(source, limits)               run one `turn` under fresh fuel and a fresh deadline
    .capture(into) / .restore(image)    the linear memory, copied while idle (only the pages
                                        written since `into` was taken, when the host can watch
                                        writes); restored into a fresh Store + instance (the
                                        rollback)
    .soft_interrupt()                   set the guest's interrupt flag byte (KeyboardInterrupt
                                        at the next loop check in cell code)
    .hard_stop()                        move this session's epoch past the deadline: the guest
                                        traps at its next check, from any thread

Why an Engine per session: a hard stop moves the epoch, and an epoch is per engine; on a
shared engine it would stop every other session's guest too (an rlm_query child runs while
its parent waits in a door call). The compiled module loads from the disk cache in ms.

Why the image after a cell is cheap: the session watches its memory for writes (host/write_watch:
Linux's userfaultfd write-protect and PAGEMAP_SCAN). Capturing into the previous image copies
only the pages written since (a trivial cell writes ~200 of them, 0.8 MB, where the memory is
40-70 MB); a host that cannot watch writes copies the whole memory every time. Written pages are
not protected again at once: the next cell would take a page fault on each (~1 us apiece, 0.3 ms
for a trivial cell, on its critical path), while copying them again costs less on the capture
thread. They are copied at each capture until they add up to a bound, and then protected again.
The bound is a quarter above what the session's turns write (measured at the first capture
after all was protected: those pages are one footprint), and between `REPROTECT_BYTES` and twice
that, so a session whose cells each write 6 MB does not fault on all of them every time. The
floor: IPython's shell writes ~640 pages (2.5 MB) for a trivial cell, and an error's traceback
another ~1.5 MB (4.1-4.2 MB in all for an interrupted cell). At 2 MB, sessions were protected
again after nearly every cell (2.2-2.5 ms a trivial cell back to back, against 1.35-1.45 ms at
4 MB). At a fixed 4 MB, every error was: the next interrupt faulted on ~230 pages while it
made its traceback (bench/bench_cell_cost.py part 6, against this rule: faults 230 -> 3, the
interrupt 0.91-0.92x; trivial cells alone 1.03-1.04x, as they copy 0.5 MB more). A fixed 8 MB
copied more than it saved (1.9-2.2 ms). Since a warm image's objects are immortal (immortal.py),
an IPython cell writes ~330 pages (288 with numpy and pandas warm too); floors of 2, 4, 5 and
8 MB measured again then came within this machine's noise of each other (1.48-1.74 ms), so
the floor stayed.

The image itself, and its copies, are memory_image.py's.

Must not import: sandbox_kernel.repl, runtimes, anything Jupyter.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import wasmtime

from sandbox_kernel.core.output import CappedStream
from sandbox_kernel.core.results import LimitKind
from sandbox_kernel.core.stops import StopTurn
from sandbox_kernel.host import python_abi
from sandbox_kernel.host.artifacts import PythonImage
from sandbox_kernel.host.descriptors import SavedFile, reopen, saved_files
from sandbox_kernel.host.engine import EngineHandle, private_engine, release_engine
from sandbox_kernel.host.guest_run import (
    classify_trap,
    close_store,
    instantiate_guarded,
    running,
    track_store,
    trap_text,
)
from sandbox_kernel.host.immortal import make_immortal
from sandbox_kernel.host.memory_image import (
    ImageFile,
    MemoryImage,
    address_of,
    copy_changed,
    image_buffer,
    memory_view,
)
from sandbox_kernel.host.run_guard import GuardLimits, RunGuard, WriteGuard, guarding
from sandbox_kernel.host.wasi_config import Preopen, make_wasi_config
from sandbox_kernel.host.wasi_quota import ENTRY_COST_BYTES
from sandbox_kernel.host.workspace import disk_growth, disk_usage
from sandbox_kernel.host.write_watch import PAGE_SIZE, WriteWatch

__all__ = [
    "GuestSession",
    "SessionConfig",
    "StopTurn",
    "TurnLimits",
    "TurnOutcome",
]

REPROTECT_BYTES = 5 << 20  # written pages kept writable (copied at every capture): the floor


def _writable_bound(footprint: int) -> int:
    """How many written bytes stay writable between captures, for a session whose turns write
    `footprint` bytes: a quarter above it, so that the pages the same kind of turn writes again
    do not fault, within REPROTECT_BYTES and twice that."""
    return min(max(REPROTECT_BYTES, footprint + footprint // 4), 2 * REPROTECT_BYTES)


@dataclass(frozen=True)
class SessionConfig:
    preopens: Sequence[Preopen]
    env: Mapping[str, str]
    memory_bytes: int
    guard: GuardLimits
    write_guard: WriteGuard | None = None  # the notebook folder's overlay (overlay.py)
    meter_fuel: bool = True  # False: an engine without fuel; the wall clock alone stops a turn
    # False: captures copy the whole memory, never only the pages written since the last one
    # (a session captured at most once, the runner's, saves opening and closing the watch).
    watch_writes: bool = True


@dataclass(frozen=True)
class TurnLimits:
    fuel: int
    timeout_seconds: float
    stdout_max_bytes: int
    stderr_max_bytes: int
    on_stdout: Callable[[bytes], None] | None = None
    on_stderr: Callable[[bytes], None] | None = None


@dataclass
class TurnOutcome:
    status: int | None  # the turn export's value when it returned; None after a trap
    limit: LimitKind | None
    trap_message: str | None
    fuel_consumed: int
    duration_ms: float
    stdout: CappedStream
    stderr: CappedStream
    refusals: list[tuple[str, str]] = field(default_factory=list)
    stopped_by: str | None = None  # "timeout" or "cancelled" when the host ended the turn

    @property
    def trapped(self) -> bool:
        return self.status is None


class _Router:
    """WASI output callbacks are fixed per Store; they route to the current turn's streams."""

    def __init__(self) -> None:
        self.stdout = CappedStream("stdout", 0)
        self.stderr = CappedStream("stderr", 0)

    def write_stdout(self, data: bytes) -> int:
        return self.stdout.write(data)

    def write_stderr(self, data: bytes) -> int:
        return self.stderr.write(data)


class GuestSession:
    """One long-lived Python guest. Not thread-safe: one turn at a time, except the two stops."""

    def __init__(
        self,
        image: PythonImage,
        config: SessionConfig,
        door: Callable[[bytes], bytes] | None,
    ) -> None:
        self.image = image
        self.config = config
        self.handle: EngineHandle = private_engine(consume_fuel=config.meter_fuel)
        self.module = self.handle.module(image.binary, image.binary_sha256)
        self.flag_address: int | None = None
        self._handler = door
        self._router = _Router()
        self._turn_ticks = 0
        self._in_turn = threading.Event()
        self._store: wasmtime.Store | None = None
        self._instance: wasmtime.Instance | None = None
        self._base = 0  # host address of linear memory, for the soft-interrupt write
        # Held by soft_interrupt() while it writes the flag, and by _release_store() while it
        # unsets _base: a cancel from another thread never writes into a released memory.
        self._memory_lock = threading.Lock()
        self._released = False  # the engine given back (close())
        # The write watch over the current instance's memory, and the image that memory equalled
        # when the watch last looked (the only image a capture may patch instead of copy).
        self._watch: WriteWatch | None = None
        # False once the host refused a watch (not asked again), or when none is wanted.
        self._watchable = config.watch_writes
        self._baseline: MemoryImage | None = None
        self.last_capture_bytes = 0  # what the last capture copied
        # True while every page is protected since the last capture (or restore): what the next
        # capture copies is then what the turns between wrote, their footprint.
        self._all_protected = False
        self._footprint = 0  # the last footprint measured: the writable pages' bound follows it
        # The writable folders as the quota counts them at the start: the quota bounds growth.
        # A function of the folders alone, not a method: the guard must hold no reference
        # back to the session (a cycle kept each closed session's memory until a collection).
        writable = [p.host for p in config.preopens if p.writable]
        self._disk_growth = functools.partial(
            disk_growth, writable, ENTRY_COST_BYTES, disk_usage(writable, ENTRY_COST_BYTES)
        )
        self._fresh_instance()

    # -- lifecycle ---------------------------------------------------------------------------

    def _fresh_instance(self) -> None:
        """A new Store and instance from the image's snapshot (the interpreter pre-started)."""
        self._release_store()
        store = track_store(wasmtime.Store(self.handle.engine))
        store.set_limits(memory_size=self.config.memory_bytes)
        router = self._router
        argv = [python_abi.ARGV0]
        env = {**python_abi.BASE_ENV, **self.config.env}
        preopens = [*python_abi.image_preopens(self.image), *self.config.preopens]
        store.set_wasi(
            make_wasi_config(argv, env, preopens, router.write_stdout, router.write_stderr)
        )
        if self.handle.metered:
            store.set_fuel(2**62)  # instantiation itself; each turn sets its own budget
        store.set_epoch_deadline(2**62)
        door = self._door if self._handler is not None else None
        previous = getattr(self, "_guard", None)
        self._guard = RunGuard(self.config.guard, None, cancel=threading.Event(), door=door)
        self._guard.measure = self._disk_growth
        self._guard.write_guard = self.config.write_guard
        self._guard.preopen_roots = {  # WASI numbers preopens from 3, in order
            3 + index: Path(p.host).resolve() for index, p in enumerate(preopens) if p.writable
        }
        if previous is not None:  # files outlive a rollback: so does what they count
            self._guard.bytes_written = previous.bytes_written
        with guarding(self._guard):
            self._instance = instantiate_guarded(store, self.handle, self.module, self._guard)
        self._store = store
        self._guard.exports = python_abi.door_exports(self._instance, store)
        self._base = self._memory_base()

    def _door(self, frame: bytes) -> bytes:
        assert self._handler is not None
        try:
            return self._handler(frame)
        except StopTurn as stop:
            self._guard.stop_reason = stop.reason
            raise wasmtime.Trap(f"sandbox {stop.reason}") from None

    def _release_store(self) -> None:
        with self._memory_lock:
            self._base = 0  # before the memory goes: a cancel racing a rollback finds none
        self._unwatch()
        if self._store is not None:
            close_store(self._store)
        self._store, self._instance = None, None

    def close(self) -> None:
        """Release the guest and its memory, and give its engine back (another session may
        reuse it: hard_stop() no longer moves its epoch once this holds the memory lock)."""
        self._release_store()
        with self._memory_lock:
            if self._released:
                return
            self._released = True
        release_engine(self.handle)
        # The guard holds the door, a bound method of this session: a cycle that, left to
        # the collector, kept about 1 MB of wasmtime's native memory per closed session.
        self._guard.door = None
        self._handler = None

    def _live(self) -> tuple[wasmtime.Store, wasmtime.Memory]:
        if self._store is None or self._instance is None:
            raise RuntimeError("the session is closed")
        return self._store, python_abi.guest_memory(self._instance, self._store)

    def _memory_base(self) -> int:
        return python_abi.memory_span(*self._live())[1]

    def memory_bytes(self) -> int:
        store, memory = self._live()
        return int(memory.data_len(store))

    # -- turns -------------------------------------------------------------------------------

    def turn(self, source: str, limits: TurnLimits) -> TurnOutcome:
        """Run `source` in the guest's __main__ under fresh fuel and deadline."""
        store, instance = self._store, self._instance
        if store is None or instance is None:
            raise RuntimeError("the session is closed")
        stdout = CappedStream("stdout", limits.stdout_max_bytes, limits.on_stdout)
        stderr = CappedStream("stderr", limits.stderr_max_bytes, limits.on_stderr)
        self._router.stdout, self._router.stderr = stdout, stderr
        ticks = self.handle.ticks_for(limits.timeout_seconds)
        guard = self._guard
        guard.begin(time.monotonic() + limits.timeout_seconds)
        if self.handle.metered:
            store.set_fuel(limits.fuel)
        status: int | None = None
        limit: LimitKind | None = None
        message: str | None = None
        started = time.perf_counter()
        self._turn_ticks = ticks
        self._in_turn.set()
        try:
            with guarding(guard), self.handle.ticking(), running(store, self.handle, guard, ticks):
                store.set_epoch_deadline(ticks)
                try:
                    status = python_abi.turn(instance, store, source.encode("utf-8"))
                except wasmtime.Trap as exc:
                    stopped = guard.stop_reason
                    limit = LimitKind.TIMEOUT if stopped else classify_trap(exc)
                    message = f"stopped by the host ({stopped})" if stopped else trap_text(exc)
                except wasmtime.WasmtimeError as exc:  # includes ExitTrap: the guest is gone
                    limit, message = LimitKind.TRAP, str(exc).strip().splitlines()[0]
        finally:
            self._in_turn.clear()
            stdout.close()  # the held tail, or the notice, to the listener
            stderr.close()
        duration_ms = (time.perf_counter() - started) * 1000
        fuel = limits.fuel - store.get_fuel() if self.handle.metered else 0
        if status is not None:
            store.set_epoch_deadline(2**62)  # idle: never trap between turns
            self._base = self._memory_base()
        return TurnOutcome(
            status=status,
            limit=limit,
            trap_message=message,
            fuel_consumed=max(0, fuel),
            duration_ms=duration_ms,
            stdout=stdout,
            stderr=stderr,
            refusals=guard.refusals,
            stopped_by=guard.stop_reason,
        )

    # -- stops -------------------------------------------------------------------------------

    def soft_interrupt(self) -> bool:
        """Ask the running cell to raise KeyboardInterrupt at its next loop check; False when
        the driver has not registered its flag (nothing to write)."""
        with self._memory_lock:
            if self.flag_address is None or self._base == 0:
                return False
            ctypes.c_uint8.from_address(self._base + self.flag_address).value = 1
            return True

    def hard_stop(self) -> None:
        """Stop the running turn now: its waits end and the guest traps at its next check."""
        if self._guard.cancel is not None:
            self._guard.cancel.set()
        with self._memory_lock:  # never the epoch of an engine given back to another session
            if self._in_turn.is_set() and not self._released:
                self.handle.expire(self._turn_ticks + 2)

    # -- images ------------------------------------------------------------------------------

    def locate_flag(self, magic: bytes) -> int | None:
        """Find the driver's flag: the byte before the one place `magic` occurs in memory.
        Searched in place (a regex over the memory's buffer), never copied."""
        memory = (ctypes.c_char * self.memory_bytes()).from_address(self._base)
        found = [m.start() for m in re.finditer(re.escape(magic), memory)]
        if len(found) != 1 or found[0] == 0:
            return None
        self.flag_address = found[0] - 1
        return self.flag_address

    def make_immortal(self, address: int, count: int, static: int) -> int:
        """Make the `count` objects listed at `address` immortal (host/immortal.py); returns
        how many (0: a build whose layout is not known). Called from the door, while the
        driver that listed them waits for the answer: every one of them is alive."""
        with self._memory_lock, memory_view(self._memory_base(), self.memory_bytes()) as memory:
            return make_immortal(memory, address, count, static)

    @property
    def watching(self) -> bool:
        """True while captures copy only the pages written since the previous image."""
        return self._watch is not None

    def capture(self, into: MemoryImage | None = None) -> MemoryImage:
        """The memory image, taken while no turn runs.

        `into` is an image no longer needed: when it is the one this session last captured or
        restored and the host watches writes, only the pages written since are copied into it
        (it is updated in place, and returned; a memory grown since is patched the same way
        while its buffer has room); otherwise the whole memory is copied, into its buffer when
        it has room (copying 66 MB into a fresh buffer costs 20-40 ms of page faults, into a
        reused one 3-6 ms). New buffers have room for the memory's limit."""
        if self._in_turn.is_set():
            raise RuntimeError("capture() while a turn runs")
        size = self.memory_bytes()
        watch = self._watch
        if (
            into is not None
            and into is self._baseline
            and isinstance(into.data, mmap.mmap)
            and watch is not None
            and watch.start == self._base
            and into.size <= size
        ):
            try:
                runs = watch.written(self._base + size, protect=False)
                if size <= into.room:  # the buffer is zero past the image: the runs suffice
                    image = self._patch(into, runs, size)
                    if self._all_protected:
                        self._footprint = self.last_capture_bytes
                    self._all_protected = False
                    if self.last_capture_bytes > _writable_bound(self._footprint):
                        self._rewatch(size)  # nothing written since the patch
                    return image
                if into.origin is not None:  # grown past its file: the file mapped again
                    grown = self._grown(into.origin, runs, size)
                    if grown is not None:
                        return grown
            except (OSError, ValueError):
                self._unwatch()  # cannot tell what changed: copy it all, unwatched from now on
        buffer = into.data if into is not None else None
        if not (
            isinstance(buffer, mmap.mmap) and into is not None and into.size <= size <= len(buffer)
        ):
            buffer = image_buffer(size, self._room())
        self._rewatch(size)  # before the copy: every write from here on is seen
        with address_of(buffer) as address:
            ctypes.memmove(address, self._base, size)
        self.last_capture_bytes = size
        return self._rebase(MemoryImage(buffer, self.flag_address, self._open_files(), size=size))

    def _room(self) -> int:
        """The most a buffer for this session's images needs: its memory's limit, in pages."""
        return (self.config.memory_bytes + PAGE_SIZE - 1) // PAGE_SIZE * PAGE_SIZE

    def _grown(
        self, origin: ImageFile, runs: list[tuple[int, int]], size: int
    ) -> MemoryImage | None:
        """The image of a memory that grew past its image's buffer: a new buffer with the file
        mapped over its start again (shared), then copied into it the pages that may differ
        from the file (those the image had patched and those written since) and all the memory
        past the file. None when the file cannot be mapped (the caller copies everything).
        The new buffer has room for the memory's limit: later growth patches it in place."""
        buffer = image_buffer(size, self._room())
        with address_of(buffer) as address:
            if not origin.map_over(address):
                return None
            origin.mark(runs)
            self._rewatch(size)  # before the copies: every write from here on is seen
            copied = 0
            for offset, length in origin.changed_runs():
                ctypes.memmove(address + offset, self._base + offset, length)
                copied += length
            tail = size - origin.size  # the buffer starts zeroed: its zero pages stay unmade
            copied += copy_changed(address + origin.size, self._base + origin.size, tail)
        self.last_capture_bytes = copied
        files = self._open_files()
        return self._rebase(MemoryImage(buffer, self.flag_address, files, origin, size=size))

    def _patch(self, image: MemoryImage, runs: list[tuple[int, int]], size: int) -> MemoryImage:
        """Copy the written `runs` into `image`'s buffer, which holds the memory's `size`
        bytes from now on (its room past the old size was zero, as is the memory's past what
        was written there)."""
        buffer = image.data
        assert isinstance(buffer, mmap.mmap)
        if image.origin is not None:
            image.origin.mark(runs)
        copied = 0
        with memory_view(self._base, size) as memory, memoryview(buffer) as target:
            for offset, length in runs:  # slice copies: half the time of ctypes.memmove calls
                end = offset + length
                target[offset:end] = memory[offset:end]
                copied += length
        self.last_capture_bytes = copied
        files = self._open_files()
        return self._rebase(MemoryImage(buffer, self.flag_address, files, image.origin, size=size))

    def _open_files(self) -> tuple[SavedFile, ...]:
        return saved_files(self._guard, self._store) if self._store is not None else ()

    def _rebase(self, image: MemoryImage) -> MemoryImage:
        self._baseline = image if self._watch is not None else None
        return image

    def _rewatch(self, size: int) -> None:
        """Write-protect the whole memory again, (re)opening the watch when needed: from here on
        the watch counts writes since this moment."""
        self._all_protected = True
        watch = self._watch
        if watch is not None and watch.start != self._base:  # a dynamic memory that moved
            self._unwatch()
            watch = None
        if watch is None and self._watchable:
            # The whole range the memory may grow into, so a grown memory stays watched.
            span = max(size, self.config.memory_bytes + PAGE_SIZE - 1) // PAGE_SIZE * PAGE_SIZE
            watch = WriteWatch.open(self._base, span) or WriteWatch.open(self._base, size)
            self._watchable = watch is not None
            self._watch = watch
            return  # a new watch starts protected
        if watch is not None:
            try:
                watch.written(self._base + size)
            except (OSError, ValueError):
                self._unwatch()

    def _unwatch(self) -> None:
        if self._watch is not None:
            self._watch.close()
        self._watch, self._baseline = None, None

    def restore(self, image: MemoryImage) -> None:
        """Replace the guest with a fresh instance holding `image`; `image` is then the one a
        later capture patches."""
        self._fresh_instance()
        store, memory = self._live()
        pages = (image.size + 65535) // 65536
        grow = pages - int(memory.size(store))
        if grow > 0:
            memory.grow(store, grow)
        self._base = self._memory_base()  # growth may move a dynamic memory
        source, origin = image.data, image.origin
        if (
            isinstance(source, mmap.mmap)
            and origin is not None
            and origin.size <= image.size
            and origin.map_over(self._base)
        ):
            with address_of(source) as address:  # the file's pages shared, the patched copied
                for offset, length in origin.changed_runs():
                    ctypes.memmove(self._base + offset, address + offset, length)
                tail = image.size - origin.size  # a memory grown past the file
                copy_changed(self._base + origin.size, address + origin.size, tail)
        elif isinstance(source, mmap.mmap):
            with address_of(source) as address:
                copy_changed(self._base, address, image.size)
        else:
            ctypes.memmove(self._base, source, image.size)
        self.flag_address = image.flag_address
        store, _ = self._live()
        reopen(self._guard, store, image.files)  # what the memory refers to by number
        self._rewatch(self.memory_bytes())
        self._rebase(image)

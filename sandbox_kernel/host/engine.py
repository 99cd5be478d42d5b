"""One wasmtime Engine per process, the on-disk cache of compiled modules, and the epoch ticker.

Compiling the Python guest takes about a minute, so a module is compiled at most once per
(binary, wasmtime version, engine configuration): the native code is serialized into a private
cache folder and later loaded with `Module.deserialize_file`, which maps it in milliseconds.
Deserializing runs native code, so the folder is created 0700 and a file not owned by this user
is refused rather than loaded.

The epoch ticker is one daemon thread per engine that advances the epoch every `TICK_SECONDS`
while at least one guest runs; deadlines are expressed in ticks.

Must not import: sandbox_kernel.runtimes, sandbox_kernel.repl, anything Jupyter.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import wasmtime

from sandbox_kernel.host.cache import cache_dir, write_atomically

__all__ = [
    "TICK_SECONDS",
    "EngineHandle",
    "get_engine",
    "private_engine",
    "release_engine",
    "wasmtime_version",
]

TICK_SECONDS = 0.01
# Compile throughput measured on the 2-core reference machine (the 104 MB snapshot in ~56 s),
# used only to draw an honest progress bar while a cold compile runs.
_COMPILE_BYTES_PER_SECOND = 1.9e6


@functools.cache
def wasmtime_version() -> str:
    """The installed wasmtime-py version, which is also the bundled Wasmtime's version."""
    return importlib.metadata.version("wasmtime")


@dataclass(frozen=True)
class _EngineConfig:
    consume_fuel: bool
    epoch_interruption: bool

    def key(self) -> str:
        return f"fuel={int(self.consume_fuel)},epoch={int(self.epoch_interruption)}"


class EngineHandle:
    """A wasmtime Engine with its module cache and its epoch ticker.

    Obtain one with `get_engine()`; never construct a second for the same configuration.
    """

    def __init__(self, config: _EngineConfig) -> None:
        cfg = wasmtime.Config()
        cfg.consume_fuel = config.consume_fuel
        cfg.epoch_interruption = config.epoch_interruption
        self.config = config
        self.engine = wasmtime.Engine(cfg)
        self._modules: dict[str, wasmtime.Module] = {}
        self._lock = threading.Lock()
        self._ticker = _EpochTicker(self.engine)

    @property
    def metered(self) -> bool:
        return self.config.consume_fuel

    def module(
        self,
        binary: Path,
        sha256: str,
        progress: Callable[[float], None] | None = None,
    ) -> wasmtime.Module:
        """The compiled module for `binary` (whose digest the caller has checked).

        In memory after the first call; from the disk cache after the first process; compiled
        (and `progress` called with fractions in [0, 1]) only when neither has it.
        """
        key = self.cache_key(sha256)
        with self._lock:
            found = self._modules.get(key)
            if found is None:
                found = self._load_or_compile(binary, key, progress)
                self._modules[key] = found
            return found

    def cache_key(self, sha256: str) -> str:
        material = f"{sha256}|wasmtime={wasmtime_version()}|{self.config.key()}"
        return hashlib.sha256(material.encode()).hexdigest()[:32]

    def cached_path(self, sha256: str) -> Path:
        return cache_dir() / "modules" / f"{self.cache_key(sha256)}.cwasm"

    def _load_or_compile(
        self, binary: Path, key: str, progress: Callable[[float], None] | None
    ) -> wasmtime.Module:
        target = cache_dir() / "modules" / f"{key}.cwasm"
        if target.is_file() and _owned_by_us(target):
            try:
                return wasmtime.Module.deserialize_file(self.engine, str(target))
            except wasmtime.WasmtimeError:
                target.unlink(missing_ok=True)  # stale or damaged: compile afresh
        module = _compile_with_progress(self.engine, binary, progress)
        write_atomically(target, module.serialize())
        if progress is not None:
            progress(1.0)
        return module

    @contextmanager
    def ticking(self) -> Iterator[None]:
        """Keep the epoch advancing while the body runs guest code."""
        self._ticker.acquire()
        try:
            yield
        finally:
            self._ticker.release()

    def ticks_for(self, seconds: float) -> int:
        """Epoch ticks for a deadline `seconds` from now (at least one)."""
        return max(1, int(seconds / TICK_SECONDS + 0.999999))

    def expire(self, ticks: int) -> None:
        """Move the epoch `ticks` ahead at once: every deadline within them passes, and a guest
        running on this engine traps at its next check. Safe from any thread."""
        for _ in range(ticks):
            self.engine.increment_epoch()

    def close(self) -> None:
        """Stop the ticker thread (a private engine's owner calls this when done)."""
        self._ticker.stop()


def _owned_by_us(path: Path) -> bool:
    st = path.lstat()
    return not path.is_symlink() and st.st_uid == os.getuid()


def _compile_with_progress(
    engine: wasmtime.Engine, binary: Path, progress: Callable[[float], None] | None
) -> wasmtime.Module:
    if progress is None:
        return wasmtime.Module.from_file(engine, str(binary))
    expected = max(1.0, binary.stat().st_size / _COMPILE_BYTES_PER_SECOND)
    done = threading.Event()

    def report() -> None:
        start = time.monotonic()
        while not done.wait(0.25):
            # An estimate: never claims completion before the compiler returns.
            progress(min(0.99, (time.monotonic() - start) / expected))

    reporter = threading.Thread(target=report, name="sandbox-kernel-compile-progress")
    reporter.daemon = True
    reporter.start()
    try:
        return wasmtime.Module.from_file(engine, str(binary))
    finally:
        done.set()
        reporter.join()


class _EpochTicker:
    """Advances an engine's epoch every TICK_SECONDS while anyone holds it."""

    def __init__(self, engine: wasmtime.Engine) -> None:
        self._engine = engine
        self._holders = 0
        self._stopped = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def acquire(self) -> None:
        with self._cond:
            self._holders += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sandbox-kernel-epoch", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def release(self) -> None:
        with self._cond:
            self._holders -= 1

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._holders == 0 and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
            time.sleep(TICK_SECONDS)
            self._engine.increment_epoch()


_ENGINES: dict[_EngineConfig, EngineHandle] = {}
_ENGINES_LOCK = threading.Lock()


_SPARES: dict[_EngineConfig, list[EngineHandle]] = {}
_MAX_SPARES = 2  # per configuration: a process running one session after another needs one


def private_engine(*, consume_fuel: bool = True) -> EngineHandle:
    """An engine of one's own, for a persistent session: its epoch can be moved to stop that
    session's guest without touching any other. One given back by a closed session is reused
    (its module and linkers ready: 10-15 ms a session saved); else a new one, whose modules
    load from the disk cache. Give it back with `release_engine()` when done."""
    config = _EngineConfig(consume_fuel=consume_fuel, epoch_interruption=True)
    with _ENGINES_LOCK:
        spares = _SPARES.get(config)
        if spares:
            return spares.pop()
    return EngineHandle(config)


def release_engine(handle: EngineHandle) -> None:
    """Give back a private engine none of whose stores is alive any more, and which no one
    will stop again (its owner's stops are over): kept for the next private_engine(), or
    closed when enough are kept."""
    with _ENGINES_LOCK:
        spares = _SPARES.setdefault(handle.config, [])
        if len(spares) < _MAX_SPARES and handle not in spares:
            spares.append(handle)
            return
    handle.close()


def get_engine(*, consume_fuel: bool = True) -> EngineHandle:
    """The process's engine for this configuration: fuel metering (default on) and epochs."""
    config = _EngineConfig(consume_fuel=consume_fuel, epoch_interruption=True)
    with _ENGINES_LOCK:
        handle = _ENGINES.get(config)
        if handle is None:
            handle = _ENGINES[config] = EngineHandle(config)
        return handle

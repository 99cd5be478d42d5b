"""The process's engines, the compiled-module cache key and folder, and the pinned wasmtime."""

from __future__ import annotations

import importlib.metadata
import stat
from pathlib import Path

import pytest
import wasmtime

from sandbox_kernel.host import engine
from sandbox_kernel.host.engine import (
    TICK_SECONDS,
    EngineHandle,
    _EngineConfig,
    cache_dir,
    get_engine,
    wasmtime_version,
)

SHA = "ab" * 32
_TINY_WAT = '(module (func (export "answer") (result i32) (i32.const 42)))'


def test_get_engine_returns_the_same_handle() -> None:
    first = get_engine()
    assert get_engine() is first
    assert get_engine(consume_fuel=True) is first
    assert first.metered is True


def test_an_unmetered_engine_is_a_different_handle() -> None:
    unmetered = get_engine(consume_fuel=False)
    assert unmetered is not get_engine()
    assert unmetered.metered is False
    assert get_engine(consume_fuel=False) is unmetered


def test_the_cache_key_depends_on_the_engine_config() -> None:
    metered, unmetered = get_engine(), get_engine(consume_fuel=False)
    assert metered.cache_key(SHA) != unmetered.cache_key(SHA)
    assert metered.cache_key(SHA) == metered.cache_key(SHA)
    assert metered.cache_key(SHA) != metered.cache_key("cd" * 32)


def test_the_cache_key_depends_on_the_wasmtime_version(monkeypatch: pytest.MonkeyPatch) -> None:
    handle = get_engine()
    key = handle.cache_key(SHA)
    monkeypatch.setattr(engine, "wasmtime_version", lambda: "49.0.0")
    assert handle.cache_key(SHA) != key


def test_the_pinned_wasmtime_is_loaded() -> None:
    # 50.x carries the fixes for the WASI advisories that 49.0.0 lacks; the pin is exact.
    assert importlib.metadata.version("wasmtime") == "50.0.1"
    assert wasmtime_version() == "50.0.1"


def test_cache_dir_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "my-cache"
    monkeypatch.setenv("SANDBOX_KERNEL_CACHE", str(target))
    assert cache_dir() == target
    assert target.is_dir()
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    assert get_engine().cached_path(SHA).parent == target / "modules"


def test_cache_dir_falls_back_to_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SANDBOX_KERNEL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "sandbox-kernel"


@pytest.mark.parametrize(
    ("seconds", "ticks"),
    [(0.0001, 1), (TICK_SECONDS, 1), (1.0, 100), (2.5, 250)],
    ids=["tiny", "one-tick", "second", "fraction"],
)
def test_ticks_for_rounds_up(seconds: float, ticks: int) -> None:
    assert get_engine().ticks_for(seconds) == ticks


def _fresh_handle() -> EngineHandle:
    # A private handle so its in-memory module table starts empty (tests only).
    return EngineHandle(_EngineConfig(consume_fuel=True, epoch_interruption=True))


def _answer(module: wasmtime.Module, handle: EngineHandle) -> int:
    store = wasmtime.Store(handle.engine)
    store.set_fuel(1_000)
    store.set_epoch_deadline(1_000)
    try:
        return int(wasmtime.Instance(store, module, []).exports(store)["answer"](store))
    finally:
        store.close()


def test_a_module_is_compiled_once_then_loaded_from_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOX_KERNEL_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "tiny.wat"
    source.write_text(_TINY_WAT)
    first = _fresh_handle()
    progress: list[float] = []
    module = first.module(source, SHA, progress.append)
    assert _answer(module, first) == 42
    assert first.cached_path(SHA).is_file()
    assert progress[-1] == 1.0
    assert first.module(source, SHA) is module  # in memory now
    source.unlink()  # a second process must not need the source: it loads the cache
    second = _fresh_handle()
    assert _answer(second.module(source, SHA), second) == 42


def test_a_damaged_cache_file_is_recompiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOX_KERNEL_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "tiny.wat"
    source.write_text(_TINY_WAT)
    handle = _fresh_handle()
    cached = handle.cached_path(SHA)
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"not a compiled module")
    assert _answer(handle.module(source, SHA), handle) == 42
    assert cached.read_bytes() != b"not a compiled module"


def test_a_symlinked_cache_file_is_not_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Deserializing runs native code: a cache entry that is a link may point anywhere.
    monkeypatch.setenv("SANDBOX_KERNEL_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "tiny.wat"
    source.write_text(_TINY_WAT)
    elsewhere = tmp_path / "elsewhere.cwasm"
    elsewhere.write_bytes(b"planted")
    handle = _fresh_handle()
    cached = handle.cached_path(SHA)
    cached.parent.mkdir(parents=True)
    cached.symlink_to(elsewhere)
    assert _answer(handle.module(source, SHA), handle) == 42
    assert elsewhere.read_bytes() == b"planted"
    assert not cached.is_symlink()

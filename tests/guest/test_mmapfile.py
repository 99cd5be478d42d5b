"""The guest's mmap (guest/mmapfile.py) against CPython's real one, under host CPython: the
same files, the same calls, the same bytes in the files afterwards; and np.memmap over it.
In the guest itself it is tested through the kernel (tests/kernel/test_notebook_overlay.py)."""

from __future__ import annotations

import importlib.util
import mmap
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

GUEST = Path(__file__).resolve().parents[2] / "sandbox_kernel" / "guest" / "mmapfile.py"


@pytest.fixture(scope="module")
def shim() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sandbox_kernel_mmap", GUEST)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def both(tmp_path: Path, content: bytes) -> tuple[Path, Path]:
    real, ours = tmp_path / "real.bin", tmp_path / "ours.bin"
    real.write_bytes(content)
    ours.write_bytes(content)
    return real, ours


def use(path: Path, make: Any, length: int, **options: Any) -> tuple[Any, bytes]:
    """Map `path`, write into the map where it allows, flush, close; (what was read, the
    file's bytes afterwards) or (the exception's type, the file's bytes)."""
    with path.open("r+b") as f:
        try:
            m = make(f.fileno(), length, **options)
        except (ValueError, OverflowError) as exc:
            return type(exc), path.read_bytes()
        seen = bytes(m[:8])
        try:
            m[0:3] = b"XYZ"
        except TypeError:
            seen += b"|read-only"
        m.seek(4)
        seen += m.read(2) + m.readline()
        m.flush()
        m.close()
    return seen, path.read_bytes()


@pytest.mark.parametrize(
    ("length", "options"),
    [
        (0, {}),
        (10, {}),
        (0, {"access": mmap.ACCESS_READ}),
        (0, {"access": mmap.ACCESS_WRITE}),
        (0, {"access": mmap.ACCESS_COPY}),
        (0, {"prot": mmap.PROT_READ}),
        (0, {"flags": mmap.MAP_PRIVATE}),
        (100, {}),
        (0, {"offset": 4096}),
        (-1, {}),
    ],
)
def test_maps_behave_as_cpythons(
    shim: ModuleType, tmp_path: Path, length: int, options: dict[str, int]
) -> None:
    real, ours = both(tmp_path, b"0123456789\nabcdef")
    assert use(ours, shim.FileMap, length, **options) == use(real, mmap.mmap, length, **options)


@pytest.mark.parametrize("dup", [True, False], ids=["dup", "no-dup-as-on-wasi"])
def test_np_memmap_over_the_shim_writes_and_reads_as_over_mmap(
    shim: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dup: bool
) -> None:
    def work(folder: Path) -> tuple[Any, ...]:
        folder.mkdir()
        m = np.memmap(folder / "a.dat", mode="w+", dtype="int64", shape=(1000, 3))
        m[:, 1] = np.arange(1000)
        m.flush()
        del m
        r = np.memmap(folder / "a.dat", mode="r", dtype="int64", shape=(1000, 3))
        c = np.memmap(folder / "a.dat", mode="c", dtype="int64", shape=(1000, 3))
        c[:] = 7  # a private copy: the file keeps its values
        del c
        loaded = np.load(_saved(folder), mmap_mode="r")
        return (int(r[:, 1].sum()), r.flags.writeable, (folder / "a.dat").read_bytes(),
                int(loaded.sum()))  # fmt: skip

    expected = work(tmp_path / "real")
    monkeypatch.setattr(mmap, "mmap", shim.FileMap)
    memmap = np.memmap
    monkeypatch.setattr(memmap, "__new__", staticmethod(shim.read_only_new(memmap.__new__)))
    if not dup:  # WASI has none: the map opens np.memmap's file again by its name

        def no_dup(fd: int) -> int:
            raise OSError(58, "Not supported")

        monkeypatch.setattr(shim, "_dup", no_dup)
    assert work(tmp_path / "ours") == expected


def _saved(folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    np.save(folder / "b.npy", np.arange(10))
    return folder / "b.npy"

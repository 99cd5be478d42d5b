"""Warm-start images: a session's memory with the driver installed and modules imported, saved
once on disk so later sessions start with `import pandas` already paid for.

An image is keyed by the guest binary's digest, the driver's source, the module list and the
session's folder layout, so any change to one of them makes a new image. The layout matters:
wasi-libc reads the preopened folders once at start and keeps the table in linear memory, so
an image made with /app and /tmp restored into a session that also has /data would show /data
missing and /tmp as the data folder. Files live in the private cache folder (0700),
written atomically; a damaged or foreign file is ignored, never trusted.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_kernel.host.artifacts import PythonImage, sha256_of
from sandbox_kernel.host.cache import cache_dir, write_atomically
from sandbox_kernel.host.memory_image import ImageFile, MemoryImage, image_buffer
from sandbox_kernel.host.session import GuestSession

if TYPE_CHECKING:
    from sandbox_kernel.host.wasi_config import Preopen

__all__ = ["MAX_CACHE_BYTES", "Layout", "layout_of", "load", "prune", "save"]


MAX_CACHE_BYTES = 3 * 1024**3
"""The warm images kept on disk at most (a new driver, module list or dataset makes a new
one: the images used longest ago are removed when one is saved)."""

Layout = tuple[tuple[str, bool], ...]
"""The session's preopened folders in order: (guest path, writable)."""


def _paths(
    image: PythonImage, driver: str, modules: tuple[str, ...], layout: Layout, label: str = ""
) -> tuple[Path, Path]:
    digest = hashlib.sha256(driver.encode()).hexdigest()
    material = json.dumps([image.binary_sha256, digest, modules, [list(p) for p in layout]])
    key = hashlib.sha256(material.encode()).hexdigest()[:32]
    folder = cache_dir() / "warm"
    stem = f"{_label_prefix(label)}{key}"
    return folder / f"{stem}.mem", folder / f"{stem}.json"


def _label_prefix(label: str) -> str:
    return f"{hashlib.sha256(label.encode()).hexdigest()[:12]}-" if label else ""


def load(
    image: PythonImage,
    driver: str,
    modules: tuple[str, ...],
    layout: Layout = (),
    label: str = "",
) -> MemoryImage | None:
    """The saved image for these modules and this folder layout, or None (none saved, or not
    ours, or damaged)."""
    if not modules:
        return None
    data_path, meta_path = _paths(image, driver, modules, layout, label)
    try:
        meta = json.loads(meta_path.read_text())
        if data_path.is_symlink() or data_path.stat().st_uid != os.getuid():
            return None
        # Checked by digest, computed once per file identity (artifacts.sha256_of).
        if sha256_of(data_path) != meta.get("sha256"):
            return None
        data, origin = _map_private(data_path)
    except (OSError, ValueError):
        return None
    with contextlib.suppress(OSError):  # used now: the last image pruning would remove
        os.utime(meta_path)
    flag = meta.get("flag_address")
    return MemoryImage(data, flag if isinstance(flag, int) else None, origin=origin)


def _map_private(path: Path) -> tuple[mmap.mmap, ImageFile | None]:
    """The file mapped copy-on-write: a buffer of the session's own, which it patches in place
    with what later turns write (so the first capture after a warm start copies little), whose
    pages stay the page cache's, shared by every kernel that started from this image, until
    the session writes them; and the file held open, so a restore maps the same file over the
    guest's memory (GuestSession.restore). The file is never changed in place (save()
    replaces it by a rename), so both mappings keep the bytes whose digest load() checked."""
    with path.open("rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        if not hasattr(mmap, "MAP_PRIVATE"):  # no copy-on-write mappings: a copy of its own
            data = image_buffer(size)
            if f.readinto(data) != len(data):
                raise ValueError(f"{path} changed while it was read")
            return data, None
        prot = mmap.PROT_READ | mmap.PROT_WRITE
        data = mmap.mmap(f.fileno(), size, flags=mmap.MAP_PRIVATE, prot=prot)
        return data, ImageFile(os.dup(f.fileno()), size)


def save(
    image: PythonImage,
    driver: str,
    modules: tuple[str, ...],
    session: GuestSession,
    layout: Layout = (),
    label: str = "",
) -> None:
    """Save the idle session's memory as the warm image for these modules and this layout.
    With a `label` (a family of images, such as one dataset's), the family's other images are
    removed: only the newest is kept on disk."""
    captured = session.capture()
    memory = captured.memory()
    data_path, meta_path = _paths(image, driver, modules, layout, label)
    data_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    meta = {
        "sha256": hashlib.sha256(memory).hexdigest(),
        "flag_address": captured.flag_address,
        "modules": list(modules),
    }
    write_atomically(data_path, memory)
    write_atomically(meta_path, json.dumps(meta).encode())
    if label:  # a session mapping an older one keeps its pages until it ends
        for older in data_path.parent.glob(f"{_label_prefix(label)}*"):
            if older.stem != data_path.stem:
                older.unlink(missing_ok=True)
    prune(data_path.parent, keep=data_path)


def prune(folder: Path, keep: Path, max_bytes: int = MAX_CACHE_BYTES) -> None:
    """Remove the images used longest ago (by their metadata file's time, which load()
    renews) until the folder's images fit `max_bytes`; never `keep`."""
    images: list[tuple[float, int, Path]] = []
    for data in folder.glob("*.mem"):
        try:
            size = data.stat().st_size
            used = data.with_suffix(".json").stat().st_mtime
        except OSError:
            used, size = 0.0, 0
        images.append((used, size, data))
    total = sum(size for _, size, _ in images)
    for _, size, data in sorted(images):
        if total <= max_bytes:
            return
        if data != keep:
            data.unlink(missing_ok=True)
            data.with_suffix(".json").unlink(missing_ok=True)
            total -= size


def layout_of(preopens: Sequence[Preopen]) -> Layout:
    """The part of a session's folders that its memory image depends on (not host paths)."""
    return tuple((p.guest, p.writable) for p in preopens)

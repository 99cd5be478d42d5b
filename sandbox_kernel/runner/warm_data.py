"""Warm datasets: a dataset's tables loaded once, kept in a memory image of their own.

A run used to start a session and then read its CSV files into pandas, every time: most of a
small query's time, and all of it again for every run over a 100 MB dataset. Now the first
run over a dataset (or the agent server's warm-up) loads the tables in a session and saves its
memory beside the warm-start image; later runs start from that image with their DataFrames
already in memory (repl/warm.py maps it copy-on-write, so sessions share its pages).

The image is keyed by the SHA-256 of each table file's contents, read again only when the
file's identity or size or times change, so an edited file makes a new image at the next run
and a touched but unchanged one does not. The image holds nothing but what our loader made of
the operator's files: no user code has run in it. Saving an image removes the older images
of the same dataset and tables.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from sandbox_kernel.repl.models import WarmSetup
from sandbox_kernel.runner import adapter
from sandbox_kernel.runner.datasets import Dataset, Table

__all__ = ["content_key", "dataset_setup"]

_MAX_REMEMBERED: Final = 4_096  # file digests kept by identity
_CHUNK: Final = 1 << 20
_digests: OrderedDict[tuple[int, ...], str] = OrderedDict()
_lock = threading.Lock()


def dataset_setup(dataset: Dataset, tables: Sequence[Table], data_path: str) -> WarmSetup:
    """The warm setup that loads `tables` (the dataset mounted at `data_path` in the guest)."""
    cell = adapter.load_cell({t.name: f"{data_path}/{t.file}" for t in tables})
    names = ",".join(f"{t.name}={t.file}" for t in tables)
    return WarmSetup(
        source=cell,
        key=content_key(dataset.folder, tables),
        label=f"dataset\0{dataset.folder}\0{names}",
    )


def content_key(folder: Path, tables: Sequence[Table]) -> str:
    """A digest of the tables' names, files and contents.

    Raises:
        OSError: a file cannot be read (the run's load step reports it as it always has).
    """
    digest = hashlib.sha256()
    for table in tables:
        digest.update(f"{table.name}\0{table.file}\0{_file_digest(folder / table.file)}\0".encode())
    return digest.hexdigest()


def _file_digest(path: Path) -> str:
    before = os.stat(path)
    identity = _identity(before)
    with _lock:
        known = _digests.get(identity)
        if known is not None:
            _digests.move_to_end(identity)
            return known
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    value = digest.hexdigest()
    if _identity(os.stat(path)) == identity:  # not changed while it was read
        with _lock:
            _digests[identity] = value
            while len(_digests) > _MAX_REMEMBERED:
                _digests.popitem(last=False)
    return value


def _identity(info: os.stat_result) -> tuple[int, ...]:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

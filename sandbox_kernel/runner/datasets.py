"""The dataset registry: a TOML file mapping dataset ids to folders of CSV files.

    # datasets.toml; relative paths are taken from this file's folder
    [datasets.retail]
    path = "retail"
    description = "An online shop: customers, products, orders"

Each CSV file of a dataset's folder (regular files only: links, hidden files and folders are
left out) is one table. Table names are sanitized from the file names: ASCII, lower case,
`[a-z0-9_]`, not starting with a digit, never a Python keyword or builtin nor a name the
runner binds (`dfs`, `pd`, `np`, `result`, ...), unique within the dataset.

A dataset's host folder is mounted read-only at /data in the sandbox; it never appears in a
message or a description: only ids, table names and file names do.

Must not import anything from sandbox_kernel but core and runner, nor wasmtime.
"""

from __future__ import annotations

import builtins
import keyword
import re
import stat
import threading
import tomllib
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sandbox_kernel.runner.errors import DatasetNotFound, DatasetRegistryError
from sandbox_kernel.runner.models import DATASET_ID_PATTERN

__all__ = ["RESERVED_NAMES", "Dataset", "DatasetRegistry", "Table", "table_name"]

RESERVED_NAMES: Final = frozenset(
    {"dfs", "pd", "np", "result", "result_df", "result_rows", "result_columns"}
    | set(keyword.kwlist)
    | set(keyword.softkwlist)
    | {name for name in dir(builtins) if not name.startswith("_")}
)
"""Names a table may not take (it gets a trailing '_'): the runner's, keywords, builtins."""
MAX_TABLES: Final = 200
_NAME_CHARS: Final = re.compile(r"[^a-z0-9]+")
_DATASET_ID: Final = re.compile(DATASET_ID_PATTERN)
_READ: dict[tuple[str, int, int, int, int], DatasetRegistry] = {}
_READ_LOCK = threading.Lock()


def table_name(file_name: str) -> str:
    """The table name for a CSV file name ("Sales 2024.csv" -> "sales_2024")."""
    stem = file_name[:-4] if file_name.lower().endswith(".csv") else file_name
    ascii_stem = unicodedata.normalize("NFKD", stem).encode("ascii", "ignore").decode()
    name = _NAME_CHARS.sub("_", ascii_stem.lower()).strip("_")[:60] or "table"
    if name[0].isdigit():
        name = f"t_{name}"
    if name in RESERVED_NAMES:
        name += "_"
    return name


@dataclass(frozen=True)
class Table:
    """One CSV file of a dataset, and the name code and SQL know it by."""

    name: str
    file: str
    size_bytes: int


@dataclass(frozen=True)
class Dataset:
    """A registered dataset. `folder` is a host path: keep it out of responses."""

    id: str
    folder: Path
    description: str = ""

    def tables(self) -> list[Table]:
        """The dataset's tables, by file name; its folder is listed now.

        Raises:
            DatasetRegistryError: the folder is missing or holds no CSV file.
        """
        try:
            entries = sorted(self.folder.iterdir(), key=lambda p: p.name)
        except OSError:
            raise DatasetRegistryError(f"dataset {self.id!r}: its folder cannot be read") from None
        tables: list[Table] = []
        taken: set[str] = set()
        for entry in entries:
            if entry.name.startswith(".") or not entry.name.lower().endswith(".csv"):
                continue
            try:
                info = entry.lstat()  # never a link: it could point anywhere on the host
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            name, n = table_name(entry.name), 2
            while name in taken:
                name, n = f"{table_name(entry.name)}_{n}", n + 1
            taken.add(name)
            tables.append(Table(name=name, file=entry.name, size_bytes=info.st_size))
        if not tables:
            raise DatasetRegistryError(f"dataset {self.id!r} holds no CSV file")
        if len(tables) > MAX_TABLES:
            raise DatasetRegistryError(f"dataset {self.id!r} has more than {MAX_TABLES} tables")
        return tables

    def select(self, wanted: Iterable[str] | None) -> list[Table]:
        """The tables named in `wanted` (file or table names), all when None.

        Raises:
            LookupError: a name is neither a file nor a table of the dataset (the message
                lists the tables).
        """
        tables = self.tables()
        if wanted is None:
            return tables
        by_name = {t.file: t for t in tables} | {t.name: t for t in tables}
        unknown = [name for name in wanted if name not in by_name]
        if unknown:
            known = ", ".join(f"{t.file} ({t.name})" for t in tables)
            raise LookupError(
                f"dataset {self.id!r} has no file or table {', '.join(map(repr, unknown))}; "
                f"it has: {known}"
            )
        return list({by_name[name].name: by_name[name] for name in wanted}.values())

    def describe(self) -> dict[str, Any]:
        """What callers may know about the dataset (no host path)."""
        return {
            "id": self.id,
            "description": self.description,
            "tables": [
                {"name": t.name, "file": t.file, "size_bytes": t.size_bytes} for t in self.tables()
            ],
        }


class DatasetRegistry:
    """Datasets by id, read from a TOML file."""

    def __init__(self, datasets: Mapping[str, Dataset]) -> None:
        self._datasets = dict(sorted(datasets.items()))

    @classmethod
    def load(cls, path: Path | str) -> DatasetRegistry:
        """Read the registry at `path`.

        Raises:
            DatasetRegistryError: the file is missing, unreadable, not TOML, or an entry is
                invalid (the message names the entry, never a host path).
        """
        file = Path(path).expanduser()
        try:  # read again only when the file changed (a server reads it for every chat)
            info = file.stat()
            identity = (str(file), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
            with _READ_LOCK:
                known = _READ.get(identity)
            if known is not None:
                return known
        except OSError:
            identity = None
        try:
            document = tomllib.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            message = f"the dataset registry {file.name} does not exist (SANDBOX_KERNEL_DATASETS)"
            raise DatasetRegistryError(message) from None
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or type(exc).__name__
            message = f"the dataset registry {file.name} cannot be read: {reason}"
            raise DatasetRegistryError(message) from None
        except tomllib.TOMLDecodeError as exc:
            message = f"the dataset registry {file.name}: TOML syntax error: {exc}"
            raise DatasetRegistryError(message) from None
        registry = cls(_entries(document, file.parent.resolve()))
        if identity is not None:
            with _READ_LOCK:
                _READ.clear()  # the newest registry read is the one worth keeping
                _READ[identity] = registry
        return registry

    def ids(self) -> list[str]:
        return list(self._datasets)

    def get(self, dataset_id: str) -> Dataset:
        """The dataset with this id.

        Raises:
            DatasetNotFound: no dataset has it (the message lists the registered ids).
        """
        try:
            return self._datasets[dataset_id]
        except KeyError:
            raise DatasetNotFound(dataset_id, self.ids()) from None

    def __iter__(self) -> Any:
        return iter(self._datasets.values())

    def __len__(self) -> int:
        return len(self._datasets)


def _entries(document: dict[str, Any], base: Path) -> dict[str, Dataset]:
    extra = sorted(set(document) - {"datasets"})
    if extra:
        raise DatasetRegistryError(f"the dataset registry has unknown keys: {', '.join(extra)}")
    table = document.get("datasets", {})
    if not isinstance(table, dict):
        raise DatasetRegistryError("the dataset registry's 'datasets' must be a table")
    found = {}
    for dataset_id, entry in table.items():
        found[dataset_id] = _entry(dataset_id, entry, base)
    return found


def _entry(dataset_id: str, entry: object, base: Path) -> Dataset:
    where = f"dataset {dataset_id!r}"
    if not _DATASET_ID.match(dataset_id):
        raise DatasetRegistryError(
            f"{where}: an id is letters, digits, '_' and '-', starting with a letter or digit"
        )
    if not isinstance(entry, dict):
        raise DatasetRegistryError(f"{where}: must be a table with a 'path'")
    extra = sorted(set(entry) - {"path", "description"})
    if extra:
        raise DatasetRegistryError(f"{where}: unknown keys: {', '.join(extra)}")
    path, description = entry.get("path"), entry.get("description", "")
    if not isinstance(path, str) or not path or "\0" in path:
        raise DatasetRegistryError(f"{where}: 'path' must be a folder path")
    if not isinstance(description, str):
        raise DatasetRegistryError(f"{where}: 'description' must be a string")
    folder = Path(path).expanduser()
    folder = (folder if folder.is_absolute() else base / folder).resolve()
    if not folder.is_dir():
        raise DatasetRegistryError(f"{where}: its folder does not exist")
    return Dataset(id=dataset_id, folder=folder, description=description)

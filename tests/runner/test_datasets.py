"""The dataset registry: TOML entries, sanitized table names, no host path in any message."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox_kernel.runner import DatasetNotFound, DatasetRegistry, DatasetRegistryError
from sandbox_kernel.runner.datasets import table_name
from tests.runner.conftest import DATASETS


def test_the_project_registry_lists_its_two_datasets() -> None:
    registry = DatasetRegistry.load(DATASETS)
    assert registry.ids() == ["retail", "weather"]
    retail = registry.get("retail")
    assert [t.name for t in retail.tables()] == ["customers", "orders", "products"]
    described = retail.describe()
    assert described["id"] == "retail" and len(described["tables"]) == 3
    assert str(retail.folder) not in str(described), "no host path in a description"


@pytest.mark.parametrize(
    ("file", "table"),
    [
        ("orders.csv", "orders"),
        ("Sales 2024.CSV", "sales_2024"),
        ("2024-sales.csv", "t_2024_sales"),
        ("Café Müller.csv", "cafe_muller"),
        ("result.csv", "result_"),
        ("dfs.csv", "dfs_"),
        ("class.csv", "class_"),
        ("list.csv", "list_"),
        ("__init__.csv", "init"),
        ("___.csv", "table"),
        ("x" * 100 + ".csv", "x" * 60),
    ],
    ids=[
        "plain",
        "spaces-and-case",
        "leading-digit",
        "accents",
        "runner-name",
        "dfs",
        "keyword",
        "builtin",
        "dunder",
        "nothing-left",
        "long",
    ],
)
def test_table_names_are_sanitized(file: str, table: str) -> None:
    name = table_name(file)
    assert name == table
    assert name.isidentifier() and name.isascii()


def _registry(tmp_path: Path, body: str) -> Path:
    file = tmp_path / "datasets.toml"
    file.write_text(body)
    return file


def test_only_regular_csv_files_become_tables(tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.csv").write_text("x\n1\n")
    (folder / "A.csv").write_text("x\n2\n")  # the same table name: made unique
    (folder / ".hidden.csv").write_text("x\n")
    (folder / "notes.txt").write_text("not a table")
    (folder / "sub.csv").mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    os.symlink(secret, folder / "link.csv")
    registry = DatasetRegistry.load(_registry(tmp_path, '[datasets.mixed]\npath = "mixed"\n'))
    tables = registry.get("mixed").tables()
    assert [(t.file, t.name) for t in tables] == [("A.csv", "a"), ("a.csv", "a_2")]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("[datasets.x]\npath = 'absent'\n", "dataset 'x': its folder does not exist"),
        ("[datasets.x]\n", "dataset 'x': 'path' must be a folder path"),
        ("[datasets.x]\npath = 'd'\nowner = 'me'\n", "dataset 'x': unknown keys: owner"),
        ("[datasets.'../x']\npath = 'd'\n", "an id is letters, digits"),
        ("[datasets]\nx = 3\n", "dataset 'x': must be a table"),
        ("datasets = 3\n", "'datasets' must be a table"),
        ("[other]\n", "unknown keys: other"),
        ("[datasets.x\n", "TOML syntax error"),
    ],
    ids=[
        "missing-folder",
        "no-path",
        "unknown-key",
        "bad-id",
        "entry-not-a-table",
        "datasets-not-a-table",
        "unknown-table",
        "syntax",
    ],
)
def test_invalid_registries_are_refused_without_host_paths(
    tmp_path: Path, body: str, message: str
) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(DatasetRegistryError, match=message) as caught:
        DatasetRegistry.load(_registry(tmp_path, body))
    assert str(tmp_path) not in str(caught.value)


def test_a_missing_registry_and_an_empty_dataset(tmp_path: Path) -> None:
    with pytest.raises(DatasetRegistryError, match=r"datasets\.toml does not exist"):
        DatasetRegistry.load(tmp_path / "datasets.toml")
    (tmp_path / "empty").mkdir()
    registry = DatasetRegistry.load(_registry(tmp_path, "[datasets.e]\npath = 'empty'\n"))
    with pytest.raises(DatasetRegistryError, match="dataset 'e' holds no CSV file"):
        registry.get("e").tables()
    with pytest.raises(DatasetNotFound, match="unknown dataset_id 'f'; registered: e"):
        registry.get("f")


def test_files_select_tables_by_file_or_table_name() -> None:
    retail = DatasetRegistry.load(DATASETS).get("retail")
    assert [t.name for t in retail.select(["orders.csv", "products"])] == ["orders", "products"]
    assert [t.name for t in retail.select(["orders", "orders.csv"])] == ["orders"]
    with pytest.raises(LookupError, match="no file or table 'refunds'"):
        retail.select(["refunds"])

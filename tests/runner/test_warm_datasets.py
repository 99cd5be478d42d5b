"""Warm datasets (runner/warm_data.py): a run starts with its tables already loaded, from an
image made by the first run over the dataset, made again when a file changes (issue 36)."""

from __future__ import annotations

import os
from pathlib import Path

from sandbox_kernel.host.cache import cache_dir
from sandbox_kernel.repl import warm
from sandbox_kernel.runner import RunnerSettings, execute_python, execute_sql
from sandbox_kernel.runner.warm_data import dataset_setup
from tests.runner.conftest import ok


def registry(folder: Path, rows: str = "1\n2\n3\n") -> Path:
    data = folder / "numbers"
    data.mkdir(parents=True, exist_ok=True)
    (data / "amounts.csv").write_text("n\n" + rows)
    (data / "labels.csv").write_text("label\nx\n")
    toml = folder / "datasets.toml"
    toml.write_text('[datasets.numbers]\npath = "numbers"\n')
    return toml


def images_of(settings: RunnerSettings) -> list[str]:
    """The warm image files of the numbers dataset with all its tables."""
    dataset = settings.registry().get("numbers")
    label = dataset_setup(dataset, dataset.tables(), "/data").label
    prefix = warm._label_prefix(label)
    return sorted(p.name for p in (cache_dir() / "warm").glob(f"{prefix}*.mem"))


def test_runs_start_with_the_tables_loaded_and_see_a_changed_file(tmp_path: Path) -> None:
    settings = RunnerSettings(datasets=registry(tmp_path), capsules=tmp_path / "c.sqlite3")
    first = ok(execute_sql("numbers", "SELECT sum(n) AS s FROM amounts", settings=settings))
    assert first.rows == [[6]]
    made = images_of(settings)
    assert len(made) == 1, "the first run made the dataset's image"
    again = ok(execute_sql("numbers", "SELECT sum(n) AS s FROM amounts", settings=settings))
    assert again.rows == [[6]]
    assert images_of(settings) == made, "the second run started from it"
    capsule = settings.capsule_store().get(again.run_id or "")
    assert capsule.timings_ms["load"] == 0.0

    amounts = tmp_path / "numbers" / "amounts.csv"
    os.utime(amounts)  # touched, not changed: the same image
    ok(execute_sql("numbers", "SELECT 1 AS one", settings=settings))
    assert images_of(settings) == made

    amounts.write_text("n\n10\n20\n")  # changed: a new image, the old one removed
    changed = ok(execute_sql("numbers", "SELECT sum(n) AS s FROM amounts", settings=settings))
    assert changed.rows == [[30]]
    newer = images_of(settings)
    assert len(newer) == 1 and newer != made


def test_a_selection_of_tables_and_a_python_run_use_the_same_mechanism(tmp_path: Path) -> None:
    settings = RunnerSettings(
        datasets=registry(tmp_path), capsules=tmp_path / "c.sqlite3", enable_python_execution=True
    )
    code = "result = sorted(dfs)"
    only = ok(execute_python("numbers", code, files=["amounts.csv"], settings=settings))
    assert only.rows == [["amounts"]]
    both = ok(execute_python("numbers", code, settings=settings))
    assert both.rows == [["amounts"], ["labels"]]


def test_a_dataset_that_will_not_load_is_reported_as_before(tmp_path: Path) -> None:
    toml = registry(tmp_path)
    (tmp_path / "numbers" / "amounts.csv").write_bytes(b"n\n\x00\x00\x00\xff\xfe\n" * 3)
    settings = RunnerSettings(datasets=toml, capsules=tmp_path / "c.sqlite3")
    response = execute_sql("numbers", "SELECT 1 AS one", settings=settings)
    assert not response.ok
    assert response.error is not None
    assert response.error.type.value == "RUNNER_INTERNAL_ERROR"
    assert "loading the dataset failed" in response.error.message
    assert "amounts.csv" in response.error.message
    assert str(tmp_path) not in response.model_dump_json()


def test_warm_images_on_disk_are_bounded(tmp_path: Path) -> None:
    folder = tmp_path / "warm"
    folder.mkdir()
    for i, size in enumerate((300, 200, 100)):
        (folder / f"{i}.mem").write_bytes(b"\0" * size)
        (folder / f"{i}.json").write_text("{}")
        os.utime(folder / f"{i}.json", (1000 + i, 1000 + i))
    warm.prune(folder, keep=folder / "2.mem", max_bytes=350)  # the oldest goes first
    assert sorted(p.name for p in folder.glob("*.mem")) == ["1.mem", "2.mem"]
    assert not (folder / "0.json").exists()

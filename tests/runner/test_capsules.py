"""Run capsules: every run is recorded with its request, code, report, response and timings."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from sandbox_kernel.runner import (
    Capsule,
    CapsuleNotFound,
    CapsuleStore,
    RunnerSettings,
    execute_python,
    execute_sql,
)
from tests.runner.conftest import ok


def test_a_python_run_is_recorded_whole(settings: RunnerSettings) -> None:
    response = ok(
        execute_python("retail", "print('hi')\nresult_df = orders", settings=settings, max_rows=2)
    )
    assert response.run_id is not None
    capsule = CapsuleStore(settings.capsules).get(response.run_id)
    assert (capsule.query_type, capsule.dataset_id) == ("python", "retail")
    assert capsule.code == "print('hi')\nresult_df = orders"
    assert isinstance(capsule.request, dict) and capsule.request["max_rows"] == 2
    assert capsule.policy_report is not None and capsule.policy_report["allowed"] is True
    assert capsule.response["rows"] == response.model_dump(mode="json")["rows"]
    assert capsule.response["run_id"] is None, "the id is given after the capsule is made"
    assert {"validate", "guard", "start", "load", "query", "collect", "total"} <= set(
        capsule.timings_ms
    )
    assert capsule.limits_hit == ["max_rows"]
    assert capsule.sandbox["timeout_seconds"] == 10.0 and capsule.sandbox["network"] is False
    assert str(settings.datasets.parent) not in capsule.model_dump_json()


def test_refused_and_failed_runs_are_recorded_too(settings: RunnerSettings) -> None:
    refused = execute_sql("retail", "DROP TABLE orders", settings=settings)
    invalid = execute_sql("retail", "SELECT 1", settings=settings, max_rows=0)
    store = CapsuleStore(settings.capsules)
    for response in (refused, invalid):
        assert response.run_id is not None
        capsule = store.get(response.run_id)
        assert capsule.response["status"] == "error"
        assert capsule.summary().error_type == (response.error.type if response.error else None)
    assert store.get(invalid.run_id or "").code == "SELECT 1"


def test_recent_lists_newest_first(tmp_path: Path) -> None:
    store = CapsuleStore(tmp_path / "c.sqlite3")
    assert store.recent() == [], "no file yet: nothing recorded"
    ids = [
        store.record(
            Capsule(created_at=f"2024-01-0{i}T00:00:00+00:00", response={"status": "success"})
        )
        for i in (1, 2, 3)
    ]
    assert [s.id for s in store.recent()] == ids[::-1]
    assert [s.id for s in store.recent(limit=1)] == [ids[2]]


def test_a_reader_between_the_files_birth_and_its_table_finds_nothing_yet(
    tmp_path: Path,
) -> None:
    # The first record creates the file, then its table: a listing in between (the server's
    # GET /capsules while the first run is recorded) must not fail.
    store = CapsuleStore(tmp_path / "c.sqlite3")
    store._create_file()
    assert store.recent() == []
    with pytest.raises(CapsuleNotFound, match="no run has been recorded yet"):
        store.get("abcdef")
    first = store.record(Capsule(response={"status": "success"}))
    assert [s.id for s in store.recent()] == [first]


def test_the_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "c.sqlite3"
    CapsuleStore(path).record(Capsule(response={"status": "success"}))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_ids_by_prefix(tmp_path: Path) -> None:
    store = CapsuleStore(tmp_path / "c.sqlite3")
    first = store.record(Capsule(id="abcdef0123456789", response={"status": "success"}))
    store.record(Capsule(id="abcdef9999999999", response={"status": "success"}))
    assert store.get("abcdef01").id == first
    with pytest.raises(CapsuleNotFound, match="several capsules start with 'abcdef'"):
        store.get("abcdef")
    with pytest.raises(CapsuleNotFound, match="prefix of 6"):
        store.get("abc")
    with pytest.raises(CapsuleNotFound, match="no capsule has the id '0123456789'"):
        store.get("0123456789")
    with pytest.raises(CapsuleNotFound, match="no run has been recorded yet"):
        CapsuleStore(tmp_path / "absent.sqlite3").get("abcdef")

"""The run log on its own: one JSON line per execution, private, kept open, never redirected."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from sandbox_kernel.kernel.runlog import RunLog
from sandbox_kernel.repl.models import CodeExecution, ExecutionStatus


def execution(count: int) -> CodeExecution:
    return CodeExecution(status=ExecutionStatus.OK, execution_count=count, stdout="hi\n")


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_record_is_one_private_json_line(tmp_path: Path) -> None:
    log = RunLog(tmp_path / "runs" / "log.jsonl")
    log.record("x = 1", execution(1), files_created=["a.csv"])
    log.record("y = 2", execution(2))
    log.close()
    entries = lines(log.path)
    assert [e["code"] for e in entries] == ["x = 1", "y = 2"]
    assert entries[0]["files_created"] == ["a.csv"]
    assert entries[0]["stdout_bytes"] == 3
    assert stat.S_IMODE(log.path.stat().st_mode) == 0o600


def test_a_removed_log_starts_again(tmp_path: Path) -> None:
    log = RunLog(tmp_path / "log.jsonl")
    log.record("first", execution(1))
    log.path.unlink()
    log.record("second", execution(2))
    log.close()
    assert [e["code"] for e in lines(log.path)] == ["second"]


def test_a_link_made_after_opening_redirects_nothing(tmp_path: Path) -> None:
    """The descriptor is kept: swapping the log for a link to another file (what a guest
    with the folder in its workspace could try) does not send lines there."""
    log = RunLog(tmp_path / "runs" / "log.jsonl")
    log.record("first", execution(1))
    target = tmp_path / "elsewhere.txt"
    target.write_text("untouched\n")
    moved = tmp_path / "runs" / "moved.jsonl"
    os.rename(log.path, moved)
    log.path.symlink_to(target)
    log.record("second", execution(2))
    log.close()
    assert target.read_text() == "untouched\n"
    assert [e["code"] for e in lines(moved)] == ["first", "second"]


def test_a_linked_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "runs").symlink_to(tmp_path / "real")
    log = RunLog(tmp_path / "runs" / "log.jsonl")
    with pytest.raises(OSError):
        log.record("x = 1", execution(1))
    assert not (tmp_path / "real" / "log.jsonl").exists()

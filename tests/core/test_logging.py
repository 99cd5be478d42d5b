"""Tests for SandboxLogger: JSON lines, sinks, levels, redaction, bounds."""

from __future__ import annotations

import io
import json
import logging
import threading
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any

import pytest

from sandbox_kernel.core.logging import MAX_EVENTS, SandboxLogger, SecurityEventKind
from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.core.results import RuntimeType

SECRET = "sk-live-0123456789"


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


@pytest.fixture
def stream() -> io.StringIO:
    return io.StringIO()


@pytest.fixture
def log(stream: io.StringIO) -> SandboxLogger:
    return SandboxLogger("sandbox_kernel.tests", stream=stream)


# --- the event format ---------------------------------------------------------------------


def test_each_event_is_one_json_line_with_event_ts_and_run_id(
    log: SandboxLogger, stream: io.StringIO
) -> None:
    log.execution_start(RuntimeType.PYTHON, ExecutionPolicy(), run_id="r1")
    log.execution_complete(True, 12.5, 1000, run_id="r1")
    log.security_event(SecurityEventKind.TIMEOUT, "deadline passed")
    assert stream.getvalue().endswith("\n")
    events = _lines(stream)
    assert [e["event"] for e in events] == [
        "execution_start",
        "execution_complete",
        "security_event",
    ]
    assert [e["run_id"] for e in events] == ["r1", "r1", None]
    assert events == log.events


def test_timestamp_is_utc_iso8601_with_milliseconds(log: SandboxLogger) -> None:
    before = datetime.now(UTC)
    ts = log.emit("tick")["ts"]
    after = datetime.now(UTC)
    assert isinstance(ts, str)
    assert ts.endswith("Z")
    assert len(ts.split(".")[1]) == len("123Z")
    stamp = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    assert before.replace(microsecond=before.microsecond // 1000 * 1000) <= stamp <= after


def test_returned_dict_is_what_was_written(log: SandboxLogger, stream: io.StringIO) -> None:
    event = log.execution_complete(False, 3.25, 42, run_id="r9", limit="fuel")
    assert _lines(stream) == [event]
    assert event["success"] is False
    assert event["duration_ms"] == 3.25
    assert event["fuel_consumed"] == 42
    assert event["limit"] == "fuel"


def test_execution_start_carries_the_policy_snapshot(log: SandboxLogger) -> None:
    policy = ExecutionPolicy(fuel_budget=5, mount_data_dir=Path("/srv/data"))
    event = log.execution_start(RuntimeType.JAVASCRIPT, policy, run_id="r2", cell=3)
    assert event["runtime"] == "javascript"
    assert event["policy"] == policy.snapshot()
    assert event["cell"] == 3


def test_execution_start_accepts_a_runtime_name(log: SandboxLogger) -> None:
    assert log.execution_start("python", ExecutionPolicy())["runtime"] == "python"


@pytest.mark.parametrize("kind", [SecurityEventKind.FS_DENIED, "fs_denied"], ids=["enum", "text"])
def test_security_event_fields(log: SandboxLogger, kind: SecurityEventKind | str) -> None:
    event = log.security_event(kind, "open('/etc/passwd') refused", path=Path("/etc/passwd"))
    assert event["kind"] == "fs_denied"
    assert event["detail"] == "open('/etc/passwd') refused"
    assert event["path"] == "/etc/passwd"


def test_reserved_keys_cannot_be_overridden(log: SandboxLogger) -> None:
    forged: dict[str, Any] = {"event": "fake", "ts": "forged"}
    event = log.emit("real", run_id="r3", note="x", **forged)
    assert (event["event"], event["run_id"], event["note"]) == ("real", "r3", "x")
    assert event["ts"] != "forged"
    event = log.security_event("trap", "boom", **forged)
    assert event["event"] == "security_event"
    assert event["ts"] != "forged"


class _Colour(Enum):
    RED = 1


def test_values_are_made_json_safe(log: SandboxLogger, stream: io.StringIO) -> None:
    event = log.emit(
        "values",
        path=Path("/a/b"),
        colour=_Colour.RED,
        kind=SecurityEventKind.TRAP,
        tags={"b", "a"},
        pair=(1, 2),
        raw=b"bytes",
        ratio=float("nan"),
        when=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
        nested={"p": Path("x"), 1: [Path("y")]},
        thing=object,
    )
    assert _lines(stream) == [event]
    assert event["path"] == "/a/b"
    assert event["colour"] == 1
    assert event["kind"] == "trap"
    assert event["tags"] == ["a", "b"]
    assert event["pair"] == [1, 2]
    assert event["raw"] == "bytes"
    assert event["ratio"] == "nan"
    assert event["when"] == "2025-01-02T03:04:05+00:00"
    assert event["nested"] == {"p": "x", "1": ["y"]}
    assert event["thing"] == repr(object)


# --- secrets ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["api_key", "OPENAI_API_KEY", "apikey", "token", "auth_token", "client_secret", "password"],
)
def test_secret_fields_are_redacted(log: SandboxLogger, stream: io.StringIO, key: str) -> None:
    secret: dict[str, Any] = {key: SECRET}
    event = log.emit("llm_call", model="m", **secret)
    assert event[key] == "[redacted]"
    assert event["model"] == "m"
    assert SECRET not in stream.getvalue()


def test_nested_secrets_are_redacted(log: SandboxLogger, stream: io.StringIO) -> None:
    event = log.emit(
        "request", headers={"Authorization": SECRET, "x": 1}, items=[{"token": SECRET}]
    )
    assert event["headers"] == {"Authorization": "[redacted]", "x": 1}
    assert event["items"] == [{"token": "[redacted]"}]
    assert SECRET not in stream.getvalue()


def test_secret_env_in_a_policy_never_reaches_the_log(
    log: SandboxLogger, stream: io.StringIO
) -> None:
    log.execution_start("python", ExecutionPolicy(env={"SERVICE_API_KEY": SECRET}))
    assert SECRET not in stream.getvalue()


# --- sinks --------------------------------------------------------------------------------


def test_events_are_appended_to_a_file(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"event": "earlier"}\n', encoding="utf-8")
    log = SandboxLogger(path=path)
    log.emit("one")
    SandboxLogger(path=str(path)).emit("two")
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [line["event"] for line in lines] == ["earlier", "one", "two"]


def test_stream_and_file_together(tmp_path: Path, stream: io.StringIO) -> None:
    path = tmp_path / "events.jsonl"
    SandboxLogger(stream=stream, path=path).emit("both", n=1)
    assert stream.getvalue() == path.read_text(encoding="utf-8")


def test_stream_is_flushed_after_each_event(log: SandboxLogger) -> None:
    class Recording(io.StringIO):
        flushes = 0

        def flush(self) -> None:
            self.flushes += 1
            super().flush()

    recording = Recording()
    SandboxLogger(stream=recording).emit("a")
    assert recording.flushes == 1


def test_a_closed_stream_does_not_stop_the_caller(caplog: pytest.LogCaptureFixture) -> None:
    closed = io.StringIO()
    closed.close()
    log = SandboxLogger("sandbox_kernel.tests.closed", stream=closed)
    caplog.set_level(logging.INFO, logger="sandbox_kernel.tests.closed")
    event = log.emit("still_logged")
    assert log.events == [event]
    assert any(r.levelno == logging.ERROR for r in caplog.records)


def test_an_unwritable_file_does_not_stop_the_caller(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = SandboxLogger("sandbox_kernel.tests.dir", path=tmp_path)  # a folder, not a file
    caplog.set_level(logging.INFO, logger="sandbox_kernel.tests.dir")
    log.emit("still_logged")
    assert [r.levelno for r in caplog.records] == [logging.ERROR, logging.INFO]


# --- the stdlib logger --------------------------------------------------------------------


def test_levels_and_messages(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sandbox_kernel")
    log = SandboxLogger()
    log.execution_start(RuntimeType.PYTHON, ExecutionPolicy())
    log.execution_complete(True, 1.0, 10)
    log.security_event(SecurityEventKind.FUEL_EXHAUSTION, "out of fuel")
    records = [r for r in caplog.records if r.name == "sandbox_kernel"]
    assert [r.levelno for r in records] == [logging.INFO, logging.INFO, logging.WARNING]
    assert [json.loads(r.getMessage()) for r in records] == log.events
    assert records[2].event == log.events[2]  # type: ignore[attr-defined]


def test_given_logger_is_used(caplog: pytest.LogCaptureFixture) -> None:
    mine = logging.getLogger("my.app.sandbox")
    caplog.set_level(logging.INFO, logger="my.app.sandbox")
    SandboxLogger(logger=mine).security_event("trap", "unreachable")
    assert [r.name for r in caplog.records] == ["my.app.sandbox"]
    assert caplog.records[0].levelno == logging.WARNING


# --- the event buffer ---------------------------------------------------------------------


def test_events_keep_only_the_most_recent() -> None:
    log = SandboxLogger("sandbox_kernel.tests.bounded")
    for n in range(MAX_EVENTS + 5):
        log.emit("n", n=n)
    events = log.events
    assert len(events) == MAX_EVENTS == 1000
    assert events[0]["n"] == 5
    assert events[-1]["n"] == MAX_EVENTS + 4


def test_events_returns_a_copy(log: SandboxLogger) -> None:
    log.emit("a")
    log.events.clear()
    assert len(log.events) == 1


def test_events_are_per_logger(stream: io.StringIO) -> None:
    first, second = SandboxLogger(stream=stream), SandboxLogger(stream=stream)
    first.emit("mine")
    assert second.events == []


def test_threads_never_interleave_lines(tmp_path: Path, stream: io.StringIO) -> None:
    path = tmp_path / "events.jsonl"
    log = SandboxLogger("sandbox_kernel.tests.threads", stream=stream, path=path)

    def work(worker: int) -> None:
        for n in range(50):
            log.emit("work", worker=worker, n=n, payload="x" * 200)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    file_lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    assert len(_lines(stream)) == len(file_lines) == 400


def test_security_event_kinds() -> None:
    assert {kind.value for kind in SecurityEventKind} == {
        "fuel_exhaustion",
        "memory_limit",
        "timeout",
        "output_truncated",
        "fs_denied",
        "open_files",
        "file_size",
        "trap",
        "symlink_skipped",
    }
    assert str(SecurityEventKind.TRAP) == "trap"

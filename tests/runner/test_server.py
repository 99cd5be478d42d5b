"""The agent server as its users reach it: `sandbox-kernel serve` in a process of its own,
plain HTTP from httpx, the scripted model planning, every query in the real sandbox.

The seed's phase C is here: execute_python through the server, /chat with an explicit Python
request, the capsule of a Python run keeping its code; and the golden query of each example
dataset, planned by the model from a question.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from sandbox_kernel.runner import RunnerSettings
from tests.runner.serving import (
    QUESTIONS,
    TOKEN,
    Server,
    Serving,
    expected,
    names,
    payload,
    read_events,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(servers: Serving) -> Server:
    return servers.start()


@pytest.fixture(scope="module")
def sql_only(servers: Serving) -> Server:
    """A server with ENABLE_PYTHON_EXECUTION off (the default)."""
    return servers.start(python=False, name="sql-only")


def test_healthz_needs_no_token_and_says_nothing_else(server: Server) -> None:
    answer = httpx.get(f"{server.url}/healthz")
    assert (answer.status_code, answer.text) == (200, "ok")


def test_datasets_lists_ids_tables_and_no_host_path(server: Server) -> None:
    with server.client() as client:
        found = client.get("/datasets").json()["datasets"]
    assert [d["id"] for d in found] == ["retail", "weather"]
    assert [t["name"] for t in found[0]["tables"]] == ["customers", "orders", "products"]
    assert "/" not in str(found)  # ids, names and file names only


def test_explicit_sql_streams_every_status_and_the_table(server: Server) -> None:
    events = server.chat("SQL: SELECT name FROM customers ORDER BY name LIMIT 2")
    assert names(events) == ["planning", "validating", "executing", "result", "done"]
    assert payload(events, "planning")["mode"] == "explicit"
    checked = payload(events, "validating")
    assert (checked["query_type"], checked["allowed"]) == ("sql", True)
    result = payload(events, "result")
    assert result["status"] == "success"
    assert result["columns"] == ["name"] and len(result["rows"]) == 2
    assert payload(events, "done")["run_id"] == result["run_id"]


def test_explicit_python_runs_and_its_capsule_keeps_the_code(server: Server) -> None:
    code = "result_df = orders.groupby('status', as_index=False).size()"
    events = server.chat(f"PYTHON: {code}")
    result = payload(events, "result")
    assert result["status"] == "success", result
    assert result["query_type"] == "python" and result["columns"] == ["status", "size"]
    with server.client() as client:
        capsule = client.get(f"/capsules/{result['run_id']}").json()
    assert capsule["query_type"] == "python"
    assert capsule["code"] == code
    assert capsule["request"]["python_code"] == code
    assert capsule["policy_report"]["allowed"] is True
    assert capsule["response"]["rows"] == result["rows"]
    assert {"guard", "start", "load", "query", "collect", "total"} <= set(capsule["timings_ms"])
    assert capsule["sandbox"]["network"] is False


@pytest.mark.parametrize("question", list(QUESTIONS))
def test_the_model_plans_each_golden_query(server: Server, question: str) -> None:
    golden = QUESTIONS[question]
    events = server.chat(question, dataset_id=golden.split(".")[0])
    assert names(events) == ["planning", "validating", "executing", "result", "done"]
    plan = payload(events, "validating")
    assert plan["source"] == "model" and plan["model"] == "scripted:model.json"
    assert plan["query_type"] == ("sql" if golden.endswith(".sql") else "python")
    assert plan["explanation"] == "Here is the query."
    result = payload(events, "result")
    assert result["status"] == "success", result
    table = expected(golden)
    assert (result["columns"], result["rows"]) == (table["columns"], table["rows"])


def test_an_answer_without_a_query_is_a_planning_error(server: Server) -> None:
    events = server.chat("What is the meaning of life?")
    assert names(events) == ["planning", "error", "done"]
    assert payload(events, "error")["type"] == "PLANNING_ERROR"
    assert "no ```sql or ```python code block" in payload(events, "error")["message"]


def test_the_guard_refuses_planned_or_explicit_code_before_it_runs(server: Server) -> None:
    before = set(server.capsule_ids())
    events = server.chat("PYTHON: import os\nresult = os.listdir('/')")
    assert names(events) == ["planning", "validating", "result", "error", "done"]
    assert payload(events, "validating")["allowed"] is False
    assert "os" in payload(events, "validating")["violations"][0]
    assert payload(events, "result")["error"]["type"] == "PYTHON_POLICY_VIOLATION"
    assert len(set(server.capsule_ids()) - before) == 1  # refused, and recorded


def test_a_refused_python_request_says_why(sql_only: Server) -> None:
    events = sql_only.chat("PYTHON: result = 1")
    assert "executing" not in names(events)
    error = payload(events, "result")["error"]
    assert error["type"] == "PYTHON_EXECUTION_DISABLED"
    assert "ENABLE_PYTHON_EXECUTION=1" in error["message"]
    # A question the model would answer in Python is refused the same way, and SQL still runs.
    events = sql_only.chat("Show revenue by category with pandas")
    assert payload(events, "result")["error"]["type"] == "PYTHON_EXECUTION_DISABLED"
    assert payload(sql_only.chat("Who are the best customers?"), "result")["status"] == "success"


def test_a_runaway_query_times_out_and_the_server_goes_on(servers: Serving) -> None:
    quick = servers.start("--timeout", "2", name="quick-timeout")
    events = quick.chat("run forever")
    result = payload(events, "result")
    assert result["status"] == "timeout"
    assert result["error"]["type"] == "RUNNER_TIMEOUT"
    assert result["limits_hit"] == ["timeout"]
    assert payload(quick.chat("SQL: SELECT 1 AS one"), "result")["rows"] == [[1]]


def test_capsules_list_newest_first_and_show_one(server: Server) -> None:
    server.chat("SQL: SELECT 41 + 1 AS answer")
    with server.client() as client:
        listed = client.get("/capsules", params={"limit": 1}).json()["capsules"]
        assert len(listed) == 1
        newest = client.get(f"/capsules/{listed[0]['id'][:8]}").json()
        assert newest["code"] == "SELECT 41 + 1 AS answer"
        assert newest["response"]["rows"] == [[42]]
        missing = client.get("/capsules/ffffffffffff")
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "NOT_FOUND"
        assert client.get("/capsules", params={"limit": "0"}).status_code == 400


def test_the_page_and_its_files_are_served_with_a_strict_policy(server: Server) -> None:
    with server.client() as client:
        page = client.get("/")
        script = client.get("/static/chat.js")
        assert client.get("/static/../server.py").status_code == 404
    assert page.status_code == 200 and '<form id="ask">' in page.text
    assert script.headers["content-type"].startswith("text/javascript")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert page.headers["x-content-type-options"] == "nosniff"


class _BrokenModel:
    """A provider that breaks its contract (raises what is not an LLMError)."""

    name = "broken"

    def complete(self, messages: object) -> object:
        raise ZeroDivisionError("a bug in someone's provider")


def test_a_failure_inside_a_turn_still_ends_the_stream(settings: RunnerSettings) -> None:
    """The app in this process (uvicorn on a thread), with a provider no config can make."""
    import socket
    import threading

    import uvicorn

    from sandbox_kernel.runner.server import ServeSettings, create_app

    serve = ServeSettings(token=SecretStr(TOKEN), processes=False)
    app = create_app(serve, settings, _BrokenModel(), warm=False)  # type: ignore[arg-type]
    listener = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]})
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        headers = {"Authorization": f"Bearer {TOKEN}"}

        def chat(message: str) -> list[tuple[str, Any]]:
            body = {"message": message, "dataset_id": "retail"}
            answer = httpx.post(f"{url}/chat", json=body, headers=headers, timeout=60)
            return list(read_events(iter(answer.text.splitlines())))

        events = chat("anything at all")
        assert names(events) == ["planning", "error", "done"]
        assert payload(events, "error")["type"] == "RUNNER_INTERNAL_ERROR"
        assert payload(chat("SQL: SELECT 2 AS two"), "result")["rows"] == [[2]]
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        listener.close()


# -- a clear start (issue 36) ------------------------------------------------------------------


def test_a_server_without_a_registry_starts_and_says_how_to_register_one(
    servers: Serving, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere" / "datasets.toml"
    bare = servers.start("--datasets", str(missing), name="bare")
    with bare.client() as client:
        answer = client.get("/datasets")
    assert answer.status_code == 200
    assert answer.json()["datasets"] == []
    assert "--datasets PATH or SANDBOX_KERNEL_DATASETS" in answer.json()["problem"]
    said = bare.log.read_text()
    assert f"no dataset registry at {missing}" in said and "Traceback" not in said


@pytest.mark.parametrize(
    "registry",
    ["[datasets.x\npath = ", '[datasets.x]\npath = "no/such/folder"\n', "[other]\n"],
    ids=["not-toml", "missing-folder", "unknown-key"],
)
def test_a_broken_registry_is_one_line_and_exit_status_2(tmp_path: Path, registry: str) -> None:
    path = tmp_path / "datasets.toml"
    path.write_text(registry)
    command = [str(Path(sys.executable).parent / "sandbox-kernel"), "serve", "--port", "0"]
    done = subprocess.run(
        [*command, "--datasets", str(path), "--token", TOKEN],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"sandbox-kernel serve: {path}: "), lines
    assert done.stdout == ""  # no link printed: nothing was served

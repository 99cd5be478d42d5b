"""Two agent servers behind nginx, sharing one PostgreSQL record of runs (issue 36).

Everything real: Debian's PostgreSQL in a private cluster, Debian's nginx, two
`sandbox-kernel serve` processes with one worker process each, clients over HTTP. A chat is
answered by either replica; each replica lists the other's runs; a replica stopped while the
proxy sends it traffic and the database restarted mid-run lose no chat and no capsule.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.runner.serving import TOKEN, Server, Serving, read_events
from tests.services import Postgres, nginx, postgres

SQL = "SQL: SELECT count(*) AS n FROM orders"


@pytest.fixture(scope="module")
def database() -> Iterator[Postgres]:
    with postgres() as db:
        yield db


@pytest.fixture
def replicas(tmp_path: Path, database: Postgres) -> Iterator[tuple[str, list[Server], Serving]]:
    serving = Serving(tmp_path)
    try:
        servers = [
            serving.start("--workers", "1", "--database", database.url, name=f"replica{i}")
            for i in (1, 2)
        ]
        with nginx(tmp_path / "nginx", [s.url for s in servers]) as proxy:
            yield proxy, servers, serving
    finally:
        serving.stop()


def chat(url: str, message: str = SQL) -> dict[str, Any]:
    """One chat through `url`: its result and done events, the HTTP status and text when it
    is not a stream of events, or {"cut": ...} when the connection broke mid-answer."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    body = {"message": message, "dataset_id": "retail"}
    events: dict[str, Any] = {}
    try:
        with (
            httpx.Client(base_url=url, headers=headers, timeout=120) as client,
            client.stream("POST", "/chat", json=body) as answer,
        ):
            if answer.status_code != 200:
                return {"http_status": answer.status_code, "text": answer.read().decode()}
            for name, data in read_events(answer.iter_lines()):
                events[name] = data
    except httpx.TransportError as exc:
        return {"cut": repr(exc), **events}
    if "done" not in events:
        return {"cut": "the stream ended without its done event", **events}
    return {"result": events.get("result"), "done": events.get("done")}


def chats_during(url: str, n: int, clients: int, event: threading.Event) -> list[dict[str, Any]]:
    """`n` chats from `clients` threads; `event` is set once a quarter have been answered."""
    answers: list[dict[str, Any]] = []
    lock = threading.Lock()
    started = 0

    def client() -> None:
        nonlocal started
        while True:
            with lock:
                if started >= n:
                    return
                started += 1
            answer = chat(url)
            with lock:
                answers.append(answer)
                if len(answers) >= n // 4:
                    event.set()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return answers


def under_load(proxy: str, n: int, clients: int, act: Callable[[], object]) -> list[dict[str, Any]]:
    """`n` chats from `clients` clients through `proxy`; `act` once a quarter are answered."""
    quarter = threading.Event()
    results: list[list[dict[str, Any]]] = []
    load = threading.Thread(target=lambda: results.append(chats_during(proxy, n, clients, quarter)))
    load.start()
    assert quarter.wait(120), "no chat was answered"
    act()
    load.join(timeout=300)
    assert results and len(results[0]) == n, results
    return results[0]


def recorded(database: Postgres, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The capsules of `run_ids` in the database, parsed whole (a half-written one fails)."""
    rows = database.query("SELECT id, status, capsule FROM capsules")
    found = {str(i): (str(status), json.loads(str(capsule))) for i, status, capsule in rows}
    return {r: found[r][1] for r in run_ids if r in found}


def test_two_replicas_behind_nginx_share_one_record(
    replicas: tuple[str, list[Server], Serving], database: Postgres
) -> None:
    proxy, servers, _ = replicas
    answers = [chat(proxy) for _ in range(6)]
    assert all(a["result"]["status"] == "success" for a in answers), answers
    assert all(a["result"]["rows"] == [[answers[0]["result"]["rows"][0][0]]] for a in answers)
    run_ids = [a["result"]["run_id"] for a in answers]
    assert len(set(run_ids)) == 6
    capsules = recorded(database, run_ids)
    assert set(capsules) == set(run_ids)
    # Each replica lists every run, whichever replica answered it; each answered some.
    for server in servers:
        assert set(run_ids) <= set(server.capsule_ids())
    served = [s.log.read_text() for s in servers]
    assert all(s.process.poll() is None for s in servers), served


def test_a_replica_stopped_under_traffic_loses_no_chat_and_no_capsule(
    replicas: tuple[str, list[Server], Serving], database: Postgres
) -> None:
    proxy, servers, _ = replicas
    # As an orchestrator stops a replica: SIGTERM, then it drains.
    answers = under_load(proxy, 40, 4, servers[0].process.terminate)
    failed = [a for a in answers if (a.get("result") or {}).get("status") != "success"]
    assert not failed, failed
    # uvicorn drains, then ends by the signal it was sent (it raises it again once done).
    assert servers[0].process.wait(timeout=60) in (0, -15)
    run_ids = [a["result"]["run_id"] for a in answers]
    capsules = recorded(database, run_ids)
    assert set(capsules) == set(run_ids), "a chat's capsule is missing"
    for run_id, capsule in capsules.items():
        assert capsule["id"] == run_id and capsule["response"]["status"] == "success"


def test_the_database_restarted_mid_run_loses_no_capsule(
    replicas: tuple[str, list[Server], Serving], database: Postgres
) -> None:
    proxy, _, _ = replicas
    # Every connection cut; writes meanwhile wait and try again.
    answers = under_load(proxy, 24, 2, lambda: database.restart(pause=2.0))
    assert all(a["result"]["status"] == "success" for a in answers), answers
    run_ids = [a["result"]["run_id"] for a in answers]
    assert all(run_ids), "a run was answered without its capsule"
    assert set(recorded(database, run_ids)) == set(run_ids)


def test_a_replica_killed_under_traffic_leaves_only_its_own_chats_unanswered(
    replicas: tuple[str, list[Server], Serving], database: Postgres
) -> None:
    """SIGKILL: the replica cannot finish what it took. Its chats in flight are cut (the
    client sees the connection break, the page says so); every other chat is answered by the
    other replica; a run that had reached the killed replica's worker is still recorded whole
    (the worker finishes it, then ends with its server), and no capsule is half-written."""
    proxy, servers, _ = replicas
    answers = under_load(proxy, 40, 4, servers[0].process.kill)
    answered = [a for a in answers if "result" in a]
    # A chat the killed replica had begun answering is cut; one it had taken but not begun
    # answering gets nginx's 502 (a POST is never sent to a second replica).
    lost = [a for a in answers if "cut" in a or a.get("http_status") == 502]
    assert len(answered) + len(lost) == 40, answers
    assert all(a["result"]["status"] == "success" for a in answered), answered
    assert len(lost) <= 17, "more chats lost than the killed replica could hold (1 + queue 16)"
    assert len(answered) >= 40 - 17
    rows = database.query("SELECT id, capsule FROM capsules")
    capsules = {str(i): json.loads(str(c)) for i, c in rows}  # every one parses whole
    assert all(c["id"] == i for i, c in capsules.items())
    assert {a["result"]["run_id"] for a in answered} <= set(capsules)

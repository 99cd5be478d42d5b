"""The agent server under attack: no token or a wrong one, a forged cookie request, a foreign
Host, bodies that are not JSON or too big, a model that plans an escape, clients that vanish
mid-run, never read, or flood the queue, and results that carry HTML. Each gets a clear
error; the run is recorded all the same; the server lives on and the next chat works.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import httpx
import pytest

from tests.runner.serving import TOKEN, Server, Serving, names, payload

pytestmark = pytest.mark.slow

PROTECTED = [
    ("GET", "/"),
    ("GET", "/static/chat.js"),
    ("GET", "/datasets"),
    ("GET", "/capsules"),
    ("GET", "/capsules/0123456789ab"),
    ("POST", "/chat"),
]
RUN_FOREVER = "PYTHON: while True:\n    pass"


@pytest.fixture(scope="module")
def server(servers: Serving) -> Server:
    return servers.start("--timeout", "60", "--send-timeout", "3")


@pytest.fixture(scope="module")
def single(servers: Serving) -> Server:
    """One worker and no queue: a second chat while one runs is turned away."""
    return servers.start("--workers", "1", "--queue", "0", "--timeout", "60", name="single")


def _works(server: Server) -> None:
    assert server.alive()
    events = server.chat("SQL: SELECT COUNT(*) AS n FROM customers")
    assert payload(events, "result")["status"] == "success", events


def _capsules(server: Server) -> list[dict[str, Any]]:
    with server.client() as client:
        listed: list[dict[str, Any]] = client.get("/capsules?limit=200").json()["capsules"]
    return listed


def _new_capsule(server: Server, before: set[str], within: float) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        fresh = [c for c in _capsules(server) if c["id"] not in before]
        if fresh:
            return fresh[0]
        time.sleep(0.1)
    raise AssertionError(f"no capsule was recorded within {within} s")


@pytest.mark.parametrize(("method", "path"), PROTECTED)
@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token-0123456789abcdef"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": f"Bearer {TOKEN[:-1]}"},
        {"Cookie": "sandbox_kernel_token=wrong-token-0123456789abcdef"},
    ],
    ids=["none", "wrong", "basic-scheme", "prefix", "wrong-cookie"],
)
def test_nothing_is_served_without_the_token(
    server: Server, method: str, path: str, headers: dict[str, str]
) -> None:
    body = {"message": "SQL: SELECT 1", "dataset_id": "retail"}
    answer = httpx.request(method, f"{server.url}{path}", headers=headers, json=body)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == "Bearer"
    assert answer.json()["error"]["type"] == "UNAUTHORIZED"


def test_a_token_in_the_link_opens_only_the_landing_page(server: Server) -> None:
    assert httpx.get(f"{server.url}/datasets", params={"token": TOKEN}).status_code == 401
    wrong = httpx.get(f"{server.url}/", params={"token": "not-the-token-at-all-000"})
    assert wrong.status_code == 401
    landing = httpx.get(f"{server.url}/", params={"token": TOKEN})
    assert landing.status_code == 303 and landing.headers["location"] == "/"
    cookie = landing.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie


def test_a_cookie_post_from_another_origin_is_refused(server: Server) -> None:
    cookies = {"sandbox_kernel_token": TOKEN}
    body = {"message": "SQL: SELECT 1 AS one", "dataset_id": "retail"}
    with httpx.Client(base_url=server.url, cookies=cookies) as client:
        assert client.get("/datasets").status_code == 200  # a GET with the cookie reads
        assert client.post("/chat", json=body).status_code == 401  # no Origin
        forged = client.post("/chat", json=body, headers={"Origin": "http://evil.example"})
        assert forged.status_code == 401
        own = client.post("/chat", json=body, headers={"Origin": server.url})
        assert own.status_code == 200 and "event: done" in own.text


def test_a_foreign_host_header_is_refused(server: Server) -> None:
    """DNS rebinding: a page of another site that resolves to 127.0.0.1."""
    headers = {**server.headers, "Host": "attacker.example"}
    answer = httpx.get(f"{server.url}/datasets", headers=headers)
    assert answer.status_code == 400


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b"{not json", 400, "not JSON"),
        (b"\xff\xfe\x00garbage", 400, "not JSON"),
        (b"[]", 422, "input should be an object"),
        (b'{"message": "SQL: SELECT 1"}', 422, "dataset_id: is required"),
        (b'{"message": "", "dataset_id": "retail"}', 422, "message"),
        (b'{"message": 7, "dataset_id": "retail"}', 422, "message"),
        (b'{"message": "x", "dataset_id": "../../etc"}', 422, "dataset_id: must match"),
        (b'{"message": "x", "dataset_id": "retail", "sql": "DROP"}', 422, "unknown field"),
        (b'{"message": "SQL: SELECT 1", "dataset_id": "nope"}', 404, "registered: retail"),
    ],
)
def test_bad_bodies_get_a_clear_error(server: Server, body: bytes, status: int, words: str) -> None:
    headers = {**server.headers, "content-type": "application/json"}
    answer = httpx.post(f"{server.url}/chat", content=body, headers=headers)
    assert answer.status_code == status
    assert words in answer.json()["error"]["message"]
    _works(server)


def _raw(server: Server, head: str, body: bytes = b"") -> tuple[int, bytes]:
    """Send a hand-made request (one httpx would not send); the status and what came back."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as raw:
        raw.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        received = b""
        try:
            while chunk := raw.recv(1 << 16):
                received += chunk
        except ConnectionResetError:  # the server closed without reading the rest
            pass
    status = int(received.split(b" ", 2)[1])
    return status, received


def test_an_oversized_body_is_refused_before_it_is_read(server: Server) -> None:
    auth = f"Authorization: Bearer {TOKEN}\nConnection: close\n"
    head = f"POST /chat HTTP/1.1\nHost: 127.0.0.1\n{auth}Content-Length: 999999999999\n"
    status, received = _raw(server, head, b"{}")
    assert status == 413 and b"over 2,000,000 bytes" in received
    # No Content-Length: the body is counted as it arrives, and refused past the cap.
    chunk = b"10000\r\n" + b" " * 65_536 + b"\r\n"
    head = f"POST /chat HTTP/1.1\nHost: 127.0.0.1\n{auth}Transfer-Encoding: chunked\n"
    status, received = _raw(server, head, chunk * 40)
    assert status == 413 and b"over 2,000,000 bytes" in received
    _works(server)


def test_a_model_that_plans_an_escape_meets_the_guard(server: Server) -> None:
    events = server.chat("Please list the host's files")
    plan = payload(events, "validating")
    assert plan["source"] == "model" and plan["allowed"] is False
    assert "executing" not in names(events)
    assert payload(events, "result")["error"]["type"] == "PYTHON_POLICY_VIOLATION"


def test_a_client_that_disconnects_mid_run_cancels_it(server: Server) -> None:
    before = {c["id"] for c in _capsules(server)}
    started = time.monotonic()
    with (
        server.client() as client,
        client.stream(
            "POST", "/chat", json={"message": RUN_FOREVER, "dataset_id": "retail"}
        ) as answer,
    ):
        for line in answer.iter_lines():
            if line == "event: executing":
                break
    # The run had 60 s; the client left at once: it is stopped, and recorded as such.
    capsule = _new_capsule(server, before, within=20)
    assert capsule["error_type"] == "RUNNER_CANCELLED"
    assert capsule["duration_ms"] < 20_000
    assert time.monotonic() - started < 20
    _works(server)


def test_a_full_queue_gets_503_and_the_slot_comes_back(single: Server) -> None:
    body = {"message": RUN_FOREVER, "dataset_id": "retail"}
    with single.client() as client, client.stream("POST", "/chat", json=body) as running:
        lines = running.iter_lines()  # kept: a closed iterator would close the connection
        while next(lines) != "event: executing":
            pass
        busy = httpx.post(f"{single.url}/chat", json=body, headers=single.headers)
        assert busy.status_code == 503
        assert busy.headers["retry-after"] == "2"
        assert busy.json()["error"]["type"] == "SERVER_BUSY"
        assert single.alive()
        lines.close()
    _slot_comes_back(single, within=20)  # the first run is cancelled


def test_a_client_that_leaves_at_any_moment_frees_its_worker(single: Server) -> None:
    """Clients that leave 0 to 150 ms after their run was announced, 3 ms apart: one of them
    leaves as the run's load step ends and its query waits for the session, where a cancel
    found nothing running and was lost (the run then held the one worker to --timeout)."""
    body = {"message": RUN_FOREVER, "dataset_id": "retail"}
    for step in range(51):
        with single.client() as client, client.stream("POST", "/chat", json=body) as running:
            lines = running.iter_lines()
            while next(lines) != "event: executing":
                pass
            time.sleep(step * 0.003)
            lines.close()
        _slot_comes_back(single, within=10)  # the grace and a rollback at most; not 60 s


def _slot_comes_back(server: Server, within: float) -> None:
    """The next chat is admitted (no more 503) within `within` seconds, and answered."""
    deadline = time.monotonic() + within
    while True:
        answer = httpx.post(
            f"{server.url}/chat",
            json={"message": "SQL: SELECT 1 AS one", "dataset_id": "retail"},
            headers=server.headers,
        )
        if answer.status_code == 200:
            break
        assert answer.status_code == 503 and time.monotonic() < deadline, "the slot is held"
        time.sleep(0.05)
    assert "event: result" in answer.text


def test_a_client_that_never_reads_is_dropped_and_its_run_kept(server: Server) -> None:
    """About 2 MB of events for a client whose receive buffer is tiny and never read."""
    code = "result_rows = [['x' * 900] for _ in range(1000)]\nresult_columns = ['a']"
    body = json.dumps({"message": f"PYTHON: {code}", "dataset_id": "retail"}).encode()
    before = {c["id"] for c in _capsules(server)}
    host, port = server.url.removeprefix("http://").split(":")
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect((host, int(port)))
    request = (
        f"POST /chat HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    stalled.sendall(request + body)
    try:
        capsule = _new_capsule(server, before, within=30)
        assert capsule["status"] == "success"  # the run finished and was recorded
        _works(server)  # others are served while that client stalls
        time.sleep(4)  # past --send-timeout 3: the server has dropped the connection
        stalled.settimeout(10)
        received = 0
        while chunk := stalled.recv(1 << 16):
            received += len(chunk)
        assert 0 < received < 1_800_000, received  # cut short, then closed
    finally:
        stalled.close()
    _works(server)


def test_a_queued_chat_whose_client_leaves_never_runs(servers: Serving) -> None:
    queued = servers.start("--workers", "1", "--queue", "1", "--timeout", "60", name="queued")
    body = {"message": RUN_FOREVER, "dataset_id": "retail"}
    with queued.client() as first, first.stream("POST", "/chat", json=body) as running:
        lines = running.iter_lines()
        while next(lines) != "event: executing":
            pass
        with queued.client() as second, second.stream("POST", "/chat", json=body) as waiting:
            events = waiting.iter_lines()
            while next(events) != "event: executing":
                pass
            assert json.loads(next(events).removeprefix("data: "))["waiting"] == 1
            events.close()
        # The server learns within milliseconds that the queued client left (runner/server.py,
        # _WatchedStream); leaving the running chat in the same instant would race that.
        time.sleep(1)
        lines.close()
    deadline = time.monotonic() + 20
    while len(_capsules(queued)) < 2:
        assert time.monotonic() < deadline, "both runs should be recorded as cancelled"
        time.sleep(0.1)
    with queued.client() as client:
        records = [client.get(f"/capsules/{c['id']}").json() for c in _capsules(queued)]
    assert all(r["response"]["error"]["type"] == "RUNNER_CANCELLED" for r in records)
    never = [r for r in records if "before it started" in r["response"]["error"]["message"]]
    assert len(never) == 1 and "start" not in never[0]["timings_ms"]  # no sandbox was made
    _works(queued)

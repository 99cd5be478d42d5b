"""The agent server: the runner over HTTP, with a chat endpoint and one page.

    sandbox-kernel serve [--host 127.0.0.1] [--port 8765] [--token T] [--workers N] [--queue 16]
                         [--in-process] [--database postgresql://...]

    GET  /healthz              "ok", without the token, and nothing else
    GET  /                     the page (GET /?token=T once sets the session cookie)
    POST /chat                 {"message", "dataset_id"} -> Server-Sent Events:
                               planning, validating, executing, result, done (or error)
    GET  /datasets             the registered datasets and their tables
    GET  /capsules[?limit=N]   the newest runs
    GET  /capsules/{id}        one run: query_type, code or SQL, policy report, response,
                               timings, limits hit

Everything but /healthz needs the token: `Authorization: Bearer T`, or the cookie the page
gets from /?token=T (HttpOnly, SameSite=Strict; a cookie-authenticated POST must also come
from the page's own origin). The token is compared in constant time. Requests whose Host is
not the server's own are refused (DNS rebinding).

Runs go to `workers` worker processes (one per core by default: workers.py), each run in a
fresh sandbox session started from its dataset's warm image (warmed at start-up, before the
server answers); `queue` more may wait. A worker that dies or hangs is replaced, and its run
answered with a clear error. Capsules go to the SQLite file, or to the PostgreSQL database
`--database` names, which several servers share. Beyond that a chat gets 503 with
Retry-After at once. A client that disconnects cancels its run (recorded as
RUNNER_CANCELLED); a client that stops reading is dropped after `send_timeout_seconds`, its
run recorded all the same. Bodies over `max_body_bytes` get 413 before they are read.

Must not import: wasmtime (the runner does), anything Jupyter.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager
from importlib import resources
from typing import Annotated, Any, Final, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, JsonValue, SecretStr, ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import (
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from sandbox_kernel.llm.base import LLMProvider
from sandbox_kernel.runner.api import run_request
from sandbox_kernel.runner.capsules import new_capsule_id
from sandbox_kernel.runner.chat import (
    ChatRequest,
    Plan,
    Planner,
    PlanningFailed,
    explicit_plan,
    validation_event,
)
from sandbox_kernel.runner.datasets import Dataset
from sandbox_kernel.runner.engine import Cancellation, warm_up
from sandbox_kernel.runner.errors import CapsuleNotFound, DatasetNotFound, RunnerConfigError
from sandbox_kernel.runner.models import (
    MAX_TIMEOUT_SECONDS,
    QueryType,
    RunnerResponse,
    validation_messages,
)
from sandbox_kernel.runner.settings import RunnerSettings
from sandbox_kernel.runner.workers import WorkerPool

__all__ = ["TOKEN_ENV", "RunPool", "ServeSettings", "create_app"]

TOKEN_ENV: Final = "SANDBOX_KERNEL_SERVE_TOKEN"
COOKIE: Final = "sandbox_kernel_token"
_KEEPALIVE_SECONDS: Final = 15.0
_MAX_CAPSULES_LISTED: Final = 200
_PAGE_FILES: Final = {
    "chat.js": "text/javascript; charset=utf-8",
    "chat.css": "text/css; charset=utf-8",
}
_SECURITY_HEADERS: Final = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
    "x-frame-options": "DENY",
}
_LOCAL_HOSTS: Final = ("127.0.0.1", "localhost", "::1", "[::1]")

logger = logging.getLogger("sandbox_kernel.serve")

EventName = Literal["planning", "validating", "executing", "result", "done", "error"]


class ServeSettings(BaseModel):
    """How `sandbox-kernel serve` listens and how much it takes on."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8765
    token: SecretStr
    """The bearer token every request but /healthz must carry (16 characters at least)."""
    workers: Annotated[int, Field(ge=1, le=64)] = Field(default_factory=lambda: os.cpu_count() or 1)
    """Runs at once, each in its own sandbox (a run is CPU-bound: one per core by default)."""
    processes: bool = True
    """Runs go to `workers` worker processes (workers.py); False: to threads of the server's
    own process (one GIL: a second thread adds little; the load bench's baseline)."""
    queue: Annotated[int, Field(ge=0, le=1024)] = 16
    """Chats that may wait for a worker; beyond workers + queue a chat gets 503."""
    run_timeout_seconds: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_SECONDS)] = 10.0
    """Wall clock of each run (the runner request's timeout_seconds)."""
    max_body_bytes: Annotated[int, Field(gt=0, le=64_000_000)] = 2_000_000
    send_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 30.0
    """How long one write to a client may wait for it to read before it is dropped."""

    def model_post_init(self, context: Any, /) -> None:
        if len(self.token.get_secret_value()) < 16:
            raise ValueError("the token must be at least 16 characters")

    @staticmethod
    def new_token() -> str:
        return secrets.token_urlsafe(32)


class _Ticket:
    """One admitted chat's place in the pool, given back exactly once."""

    def __init__(self, pool: RunPool) -> None:
        self._pool = pool
        self._given_back = False
        self._lock = threading.Lock()

    def give_back(self) -> None:
        with self._lock:
            if self._given_back:
                return
            self._given_back = True
        self._pool._release()


class RunPool:
    """Runs on `workers` threads; at most `workers + queue` chats admitted at once."""

    def __init__(self, workers: int, queue: int) -> None:
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="sandbox-kernel-run")
        self._capacity = workers + queue
        self._admitted = 0
        self._lock = threading.Lock()

    @property
    def admitted(self) -> int:
        return self._admitted

    def admit(self) -> _Ticket | None:
        """A ticket, or None when the pool and its queue are full."""
        with self._lock:
            if self._admitted >= self._capacity:
                return None
            self._admitted += 1
        return _Ticket(self)

    def _release(self) -> None:
        with self._lock:
            self._admitted -= 1

    def run(self, ticket: _Ticket, job: Callable[[], RunnerResponse]) -> Future[RunnerResponse]:
        """Run `job` on a worker; the ticket is given back when it ends (not before: a run
        whose client left still holds its place until the cancel has stopped it)."""
        future = self._executor.submit(job)
        future.add_done_callback(lambda _: ticket.give_back())
        return future

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=False)


def _sse(event: EventName, data: JsonValue) -> bytes:
    """One Server-Sent Event; JSON on one line (json.dumps writes no newline)."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


class _WatchedStream(StreamingResponse):
    """A StreamingResponse whose stream stops as soon as its client leaves. Starlette listens
    for the disconnect only under servers older than ASGI 2.4; under uvicorn it learned of it
    at the next write, which for a chat queued or running is the next keepalive (15 s): a
    queued chat whose client had left could still start."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async with anyio.create_task_group() as group:

            async def stream() -> None:
                with contextlib.suppress(OSError):  # the client left during a write
                    await self.stream_response(send)
                group.cancel_scope.cancel()

            group.start_soon(stream)
            await self.listen_for_disconnect(receive)
            group.cancel_scope.cancel()  # the stream's generator is closed: its run cancelled


def _error(status: int, kind: str, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": {"type": kind, "message": message}}, status, headers=headers)


class _App:
    """The routes, over one runner configuration, one model and one pool."""

    def __init__(
        self,
        serve: ServeSettings,
        runner: RunnerSettings,
        provider: LLMProvider | None,
    ) -> None:
        self.serve = serve
        self.runner = runner
        self.provider = provider
        self.pool = RunPool(serve.workers, serve.queue)
        self.workers: WorkerPool | None = None  # started by the app's lifespan
        self.capsules = runner.capsule_store()

    # -- read-only routes --------------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        return PlainTextResponse("ok")

    async def page(self, request: Request) -> Response:
        token = request.query_params.get("token")
        if token is not None:  # the landing link: trade the token for the cookie, drop it
            if not self._is_token(token):
                return _error(401, "UNAUTHORIZED", "the token in the link is not this server's")
            landing = RedirectResponse("/", status_code=303)
            landing.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
            return landing
        return Response(_page_file("index.html"), media_type="text/html; charset=utf-8")

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _PAGE_FILES:
            return _error(404, "NOT_FOUND", "no such file")
        return Response(_page_file(name), media_type=_PAGE_FILES[name])

    async def datasets(self, request: Request) -> Response:
        if not self.runner.datasets.expanduser().exists():
            return JSONResponse({"datasets": [], "problem": self.runner.no_registry()})
        try:
            described = await anyio.to_thread.run_sync(self._describe)
        except RunnerConfigError as exc:
            return _error(500, "RUNNER_INTERNAL_ERROR", str(exc))
        return JSONResponse({"datasets": described})

    def _describe(self) -> list[dict[str, Any]]:
        return [dataset.describe() for dataset in self.runner.registry()]

    async def capsule_list(self, request: Request) -> Response:
        raw = request.query_params.get("limit", "20")
        if not raw.isdigit() or not 1 <= int(raw) <= _MAX_CAPSULES_LISTED:
            message = f"limit must be a whole number from 1 to {_MAX_CAPSULES_LISTED}"
            return _error(400, "VALIDATION_ERROR", message)
        summaries = await anyio.to_thread.run_sync(self.capsules.recent, int(raw))
        return JSONResponse({"capsules": [s.model_dump(mode="json") for s in summaries]})

    async def capsule(self, request: Request) -> Response:
        try:
            found = await anyio.to_thread.run_sync(self.capsules.get, request.path_params["id"])
        except CapsuleNotFound as exc:
            return _error(404, "NOT_FOUND", str(exc))
        return JSONResponse(found.model_dump(mode="json"))

    # -- chat --------------------------------------------------------------------------------

    async def chat(self, request: Request) -> Response:
        body = await _read_body(request, self.serve.max_body_bytes)
        if isinstance(body, Response):
            return body
        try:
            chat = ChatRequest.model_validate_json(body)
        except ValidationError as exc:
            details = validation_messages(exc)
            if any(e["type"] == "json_invalid" for e in exc.errors()):
                return _error(400, "VALIDATION_ERROR", "the body is not JSON: " + details[0])
            return _error(422, "VALIDATION_ERROR", "; ".join(details[:5]))
        try:
            dataset = await anyio.to_thread.run_sync(self.runner.registry().get, chat.dataset_id)
        except DatasetNotFound as exc:
            return _error(404, "VALIDATION_ERROR", f"dataset_id: {exc}")
        except RunnerConfigError as exc:
            return _error(500, "RUNNER_INTERNAL_ERROR", str(exc))
        ticket = self.pool.admit()
        if ticket is None:
            message = "every worker is busy and the queue is full: try again shortly"
            return _error(503, "SERVER_BUSY", message, **{"retry-after": "2"})
        return _WatchedStream(
            self._turn(chat, dataset, ticket),
            media_type="text/event-stream",
            headers={"x-accel-buffering": "no"},
        )

    async def _turn(
        self, chat: ChatRequest, dataset: Dataset, ticket: _Ticket
    ) -> AsyncIterator[bytes]:
        """One chat turn's events. Cancelled here (the client went away) means the run is
        cancelled too; the ticket goes back when the run has ended, or now when none began."""
        started = time.perf_counter()
        cancellation = Cancellation()
        submitted = False
        try:
            plan = explicit_plan(chat.message)
            mode = "explicit" if plan is not None else "model"
            model = None if self.provider is None else getattr(self.provider, "name", None)
            yield _sse("planning", {"mode": mode, "dataset_id": dataset.id, "model": model})
            if plan is None:
                try:
                    plan = await self._plan(chat, dataset)
                except PlanningFailed as exc:
                    yield _sse("error", {"type": "PLANNING_ERROR", "message": str(exc)})
                    yield _sse("done", {"run_id": None, "elapsed_ms": _ms_since(started)})
                    return
            verdict = validation_event(plan, self.runner)
            yield _sse("validating", verdict)
            if verdict["allowed"] and self._may_run(plan):
                waiting = self._waiting()
                yield _sse("executing", {"query_type": plan.query_type.value, "waiting": waiting})
            future = self.pool.run(ticket, lambda: self._run(plan, dataset, cancellation))
            submitted = True
            pending = asyncio.wrap_future(future)
            while True:
                try:
                    response = await asyncio.wait_for(asyncio.shield(pending), _KEEPALIVE_SECONDS)
                    break
                except TimeoutError:
                    yield b": still running\n\n"  # a comment: keeps proxies from timing out
            yield _sse("result", response.model_dump(mode="json"))
            if response.error is not None:
                error = response.error
                yield _sse("error", {"type": error.type.value, "message": error.message})
            yield _sse("done", {"run_id": response.run_id, "elapsed_ms": _ms_since(started)})
        except Exception:  # the client is answered, never left with a cut stream
            logger.exception("a chat turn failed")
            message = "the server failed unexpectedly (its log has the details)"
            yield _sse("error", {"type": "RUNNER_INTERNAL_ERROR", "message": message})
            yield _sse("done", {"run_id": None, "elapsed_ms": _ms_since(started)})
        finally:
            cancellation.cancel()  # a no-op once the run has ended
            if not submitted:
                ticket.give_back()

    async def _plan(self, chat: ChatRequest, dataset: Dataset) -> Plan:
        if self.provider is None:
            raise PlanningFailed(
                "no model is configured to plan a query (SANDBOX_KERNEL_LLM_PROVIDER and its "
                "settings): start the message with 'SQL:' or 'PYTHON:' to run a query as is"
            )
        planner = Planner(self.provider, self.runner)
        return await anyio.to_thread.run_sync(planner.plan, chat, dataset, abandon_on_cancel=True)

    def _run(self, plan: Plan, dataset: Dataset, cancellation: Cancellation) -> RunnerResponse:
        timeout = self.serve.run_timeout_seconds
        request = {**plan.request(dataset.id), "timeout_seconds": timeout}
        if self.workers is None or cancellation.cancelled:
            # A chat whose client left while it waited is recorded here, before any sandbox
            # is made: a worker would start it first, and only then hear of the cancel.
            return run_request(request, settings=self.runner, cancellation=cancellation)
        return self.workers.run(
            request, run_id=new_capsule_id(), timeout_seconds=timeout, cancellation=cancellation
        )

    def _may_run(self, plan: Plan) -> bool:
        return plan.query_type is QueryType.SQL or self.runner.enable_python_execution

    def _waiting(self) -> int:
        return max(0, self.pool.admitted - self.serve.workers)

    def _is_token(self, candidate: str) -> bool:
        expected = self.serve.token.get_secret_value().encode()
        return hmac.compare_digest(candidate.encode(), expected)


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def _page_file(name: str) -> bytes:
    return resources.files("sandbox_kernel.runner").joinpath("page", name).read_bytes()


async def _read_body(request: Request, limit: int) -> bytes | Response:
    """The body, or 413 as soon as it is known to exceed `limit` (from Content-Length or
    while it arrives), never holding more than `limit` bytes of it."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        return _error(413, "VALIDATION_ERROR", f"the body is over {limit:,} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return _error(413, "VALIDATION_ERROR", f"the body is over {limit:,} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class _Guard:
    """ASGI middleware: the token on every route but /healthz, security headers on every
    response, and a bound on how long a write may wait for a client that does not read."""

    def __init__(self, app: ASGIApp, serve: ServeSettings) -> None:
        self.app = app
        self.serve = serve
        self._token = serve.token.get_secret_value().encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        send = self._guarded_send(send)
        if not self._allowed(request):
            response = _error(
                401,
                "UNAUTHORIZED",
                "this server needs its token: 'Authorization: Bearer <token>', or open the "
                "link `sandbox-kernel serve` printed",
                **{"www-authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _allowed(self, request: Request) -> bool:
        path = request.url.path
        if path == "/healthz" or (path == "/" and "token" in request.query_params):
            return True  # the landing route checks the token itself
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and self._matches(value.strip()):
            return True
        cookie = request.cookies.get(COOKIE)
        if cookie is None or not self._matches(cookie):
            return False
        if request.method in ("GET", "HEAD"):
            return True
        # A cookie rides along with any request the browser makes: a POST must come from the
        # page itself (SameSite=Strict already keeps other sites' requests from carrying it).
        origin = request.headers.get("origin")
        return origin is not None and origin == f"{request.url.scheme}://{request.url.netloc}"

    def _matches(self, candidate: str) -> bool:
        return hmac.compare_digest(candidate.encode(), self._token)

    def _guarded_send(self, send: Send) -> Send:
        timeout = self.serve.send_timeout_seconds

        async def guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                for name, value in _SECURITY_HEADERS.items():
                    if name.encode() not in present:
                        headers.append((name.encode(), value.encode()))
                message["headers"] = headers
            try:
                await asyncio.wait_for(send(message), timeout)
            except TimeoutError:
                logger.warning("a client read nothing for %g s: its connection is dropped", timeout)
                raise ClientStalled(f"the client read nothing for {timeout:g} s") from None

        return guarded


class ClientStalled(ConnectionError):
    """A client stopped reading its response; the server drops the connection."""


def create_app(
    serve: ServeSettings,
    runner: RunnerSettings,
    provider: LLMProvider | None = None,
    *,
    warm: bool = True,
) -> Starlette:
    """The agent server as an ASGI app (uvicorn serves it: see cli.py)."""
    app = _App(serve, runner, provider)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        if serve.processes:  # each warms the images before it takes a run
            app.workers = WorkerPool(runner, serve.workers)
            if warm:
                await anyio.to_thread.run_sync(app.workers.wait_ready)
        elif warm and runner.datasets.expanduser().exists():  # the first chat pays for none
            await anyio.to_thread.run_sync(warm_up, runner)
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(app.pool.shutdown)
            if app.workers is not None:
                await anyio.to_thread.run_sync(app.workers.shutdown)

    hosts = ["*"] if serve.host in ("0.0.0.0", "::") else [*_LOCAL_HOSTS, serve.host]
    return Starlette(
        routes=[
            Route("/healthz", app.healthz),
            Route("/", app.page),
            Route("/static/{name}", app.static),
            Route("/datasets", app.datasets),
            Route("/capsules", app.capsule_list),
            Route("/capsules/{id}", app.capsule),
            Route("/chat", app.chat, methods=["POST"]),
        ],
        middleware=[
            Middleware(TrustedHostMiddleware, allowed_hosts=hosts),
            Middleware(_Guard, serve=serve),
        ],
        lifespan=lifespan,
    )

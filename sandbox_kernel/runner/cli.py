"""The runner's commands, registered into `sandbox-kernel` by cli.py.

    sandbox-kernel runner sql    < request.json    one JSON request on stdin, one JSON
    sandbox-kernel runner python < request.json    response (one line) on stdout
    sandbox-kernel runner datasets                 the registered datasets and their tables
    sandbox-kernel capsules list [--limit N] [--json]
    sandbox-kernel capsules show ID
    sandbox-kernel serve [--host H] [--port P] [--token T] [--workers N] [--queue N]
                         [--in-process] [--database URL]
                                                   the agent server (/chat and its page)

`runner sql|python` take the request's fields as a JSON object; query_type may be left out
(the command says it). Exit status: 0 when the run succeeded; 1 when the query failed (a
policy violation, an error in the code or the SQL, a timeout, a limit); 2 when the request
was invalid, Python execution is disabled, or the runner itself failed. The response is
printed in every case, so a caller needs only stdout.

Must not import: anything Jupyter. The commands import what they use when they run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sandbox_kernel.runner.errors import RunnerConfigError

if TYPE_CHECKING:
    from sandbox_kernel.runner.capsules import Capsules
    from sandbox_kernel.runner.models import RunnerResponse
    from sandbox_kernel.runner.settings import RunnerSettings

__all__ = ["add_subcommands"]

_USAGE_ERRORS: Final = frozenset(
    {"VALIDATION_ERROR", "PYTHON_EXECUTION_DISABLED", "RUNNER_INTERNAL_ERROR"}
)


def add_subcommands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `runner` and `capsules` to the `sandbox-kernel` parser's subcommands."""
    runner = sub.add_parser("runner", help="answer one data analysis request in the sandbox")
    commands = runner.add_subparsers(dest="runner_command", required=True)
    for kind, text in (("sql", "a read-only SQL query"), ("python", "Python over DataFrames")):
        command = commands.add_parser(kind, help=f"{text}: JSON request on stdin, response out")
        _common(command)
        command.set_defaults(func=_run, query_type=kind)
    datasets = commands.add_parser("datasets", help="the registered datasets and their tables")
    _common(datasets)
    datasets.set_defaults(func=_datasets)

    capsules = sub.add_parser("capsules", help="read the record of runner runs")
    actions = capsules.add_subparsers(dest="capsules_command", required=True)
    listing = actions.add_parser("list", help="the newest runs, newest first")
    listing.add_argument("--limit", type=int, default=20, help="how many (default 20)")
    listing.add_argument("--json", action="store_true", help="as JSON lines")
    listing.add_argument("--db", type=Path, default=None, help="the capsules' SQLite file")
    _database(listing)
    listing.set_defaults(func=_capsules_list)
    show = actions.add_parser("show", help="one run's capsule as JSON")
    show.add_argument("id", help="the run id (run_id of the response), or a unique prefix")
    show.add_argument("--db", type=Path, default=None, help="the capsules' SQLite file")
    _database(show)
    show.set_defaults(func=_capsules_show)

    serve = sub.add_parser("serve", help="the agent server: /chat over the runner, and a page")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="port (8765; 0 picks a free one)")
    serve.add_argument(
        "--token",
        default=None,
        help="the bearer token (else $SANDBOX_KERNEL_SERVE_TOKEN, else new)",
    )
    serve.add_argument(
        "--workers", type=int, default=None, help="runs at once (worker processes; one per core)"
    )
    serve.add_argument(
        "--in-process",
        action="store_true",
        help="run on threads of the server's process instead of worker processes",
    )
    serve.add_argument("--queue", type=int, default=16, help="chats that may wait (16)")
    serve.add_argument("--timeout", type=float, default=10.0, help="seconds per run (10)")
    serve.add_argument(
        "--send-timeout", type=float, default=30.0, help="seconds a client may stall reading (30)"
    )
    _common(serve)
    serve.set_defaults(func=_serve)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--datasets", type=Path, default=None, help="the dataset registry TOML")
    parser.add_argument("--capsules", type=Path, default=None, help="the capsules' SQLite file")
    _database(parser)


def _database(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database",
        default=None,
        metavar="URL",
        help="record capsules in this PostgreSQL database (postgresql://...)",
    )


def _settings(args: argparse.Namespace) -> RunnerSettings:
    from sandbox_kernel.runner.settings import RunnerSettings

    overrides = {
        "datasets": args.datasets,
        "capsules": getattr(args, "capsules", None),
        "database": getattr(args, "database", None),
    }
    return RunnerSettings.from_environment(**overrides)


def _run(args: argparse.Namespace) -> int:
    from sandbox_kernel.runner.api import run_request
    from sandbox_kernel.runner.models import ErrorCode, QueryType, RunnerResponse

    kind = QueryType(args.query_type)
    try:
        settings = _settings(args)
    except RunnerConfigError as exc:
        print(f"sandbox-kernel: {exc}", file=sys.stderr)
        response = RunnerResponse.failure(
            ErrorCode.RUNNER_INTERNAL_ERROR, str(exc), query_type=kind
        )
        return _print_response(response)
    request = sys.stdin.buffer.read()
    return _print_response(run_request(request, settings=settings, query_type=kind))


def _print_response(response: RunnerResponse) -> int:
    print(response.model_dump_json())
    if response.error is None:
        return 0
    return 2 if response.error.type in _USAGE_ERRORS else 1


def _datasets(args: argparse.Namespace) -> int:
    registry = _settings(args).registry()
    for dataset in registry:
        print(json.dumps(dataset.describe(), ensure_ascii=False))
    return 0


def _store(args: argparse.Namespace) -> Capsules:
    from sandbox_kernel.runner.settings import RunnerSettings

    overrides = {"capsules": args.db, "database": args.database}
    return RunnerSettings.from_environment(**overrides).capsule_store()


def _capsules_list(args: argparse.Namespace) -> int:
    summaries = _store(args).recent(args.limit)
    if args.json:
        for summary in summaries:
            print(summary.model_dump_json())
        return 0
    header = f"{'ID':<16}  {'CREATED (UTC)':<23}  {'TYPE':<6}  {'DATASET':<12}  {'STATUS':<7}"
    print(f"{header}  {'ERROR':<24}  {'MS':>8}")
    for s in summaries:
        line = f"{s.id:<16}  {s.created_at[:23]:<23}  {s.query_type or '-':<6}  "
        line += f"{(s.dataset_id or '-')[:12]:<12}  {s.status:<7}  {s.error_type or '-':<24}  "
        print(f"{line}{s.duration_ms:>8.0f}")
    return 0


def _capsules_show(args: argparse.Namespace) -> int:
    capsule = _store(args).get(args.id)
    print(capsule.model_dump_json(indent=2))
    return 0


def _serve(args: argparse.Namespace) -> int:
    import os
    import socket

    import uvicorn
    from pydantic import SecretStr, ValidationError

    from sandbox_kernel.llm.config import LLMSettings
    from sandbox_kernel.llm.errors import LLMConfigError
    from sandbox_kernel.runner.errors import RunnerConfigError
    from sandbox_kernel.runner.server import TOKEN_ENV, ServeSettings, create_app

    token = args.token or os.environ.get(TOKEN_ENV) or ServeSettings.new_token()
    try:
        serve = ServeSettings(
            host=args.host,
            port=args.port,
            token=SecretStr(token),
            **({"workers": args.workers} if args.workers is not None else {}),
            processes=not args.in_process,
            queue=args.queue,
            run_timeout_seconds=args.timeout,
            send_timeout_seconds=args.send_timeout,
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        print(f"sandbox-kernel serve: {problems}", file=sys.stderr)
        return 2
    try:
        runner = _settings(args)
        runner.capsule_store()  # a database URL whose driver is missing is said now
    except RunnerConfigError as exc:
        print(f"sandbox-kernel serve: {exc}", file=sys.stderr)
        return 2
    if runner.datasets.expanduser().exists():
        try:  # a broken registry is the operator's to fix now: one line, no traceback
            runner.registry()
        except RunnerConfigError as exc:
            print(f"sandbox-kernel serve: {runner.datasets}: {exc}", file=sys.stderr)
            return 2
    else:  # no registry yet: the server starts, and it and its page say how to register one
        print(f"sandbox-kernel serve: {runner.no_registry()}", file=sys.stderr)
    try:
        provider = LLMSettings.load().provider_object()
    except LLMConfigError as exc:
        print(f"sandbox-kernel serve: {exc}", file=sys.stderr)
        return 2
    family = socket.AF_INET6 if ":" in serve.host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((serve.host, serve.port))
    port = listener.getsockname()[1]
    shown = f"[{serve.host}]" if family == socket.AF_INET6 else serve.host
    model = getattr(provider, "name", None) or "none (SQL: and PYTHON: messages only)"
    python = "on" if runner.enable_python_execution else "off (ENABLE_PYTHON_EXECUTION)"
    print(f"sandbox-kernel serve: model {model}; Python execution {python}", file=sys.stderr)
    print(f"sandbox-kernel serve: open http://{shown}:{port}/?token={token}", flush=True)
    config = uvicorn.Config(
        create_app(serve, runner, provider), log_level="warning", timeout_graceful_shutdown=10
    )
    uvicorn.Server(config).run(sockets=[listener])
    return 0

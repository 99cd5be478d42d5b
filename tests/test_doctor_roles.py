"""`sandbox-kernel doctor` by role (sandbox_kernel/doctor.py): a Jupyter host checks the kernel
spec, a remote kernel host does not (the gateway's host holds it) but checks the launcher, a
gateway host checks no guest; `--gateway URL` asks a running gateway whether it lists the spec,
and says what to run when not. The gateway here is a real HTTP server answering
/api/kernelspecs as Enterprise Gateway does (tests/kernel/test_enterprise_gateway.py asks the
real one); the command runs as a user runs it, in a process of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import ClassVar

import pytest

from sandbox_kernel.doctor import ROLE_CHECKS
from tests.local_http import LocalHTTPServer

TOKEN = "doctor-token-0123"
SAFE_ARGV = ["/opt/kernels/venv/bin/python", "-P", "-m", "sandbox_kernel.kernel.remote"]


class _Gateway(BaseHTTPRequestHandler):
    """/api/kernelspecs as Enterprise Gateway answers it, with `specs` and a token."""

    specs: ClassVar[dict[str, object]] = {}
    seen_tokens: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Gateway.seen_tokens.append(self.headers.get("Authorization", ""))
        if self.path != "/api/kernelspecs":
            self.send_error(404)
            return
        if self.headers.get("Authorization") != f"token {TOKEN}":
            self.send_error(403, "Forbidden")
            return
        body = json.dumps({"default": "python3", "kernelspecs": self.specs}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def gateway() -> Iterator[str]:
    _Gateway.specs, _Gateway.seen_tokens = {}, []
    server = LocalHTTPServer(_Gateway)
    server.start()
    try:
        yield server.base
    finally:
        server.stop()


def _doctor(*args: str, token: str | None = TOKEN) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "JUPYTER_GATEWAY_AUTH_TOKEN"}
    if token is not None:
        env["JUPYTER_GATEWAY_AUTH_TOKEN"] = token
    command = [sys.executable, "-P", "-m", "sandbox_kernel.cli", "doctor", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def _spec(argv: list[str]) -> dict[str, object]:
    return {"name": "sandbox-python-distributed", "spec": {"argv": argv, "language": "python"}}


def test_each_role_has_its_own_checks() -> None:
    names = {role: {check.__name__ for check in checks} for role, checks in ROLE_CHECKS.items()}
    assert "_kernel_spec" in names["jupyter"] and "_launcher" not in names["jupyter"]
    assert "_kernel_spec" not in names["remote"] and "_launcher" in names["remote"]
    assert {"_python_guest", "_compiled", "_library"} <= names["remote"]
    assert names["gateway"] == {"_versions"}, "no guest and no kernel run on the gateway's host"


def test_a_remote_host_is_not_asked_for_a_kernel_spec() -> None:
    done = _doctor("--role", "remote", "--json")
    checks = {check["name"]: check for check in json.loads(done.stdout)}
    assert "kernel spec" not in checks, done.stdout
    assert checks["remote launcher"]["ok"], checks["remote launcher"]
    assert done.returncode == (0 if all(c["ok"] for c in checks.values()) else 1)


def test_the_gateway_is_asked_whether_it_sees_the_spec(gateway: str) -> None:
    missing = _doctor("--gateway", gateway)
    assert missing.returncode == 1, missing.stdout
    assert "does not see sandbox-python-distributed" in missing.stdout, missing.stdout
    assert "fix: sandbox-kernel install --enterprise-gateway distributed --gateway-python" in (
        missing.stdout
    )
    assert "Python guest" not in missing.stdout, "the gateway role checks no guest"
    assert _Gateway.seen_tokens[-1] == f"token {TOKEN}"

    _Gateway.specs["sandbox-python-distributed"] = _spec(SAFE_ARGV)
    seen = _doctor("--gateway", gateway)
    assert seen.returncode == 0, seen.stdout
    assert f"{gateway} lists sandbox-python-distributed" in seen.stdout

    _Gateway.specs["sandbox-python-distributed"] = _spec([a for a in SAFE_ARGV if a != "-P"])
    old = _doctor("--gateway", gateway)
    assert old.returncode == 1 and "does not start Python with -P" in old.stdout, old.stdout


def test_a_gateway_without_the_token_or_not_there_says_what_to_do(gateway: str) -> None:
    refused = _doctor("--gateway", gateway, token=None)
    assert refused.returncode == 1 and "answered 403" in refused.stdout, refused.stdout
    assert "fix: give the gateway's token: JUPYTER_GATEWAY_AUTH_TOKEN" in refused.stdout
    gone = _doctor("--gateway", "http://127.0.0.1:9", token=None)
    assert gone.returncode == 1 and "does not answer as a gateway" in gone.stdout, gone.stdout
    assert "fix: start Enterprise Gateway" in gone.stdout

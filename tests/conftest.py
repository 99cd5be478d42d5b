"""Shared fixtures: the real guest images, compiled once per test session.

The first test session on a machine compiles the Python guest (about a minute) into the
on-disk cache; every later one loads it in milliseconds. All tests share one Engine (the
process singleton), so nothing is compiled twice.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from sandbox_kernel import ExecutionPolicy, JavaScriptSandbox, PythonSandbox, SandboxLogger
from sandbox_kernel.host.artifacts import javascript_image, python_image
from sandbox_kernel.host.cache import CACHE_ENV
from sandbox_kernel.host.engine import get_engine
from tests.llm.servers import ModelServer
from tests.runner.serving import Serving

# Property-based tests: no per-example deadline (a busy machine is slow, not wrong), and in CI
# the same examples every run (a new example found locally is a new test, not a red landing).
settings.register_profile("sandbox-kernel", deadline=None, derandomize=bool(os.environ.get("CI")))
settings.load_profile("sandbox-kernel")


@pytest.fixture(scope="session", autouse=True)
def compiled_guests() -> None:
    """Load (or compile, once) both guests before any test times itself."""
    handle = get_engine()
    for image in (python_image(), javascript_image()):
        handle.module(image.binary, image.binary_sha256)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "workspace"
    folder.mkdir()
    return folder


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A SANDBOX_KERNEL_CACHE of the test's own, so warm images made in it are new: the compiled
    guest (hundreds of MB, a minute to compile) is hard-linked in from the shared cache."""
    compiled = get_engine().cached_path(python_image().binary_sha256)  # the shared cache's
    assert compiled.is_file(), "the session fixture compiles the guest first"
    cache = tmp_path / "cache"
    (cache / "modules").mkdir(parents=True, mode=0o700)
    target = cache / "modules" / compiled.name
    try:
        os.link(compiled, target)
    except OSError:  # another filesystem: copy
        shutil.copyfile(compiled, target)
    monkeypatch.setenv(CACHE_ENV, str(cache))
    return cache


@pytest.fixture
def logger() -> SandboxLogger:
    return SandboxLogger("sandbox_kernel.tests")


@pytest.fixture
def policy() -> ExecutionPolicy:
    """The library defaults with a short wall clock, so a runaway test ends quickly."""
    return ExecutionPolicy(timeout_seconds=10)


@pytest.fixture
def py(policy: ExecutionPolicy, workspace: Path, logger: SandboxLogger) -> Iterator[PythonSandbox]:
    yield PythonSandbox(policy, workspace, logger)


@pytest.fixture
def js(
    policy: ExecutionPolicy, workspace: Path, logger: SandboxLogger
) -> Iterator[JavaScriptSandbox]:
    yield JavaScriptSandbox(policy, workspace, logger)


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    """A real model server on 127.0.0.1 speaking OpenAI and Anthropic (tests/llm/servers.py)."""
    with ModelServer() as server:
        yield server


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    """A real TCP server on the host's loopback, accepting nothing yet: a guest's connection
    to it must never arrive."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.3)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    """`sandbox-kernel serve` processes for one test module (tests/runner/serving.py), all
    stopped at its end."""
    found = Serving(tmp_path_factory.mktemp("serve"))
    try:
        yield found
    finally:
        found.stop()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real REPL daemon for the module (tests/repl/daemon_fixtures.py), its socket path."""
    from tests.repl.daemon_fixtures import running_daemon

    with running_daemon(tmp_path_factory.mktemp("daemon")) as path:
        yield path

"""Shared fixtures for the REPL tests: real guests, real callbacks, no doubles.

`make_repl` builds a fresh, initialized ReplSandbox for a test that needs its own config or
breaks state on purpose (limits, rollbacks, interrupts); every session it made is destroyed
after the test. `module_repl` is one session per test module for tests that only add
variables of their own. Both use a fuel budget large enough for `import pandas` (about 4
billion instructions) unless a test asks for less.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from sandbox_kernel import CodeExecution, ExecutionPolicy, REPLConfig, ReplSandbox, create_repl

BIG_FUEL = 200_000_000_000  # ~20 s of a busy loop: no limit a test meets by accident


class MakeRepl(Protocol):
    def __call__(
        self, *, context: object = None, policy: dict[str, Any] | None = None, **config: Any
    ) -> ReplSandbox: ...


def repl_config(workspace: Path, policy: dict[str, Any] | None = None, **config: Any) -> REPLConfig:
    """A config whose workspace is `workspace`; `policy` fields override the test defaults."""
    fields: dict[str, Any] = {"mount_host_dir": workspace, "fuel_budget": BIG_FUEL}
    fields.update(policy or {})
    return REPLConfig(policy=ExecutionPolicy(**fields), **config)


def new_repl(config: REPLConfig, context: object = None) -> ReplSandbox:
    repl = create_repl(config)
    assert isinstance(repl, ReplSandbox), f"the wasm backend was expected, got {type(repl)}"
    repl.initialize(context)
    return repl


def run_ok(repl: ReplSandbox, code: str) -> CodeExecution:
    """Execute `code` and insist it succeeded, showing the guest's error otherwise."""
    result = repl.execute(code)
    assert result.ok, f"{code!r} failed: {result.status} {result.error}\n{result.stderr}"
    return result


RUNAWAY_SECONDS = 2.0  # the wall clock of a cell or host call that is meant to be stopped


@contextlib.contextmanager
def wall_clock(repl: ReplSandbox, seconds: float = RUNAWAY_SECONDS) -> Iterator[None]:
    """Run what is inside under a short wall clock (a runaway cell, a host call on an object
    that never returns); the session's own comes back after, so the cells that must finish
    keep the room a busy machine needs."""
    before = repl.config.policy.timeout_seconds
    repl.set_limits(timeout_seconds=seconds)
    try:
        yield
    finally:
        repl.set_limits(timeout_seconds=before)


def stopped(repl: ReplSandbox, code: str, seconds: float = RUNAWAY_SECONDS) -> CodeExecution:
    """`code`, meant to be stopped, run under a short wall clock."""
    with wall_clock(repl, seconds):
        return repl.execute(code)


@contextlib.contextmanager
def interrupting(repl: ReplSandbox, every_seconds: float = 0.5) -> Iterator[None]:
    """Cancel whatever `repl` runs, again and again, while the body runs: one cancel that came
    before the cell had started (a busy machine) would be lost, and the cell run to its limit."""
    done = threading.Event()

    def cancel_until_done() -> None:
        while not done.wait(every_seconds):
            repl.cancel()

    canceller = threading.Thread(target=cancel_until_done, daemon=True)
    canceller.start()
    try:
        yield
    finally:
        done.set()
        canceller.join()


def plain(result: CodeExecution) -> str:
    """The text/plain of the cell's last expression."""
    assert result.result is not None, f"no result: {result.status} {result.error}"
    text = result.result["text/plain"]
    assert isinstance(text, str)
    return text


@pytest.fixture
def make_repl(workspace: Path) -> Iterator[MakeRepl]:
    made: list[ReplSandbox] = []

    def make(
        *, context: object = None, policy: dict[str, Any] | None = None, **config: Any
    ) -> ReplSandbox:
        repl = new_repl(repl_config(workspace, policy, **config), context)
        made.append(repl)
        return repl

    yield make
    for repl in made:
        repl.destroy()


@pytest.fixture(scope="module")
def module_repl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplSandbox]:
    workspace = tmp_path_factory.mktemp("workspace")
    repl = new_repl(repl_config(workspace, {"timeout_seconds": 120}))
    yield repl
    repl.destroy()

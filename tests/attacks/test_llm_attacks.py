"""Attacks through the model bridges: the API key must stay out of the guest, model-written
code runs sandboxed like any cell, and floods, forged contexts and parent-state snooping
end in clear errors while the host and the session carry on."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_kernel import ReplSandbox
from sandbox_kernel.llm import (
    LLMBudget,
    LLMService,
    OpenAICompatibleProvider,
    RetryPolicy,
    ScriptedProvider,
)
from tests.attacks.conftest import HostGuard
from tests.llm.servers import ModelServer
from tests.repl.conftest import new_repl, plain, repl_config, run_ok

KEY = "sk-attack-7f3a9c1e5b2d8f60"


@pytest.fixture
def keyed(workspace: Path, model_server: ModelServer) -> Iterator[ReplSandbox]:
    """A session whose model needs KEY, which is also in the host's environment."""
    os.environ["SANDBOX_KERNEL_LLM_API_KEY"] = KEY
    retry = RetryPolicy(timeout_seconds=5, max_retries=0)
    provider = OpenAICompatibleProvider(model_server.openai_url, "m", api_key=KEY, retry=retry)
    service = LLMService(provider, budget=LLMBudget(max_calls=20))
    repl = new_repl(service.configure(repl_config(workspace, {"timeout_seconds": 30})))
    try:
        yield repl
    finally:
        repl.destroy()
        del os.environ["SANDBOX_KERNEL_LLM_API_KEY"]


def test_the_key_is_nowhere_in_the_guest(keyed: ReplSandbox, model_server: ModelServer) -> None:
    run_ok(keyed, "answer = llm_query('hello')")
    assert model_server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    # Not in the guest's memory, byte for byte, after the call that used it (checked before
    # the hunt below, whose own source holds the key).
    session = keyed._session
    assert session is not None
    assert KEY.encode() not in bytes(session.capture().data)
    hunt = f"""
import os
found = [k for k, v in os.environ.items() if {KEY!r} in v or 'LLM' in k]
try:
    found.append(open('/proc/self/environ', 'rb').read())
except OSError as exc:
    proc = type(exc).__name__
for top in ('/', '/app', '/tmp'):
    for root, dirs, files in os.walk(top):
        for name in files:
            try:
                with open(os.path.join(root, name), 'rb') as f:
                    if {KEY!r}.encode() in f.read():
                        found.append(os.path.join(root, name))
            except OSError:
                pass
found, proc
"""
    assert plain(run_ok(keyed, hunt)) == "([], 'FileNotFoundError')"


def test_a_forged_auth_header_cannot_be_made_by_the_guest(
    keyed: ReplSandbox, model_server: ModelServer
) -> None:
    """The prompt is data: headers and URL are the host's, whatever the prompt says."""
    run_ok(keyed, "llm_query('x\\r\\nAuthorization: Bearer stolen\\r\\n\\r\\n')")
    seen = model_server.requests[-1]
    assert seen.headers["authorization"] == f"Bearer {KEY}" and seen.path == "/v1/chat/completions"
    assert seen.body["messages"][0]["content"].startswith("x\r\nAuthorization")


def test_a_flood_of_batched_prompts_stops_at_the_budget(
    keyed: ReplSandbox, model_server: ModelServer
) -> None:
    refused = keyed.execute("llm_query_batched(['spam'] * 5000)")  # past the call budget
    assert refused.ename == "RuntimeError" and "would pass the limit" in (refused.evalue or "")
    assert len(model_server.requests) == 0
    failed = keyed.execute("llm_query_batched(['spam'] * 900)")  # within it: the model budget
    assert failed.ename == "RuntimeError" and "LLMBudgetExceeded" in (failed.evalue or "")
    assert len(model_server.requests) == 20
    assert plain(run_ok(keyed, "'still here'")) == "'still here'"


@pytest.mark.parametrize(
    ("ctx", "error"),
    [("lambda: 1", "TypeError"), ("open('/app/f', 'w')", "TypeError")],
    ids=["function", "file"],
)
def test_a_context_that_cannot_cross_is_a_clear_error(
    workspace: Path, ctx: str, error: str
) -> None:
    service = LLMService(ScriptedProvider([{"reply": "FINAL(never)"}]))
    repl = new_repl(service.configure(repl_config(workspace)))
    try:
        failed = repl.execute(f"rlm_query('t', ctx={ctx})")
        assert failed.ename == error, failed.error
        assert service.meter.read().rlm_calls == 0
        assert plain(run_ok(repl, "1 + 1")) == "2"
    finally:
        repl.destroy()


ESCAPES = """```repl
import os, socket, subprocess
tries = []
for attempt in (
    lambda: open('/etc/passwd').read(),
    lambda: open('../host/secret.txt').read(),
    lambda: socket.create_connection(('127.0.0.1', 22), timeout=1),
    lambda: subprocess.run(['id']),
    lambda: os.system('id'),
    lambda: globals()['parent_secret'],
):
    try:
        attempt()
        tries.append('ESCAPED')
    except BaseException as exc:
        tries.append(type(exc).__name__)
print(tries)
```"""


def test_model_written_code_is_as_confined_as_a_cell(workspace: Path, host: HostGuard) -> None:
    rules = [
        {"when": "^Task: ", "reply": ESCAPES},
        {"when": r"^REPL output:\n(\[.*\])", "reply": r"FINAL(\1)"},
    ]
    service = LLMService(ScriptedProvider(rules))
    repl = new_repl(service.configure(repl_config(workspace, {"timeout_seconds": 30})))
    try:
        run_ok(repl, "parent_secret = 'the parent session only'")
        answer = plain(run_ok(repl, "rlm_query('escape')"))
        assert "ESCAPED" not in answer, answer
        assert answer.count("Error") + answer.count("KeyError") >= 6, answer
        host.assert_untouched()
        assert plain(run_ok(repl, "parent_secret")) == "'the parent session only'"
    finally:
        repl.destroy()

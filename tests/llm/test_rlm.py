"""rlm_query end to end: a real parent session, a real child session, a scripted model.

The model's script is the product's own ScriptedProvider (rules on the last user message),
so these runs go through the same code a notebook user's runs do."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_kernel import ReplSandbox
from sandbox_kernel.llm import (
    LLMBudget,
    LLMService,
    RLMSettings,
    RLMStep,
    ScriptedProvider,
)
from sandbox_kernel.llm.rlm import describe_context, parse_reply
from sandbox_kernel.repl import sandbox as repl_sandbox
from tests.repl.conftest import new_repl, plain, repl_config, run_ok

NEEDLE = "4812"
SEARCH = {
    "when": "^Task: ",
    "reply": """I will search the context, then ask about each passage.
```repl
hits = search_context(r"vault code", window=300)
print(len(hits), "passages;", len(chunk_text(context, 1_000_000, 0)), "chunks of 1 MB")
answers = llm_query_batched([f"Extract the vault code from: {h['text']}" for h in hits])
codes = [a for a in answers if a != "NONE"]
answer = codes[0] if codes else "not found"
print(answer)
```""",
}
EXTRACT = [
    {"when": r"Extract the vault code from: .*the vault code is (\d+)\.", "reply": r"\1"},
    {"when": "^Extract the vault code", "reply": "NONE"},
]
FINISH = {"when": "^REPL output", "reply": "All done.\nFINAL_VAR(answer)"}


def five_megabytes() -> str:
    """5 MB of text: a score of decoys that mention the vault code, and one passage (in the
    middle) that gives it."""
    filler = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 30
    decoy = "Nobody remembers whether the vault code was changed last winter. "
    blocks = [filler + (decoy if i % 150 == 0 else "") for i in range(5_000_000 // len(filler) + 1)]
    blocks.insert(len(blocks) // 2, f"Note: the vault code is {NEEDLE}. ")
    return "".join(blocks)


@pytest.fixture
def steps() -> list[RLMStep]:
    return []


@pytest.fixture
def sessions(workspace: Path) -> Iterator[list[ReplSandbox]]:
    made: list[ReplSandbox] = []
    yield made
    for repl in made:
        repl.destroy()


def parent(
    workspace: Path,
    sessions: list[ReplSandbox],
    rules: list[dict[str, Any]],
    steps: list[RLMStep] | None = None,
    context: object = None,
    **settings: Any,
) -> tuple[ReplSandbox, ScriptedProvider, LLMService]:
    budget = settings.pop("budget", None)
    provider = ScriptedProvider(rules)
    service = LLMService(
        provider,
        budget=budget,
        rlm=RLMSettings(**settings),
        on_step=steps.append if steps is not None else None,
    )
    repl = new_repl(service.configure(repl_config(workspace, {"timeout_seconds": 60})), context)
    sessions.append(repl)
    return repl, provider, service


def live_sessions() -> int:
    return sum(1 for s in list(repl_sandbox._LIVE) if not s._destroyed)


def test_searches_five_megabytes_and_answers_with_final_var(
    workspace: Path, sessions: list[ReplSandbox], steps: list[RLMStep]
) -> None:
    context = five_megabytes()
    rules = [*EXTRACT, SEARCH, FINISH]
    repl, provider, _ = parent(workspace, sessions, rules, steps, context=context)
    before = live_sessions()
    result = run_ok(repl, "found = rlm_query('What is the vault code?')\nfound")
    assert plain(result) == repr(NEEDLE)
    assert live_sessions() == before  # the child session is gone
    # The model saw the task and the context's size, then the REPL's output.
    first = provider.conversations[0]
    assert "a str of 5,0" in first[0]["content"] and first[1]["content"].startswith("Task: ")
    final_turn = next(c for c in provider.conversations if c[-1]["content"].startswith("REPL"))
    assert f"passages; 6 chunks of 1 MB\n{NEEDLE}" in final_turn[-1]["content"]
    # The steps: the search with its code, then the FINAL_VAR.
    assert [s.iteration for s in steps] == [1, 2]
    assert "search_context" in steps[0].code and steps[0].code_status == ["ok"]
    assert steps[0].depth == 1 and steps[1].final and not steps[0].final
    assert steps[0].prompt_chars > 1000 and steps[1].prompt_chars > steps[0].prompt_chars
    # Usage: 2 root turns plus one llm_query per passage the child asked about.
    passages = sum(
        1 for c in provider.conversations if c[-1]["content"].startswith("Extract the vault")
    )
    assert passages >= 2  # the decoys and the needle
    assert result.llm is not None
    assert (result.llm.calls, result.llm.rlm_calls) == (2 + passages, 1)


def test_explicit_ctx_and_final_text(workspace: Path, sessions: list[ReplSandbox]) -> None:
    rules = [
        {"when": "^Task: ", "reply": "```repl\ntotal = sum(len(s) for s in context)\n```"},
        {"when": r"^REPL output:\n\(no output\)", "reply": "FINAL(the items are short)"},
    ]
    repl, provider, _ = parent(workspace, sessions, rules, context="the parent's context")
    assert plain(run_ok(repl, "rlm_query('Judge', ctx=['ab', 'cd'])")) == "'the items are short'"
    assert "a list of 2 items (4 characters" in provider.conversations[0][0]["content"]
    assert plain(run_ok(repl, "context")) == '"the parent\'s context"'


def test_code_errors_and_a_missing_final_var_are_fed_back(
    workspace: Path, sessions: list[ReplSandbox]
) -> None:
    rules = [
        {"when": "^Task: ", "reply": "```repl\n1 / 0\n```\nFINAL_VAR(nothing)"},
        {"when": "ZeroDivisionError.*no variable 'nothing'", "reply": "FINAL(recovered)"},
    ]
    repl, provider, _ = parent(workspace, sessions, rules)
    assert plain(run_ok(repl, "rlm_query('try')")) == "'recovered'"
    feedback = provider.conversations[1][-1]["content"]
    assert "ZeroDivisionError: division by zero" in feedback


def test_long_output_is_cut_for_the_model(workspace: Path, sessions: list[ReplSandbox]) -> None:
    rules = [
        {"when": "^Task: ", "reply": "```repl\nprint('x' * 50_000)\n```"},
        {"when": r"more characters not shown", "reply": "FINAL(cut)"},
    ]
    repl, provider, _ = parent(workspace, sessions, rules, max_output_chars=1000)
    assert plain(run_ok(repl, "rlm_query('print a lot')")) == "'cut'"
    assert len(provider.conversations[1][-1]["content"]) < 1200


def test_a_runaway_child_cell_is_stopped_and_the_loop_goes_on(
    workspace: Path, sessions: list[ReplSandbox]
) -> None:
    rules = [
        {"when": "^Task: ", "reply": "```repl\nwhile True:\n    pass\n```"},
        {"when": "timed out", "reply": "FINAL(the loop was stopped)"},
    ]
    provider = ScriptedProvider(rules)
    service = LLMService(provider)
    config = service.configure(repl_config(workspace, {"timeout_seconds": 2}))
    repl = new_repl(config)
    sessions.append(repl)
    # The child has the parent's limits (2 s per cell); the parent's cell would time out too,
    # so this drives the loop from the host, as the bridge does.
    assert config.on_rlm_query is not None
    assert config.on_rlm_query("spin", None) == "the loop was stopped"


def test_depth_limit(workspace: Path, sessions: list[ReplSandbox]) -> None:
    rules = [
        {
            "when": "^Task: outer",
            "reply": "```repl\ntry:\n    rlm_query('inner')\nexcept RuntimeError as e:\n"
            "    err = str(e)\n```\nFINAL_VAR(err)",
        },
    ]
    repl, provider, _ = parent(workspace, sessions, rules, max_depth=1)
    answer = plain(run_ok(repl, "rlm_query('outer')"))
    assert "cannot go deeper: this session is at depth 1 and max_depth is 1" in answer
    assert "rlm_query is not available at this depth" in provider.conversations[0][0]["content"]

    off, _, _ = parent(workspace, sessions, rules, max_depth=0)
    failed = off.execute("rlm_query('outer')")
    assert failed.ename == "RuntimeError" and "max_depth is 0" in (failed.evalue or "")


def test_two_levels_of_recursion(
    workspace: Path, sessions: list[ReplSandbox], steps: list[RLMStep]
) -> None:
    rules = [
        {"when": "^Task: inner", "reply": "FINAL(inner sees ' + context + ')"},
        {"when": "^Task: outer", "reply": "```repl\ninner = rlm_query('inner', ctx='abc')\n```"},
        {"when": "^REPL output", "reply": "FINAL_VAR(inner)"},
    ]
    repl, _, service = parent(workspace, sessions, rules, steps, max_depth=2)
    assert plain(run_ok(repl, "rlm_query('outer')")) == "\"inner sees ' + context + '\""
    assert sorted(s.depth for s in steps) == [1, 1, 2]
    assert service.meter.read().rlm_calls == 2


def test_iteration_limit_is_a_clear_error(workspace: Path, sessions: list[ReplSandbox]) -> None:
    rules = [{"reply": "```repl\nprint('still thinking')\n```"}]
    repl, _, _ = parent(workspace, sessions, rules, max_iterations=3)
    run_ok(repl, "kept = 'yes'")
    before = live_sessions()
    failed = repl.execute("rlm_query('never ends')")
    assert failed.ename == "RuntimeError"
    assert "RLMError: rlm_query gave no FINAL answer within 3 iterations" in (failed.evalue or "")
    assert live_sessions() == before
    assert plain(run_ok(repl, "kept")) == "'yes'"


def test_budget_ends_the_loop(workspace: Path, sessions: list[ReplSandbox]) -> None:
    rules = [{"reply": "```repl\nx = llm_query('more?')\n```"}]
    repl, _, service = parent(workspace, sessions, rules, budget=LLMBudget(max_calls=4))
    failed = repl.execute("rlm_query('spend it all')")
    assert "LLMBudgetExceeded" in (failed.evalue or "")
    assert service.meter.read().calls == 4
    assert plain(run_ok(repl, "1 + 1")) == "2"


def test_interrupting_the_parent_stops_the_child(
    workspace: Path, sessions: list[ReplSandbox]
) -> None:
    rules = [{"when": "^Task: ", "reply": "```repl\nwhile True:\n    pass\n```"}]
    repl, _, _ = parent(workspace, sessions, rules)
    run_ok(repl, "kept = 7")
    before = live_sessions()
    timer = threading.Timer(1.0, repl.cancel)
    timer.start()
    try:
        stopped = repl.execute("rlm_query('spin forever')")
    finally:
        timer.join()
    assert stopped.ename == "KeyboardInterrupt"
    deadline = time.monotonic() + 30  # the child's loop is cancelled, then destroyed
    while live_sessions() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_sessions() == before
    assert plain(run_ok(repl, "kept")) == "7"


@pytest.mark.parametrize(
    ("reply", "blocks", "final"),
    [
        ("```repl\nx = 1\n```\nFINAL_VAR(x)", ["x = 1"], ("FINAL_VAR", "x")),
        ("FINAL(forty\ntwo)", [], ("FINAL", "forty\ntwo")),
        ("```python\nprint('FINAL(no)')\n```", ["print('FINAL(no)')"], None),
        ("Thinking. FINAL(not at line start)", [], None),
        ("FINAL_VAR('quoted')", [], ("FINAL_VAR", "quoted")),
    ],
    ids=["code-then-var", "multiline", "final-in-code", "mid-line", "quoted-name"],
)
def test_parse_reply(reply: str, blocks: list[str], final: tuple[str, str] | None) -> None:
    assert parse_reply(reply) == (blocks, final)


def test_describe_context() -> None:
    assert describe_context(None).startswith("None")
    assert describe_context("abc") == "a str of 3 characters"
    assert describe_context(b"ab") == "bytes, 2 of them"
    assert describe_context({"a": 1}) == "a dict with 1 keys ('a')"

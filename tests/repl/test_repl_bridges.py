"""The guest's bridges to the host, through callbacks that really run: llm_query,
llm_query_batched, rlm_query, input, display, the streaming output callbacks, and the helpers
cells use on their context (chunk_text, search_context).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from sandbox_kernel import ExecutionStatus
from tests.repl.conftest import MakeRepl, plain, run_ok

# --- llm_query ----------------------------------------------------------------------------


def test_llm_query_asks_the_callback(make_repl: MakeRepl) -> None:
    prompts: list[str] = []

    def answer(prompt: str) -> str:
        prompts.append(prompt)
        return f"answer to {prompt}"

    repl = make_repl(on_llm_query=answer)
    result = run_ok(repl, "reply = llm_query('what is 2+2? ünïcode')\nreply")
    assert plain(result) == repr("answer to what is 2+2? ünïcode")
    assert prompts == ["what is 2+2? ünïcode"]


def test_llm_query_without_a_callback_is_a_clear_error(make_repl: MakeRepl) -> None:
    result = make_repl().execute("llm_query('hi')")
    assert result.ename == "RuntimeError"
    assert "llm_query is not configured" in (result.evalue or "")


def test_a_failing_callback_raises_inside_the_guest(make_repl: MakeRepl) -> None:
    def broken(prompt: str) -> str:
        raise ConnectionError("the model endpoint is down")

    repl = make_repl(on_llm_query=broken)
    code = "try:\n    llm_query('hi')\nexcept RuntimeError as exc:\n    caught = str(exc)\ncaught"
    text = plain(run_ok(repl, code))
    assert "the model endpoint is down" in text
    assert "ConnectionError" in text
    uncaught = repl.execute("llm_query('again')")
    assert uncaught.status is ExecutionStatus.ERROR
    assert uncaught.ename == "RuntimeError"
    assert "the model endpoint is down" in (uncaught.evalue or "")
    assert f"<cell-{uncaught.execution_count}>" in "\n".join(uncaught.traceback)


def test_a_non_str_answer_is_a_type_error_inside(make_repl: MakeRepl) -> None:
    repl = make_repl(on_llm_query=lambda prompt: 42)
    result = repl.execute("llm_query('hi')")
    assert result.ename == "TypeError"
    assert "int" in (result.evalue or "")
    run_ok(repl, "after = 1")


def test_llm_query_takes_only_str(make_repl: MakeRepl) -> None:
    repl = make_repl(on_llm_query=lambda prompt: "x")
    assert repl.execute("llm_query(b'bytes')").ename == "TypeError"
    assert repl.execute("llm_query_batched('not a list')").ename == "TypeError"


# --- llm_query_batched --------------------------------------------------------------------


def test_llm_query_batched_answers_in_order_and_concurrently(make_repl: MakeRepl) -> None:
    seen_threads: set[int] = set()

    def slow(prompt: str) -> str:
        seen_threads.add(threading.get_ident())
        time.sleep(0.2)
        return prompt.upper()

    repl = make_repl(on_llm_query=slow)
    prompts = [f"prompt {i}" for i in range(8)]
    started = time.monotonic()
    run_ok(repl, f"answers = llm_query_batched({prompts!r})")
    elapsed = time.monotonic() - started
    assert repl.get_variable("answers") == [p.upper() for p in prompts]
    assert elapsed < 1.2, f"8 prompts of 0.2 s took {elapsed:.2f} s: not run concurrently"
    assert len(seen_threads) > 1


def test_llm_query_batched_of_nothing_is_empty(make_repl: MakeRepl) -> None:
    calls: list[str] = []
    repl = make_repl(on_llm_query=lambda prompt: calls.append(prompt) or "x")
    assert plain(run_ok(repl, "llm_query_batched([])")) == "[]"
    assert calls == []


def test_llm_query_batched_with_one_failure_raises(make_repl: MakeRepl) -> None:
    def picky(prompt: str) -> str:
        if prompt == "bad":
            raise ValueError("cannot answer bad")
        return "fine"

    repl = make_repl(on_llm_query=picky)
    result = repl.execute("llm_query_batched(['good', 'bad', 'good'])")
    assert result.ename == "RuntimeError"
    assert "cannot answer bad" in (result.evalue or "")


# --- rlm_query ----------------------------------------------------------------------------


def test_rlm_query_without_ctx_passes_the_current_context(make_repl: MakeRepl) -> None:
    calls: list[tuple[str, Any]] = []

    def rlm(task: str, ctx: Any) -> str:
        calls.append((task, ctx))
        return f"done: {task}"

    repl = make_repl(context={"pages": ["a", "b"]}, on_rlm_query=rlm)
    assert plain(run_ok(repl, "rlm_query('summarize')")) == repr("done: summarize")
    assert plain(run_ok(repl, "rlm_query('sub', ctx=['only', 'this'])")) == repr("done: sub")
    assert plain(run_ok(repl, "rlm_query('none', None)")) == repr("done: none")
    repl.initialize(context="new text")
    run_ok(repl, "rlm_query('again')")
    assert calls == [
        ("summarize", {"pages": ["a", "b"]}),
        ("sub", ["only", "this"]),
        ("none", None),
        ("again", "new text"),
    ]


def test_rlm_query_with_a_ctx_that_is_not_json_is_a_type_error(make_repl: MakeRepl) -> None:
    repl = make_repl(on_rlm_query=lambda task, ctx: "x")
    result = repl.execute("rlm_query('t', ctx=object())")
    assert result.ename == "TypeError"
    assert "cannot send" in (result.evalue or "")


# --- input --------------------------------------------------------------------------------


def test_input_asks_on_input(make_repl: MakeRepl) -> None:
    asked: list[tuple[str, bool]] = []

    def reply(prompt: str, password: bool) -> str:
        asked.append((prompt, password))
        return "secret" if password else "Ada"

    repl = make_repl(on_input=reply)
    code = "import getpass\nname = input('name? ')\npw = getpass.getpass()\nname, pw"
    assert plain(run_ok(repl, code)) == "('Ada', 'secret')"
    assert asked == [("name? ", False), ("Password: ", True)]


def test_input_without_on_input_is_eof(make_repl: MakeRepl) -> None:
    repl = make_repl()
    result = repl.execute("input('anyone? ')")
    assert result.ename == "EOFError"
    code = "try:\n    input()\nexcept EOFError:\n    got = 'eof'\ngot"
    assert plain(run_ok(repl, code)) == "'eof'"


# --- display and streaming ----------------------------------------------------------------


def test_display_reaches_on_display_live(make_repl: MakeRepl) -> None:
    shown: list[tuple[float, dict[str, Any], dict[str, Any]]] = []
    repl = make_repl(on_display=lambda data, meta: shown.append((time.monotonic(), data, meta)))
    code = (
        "import time\n"
        "display({'a': 1})\n"
        "display({'text/markdown': '**m**'}, raw=True, metadata={'tag': 1})\n"
        "time.sleep(0.5)"
    )
    result = run_ok(repl, code)
    returned = time.monotonic()
    assert [(data, meta) for _, data, meta in shown] == [
        ({"text/plain": "{'a': 1}"}, {}),
        ({"text/markdown": "**m**"}, {"tag": 1}),
    ]
    assert returned - shown[0][0] > 0.3, "the display arrived only when the cell ended"
    assert result.displays == [
        {"data": {"text/plain": "{'a': 1}"}, "metadata": {}},
        {"data": {"text/markdown": "**m**"}, "metadata": {"tag": 1}},
    ]


def test_displays_belong_to_their_cell(make_repl: MakeRepl) -> None:
    repl = make_repl()
    assert len(run_ok(repl, "display(1); display(2)").displays) == 2
    assert run_ok(repl, "3").displays == []


def test_on_display_that_raises_is_an_error_inside(make_repl: MakeRepl) -> None:
    def broken(data: dict[str, Any], meta: dict[str, Any]) -> None:
        raise OSError("frontend gone")

    repl = make_repl(on_display=broken)
    result = repl.execute("display('x')")
    assert result.ename == "RuntimeError"
    assert "frontend gone" in (result.evalue or "")
    run_ok(repl, "fine = 1")


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_output_lines_stream_while_the_cell_runs(make_repl: MakeRepl, stream: str) -> None:
    lines: list[tuple[float, str]] = []
    callback = {f"on_{stream}": lambda line: lines.append((time.monotonic(), line))}
    repl = make_repl(**callback)
    code = (
        f"import sys, time\n"
        f"print('first', file=sys.{stream})\n"
        f"print('second\\nthird', file=sys.{stream})\n"
        f"time.sleep(1)\n"
        f"print('last', end='', file=sys.{stream})"
    )
    result = run_ok(repl, code)
    returned = time.monotonic()
    assert [line for _, line in lines] == ["first\n", "second\n", "third\n", "last"]
    assert returned - lines[0][0] > 0.7, "the first line arrived only when the cell ended"
    assert getattr(result, stream) == "first\nsecond\nthird\nlast"


# --- helpers on the context ---------------------------------------------------------------


def test_chunk_text_cuts_overlapping_windows(make_repl: MakeRepl) -> None:
    repl = make_repl(context="abcdefghij")
    assert plain(run_ok(repl, "chunk_text(context, 4, 1)")) == "['abcd', 'defg', 'ghij']"
    assert plain(run_ok(repl, "chunk_text(context, 5, 0)")) == "['abcde', 'fghij']"
    assert plain(run_ok(repl, "chunk_text('', 5, 0)")) == "[]"
    assert plain(run_ok(repl, "len(chunk_text('x' * 10_000))")) == "3"
    assert repl.execute("chunk_text(context, 4, 4)").ename == "ValueError"


def test_search_context_finds_matches_with_a_window(make_repl: MakeRepl) -> None:
    repl = make_repl(context="alpha NEEDLE beta\nneedle gamma")
    found = repl.get_variable("context")
    assert found == "alpha NEEDLE beta\nneedle gamma"
    run_ok(repl, "hits = search_context('needle', 3)")
    assert repl.get_variable("hits") == [
        {"start": 6, "end": 12, "match": "NEEDLE", "text": "ha NEEDLE be"},
        {"start": 18, "end": 24, "match": "needle", "text": "ta\nneedle ga"},
    ]
    run_ok(repl, "strict = search_context('needle', 0, ignore_case=False)")
    assert repl.get_variable("strict") == [
        {"start": 18, "end": 24, "match": "needle", "text": "needle"}
    ]
    assert repl.execute("search_context('(', 3)").ename == "ValueError"


def test_search_context_over_a_list_names_the_element(make_repl: MakeRepl) -> None:
    repl = make_repl(context=["no match", "has the key", "key again"])
    run_ok(repl, "hits = [(h['index'], h['match']) for h in search_context('key', 0)]")
    assert repl.get_variable("hits") == [[1, "key"], [2, "key"]]


def test_search_context_without_context_says_so(make_repl: MakeRepl) -> None:
    result = make_repl().execute("search_context('x')")
    assert result.ename == "ValueError"
    assert "no context" in (result.evalue or "")

"""The guest's cell driver, run under host CPython against a fake door (no WebAssembly).

The driver module is loaded from its file as the host would load it; `session` installs it
into a fresh fake __main__ and uninstalls it afterwards, restoring builtins and time.sleep.
Answers are built with the host's own protocol helpers, so both sides agree on the frames.
"""

from __future__ import annotations

import ast
import base64
import builtins
import importlib.util
import json
import os
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_kernel.repl.protocol import (
    binary_answer,
    cell_hash,
    error_answer,
    ok_answer,
    run_cell_turn,
)

DRIVER_PATH = Path(__file__).parents[2] / "sandbox_kernel" / "guest" / "driver.py"


@pytest.fixture(scope="module")
def mod() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("sandbox_kernel_driver", DRIVER_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class FakeDoor:
    """A host double: records every request and answers it by op."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answers: dict[str, Callable[[dict[str, Any]], bytes]] = {}
        self.context: object = None

    def __call__(self, frame: bytes) -> bytes:
        request = json.loads(frame.decode("utf-8"))
        self.requests.append(request)
        op = request["op"]
        if op in self.answers:
            return self.answers[op](request)
        if op == "context":
            return binary_answer(self.context)
        return ok_answer(True)

    def sent(self, op: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["op"] == op]


class Session:
    def __init__(self, mod: types.ModuleType) -> None:
        self.door = FakeDoor()
        self.main = types.ModuleType("__main__")
        self.driver = mod.install(self.door, main_module=self.main)
        self.cells = 0

    def run(self, source: str) -> dict[str, Any]:
        self.cells += 1
        self.driver.run_cell(self.cells, source)
        done = self.door.sent("done")[-1]
        assert done["cell"] == self.cells
        return done["reply"]


@pytest.fixture
def session(mod: types.ModuleType) -> Iterator[Session]:
    real = (time.sleep, builtins.input, os.environ.get("MPLBACKEND"))
    made = Session(mod)
    yield made
    made.driver.uninstall()
    assert (time.sleep, builtins.input, os.environ.get("MPLBACKEND")) == real
    assert not hasattr(builtins, "display") and not hasattr(builtins, "__sandbox_kernel_flag__")


def answer_error(kind: str, message: str = "no") -> Callable[[dict[str, Any]], bytes]:
    return lambda request: error_answer(kind, message)


def test_hello_sends_the_flag_pattern(session: Session) -> None:
    (hello,) = session.door.sent("hello")
    flag = session.driver.flag
    assert len(flag) == 17 and flag[0] == 0
    assert len(hello["flag_magic"]) == 32 and hello["flag_magic"] == bytes(flag[1:]).hex()
    assert session.main.__sandbox_kernel__ is session.driver
    assert session.door.requests[0]["op"] == "hello"


def test_installing_again_replaces_the_first_driver(
    mod: types.ModuleType, session: Session
) -> None:
    second = mod.install(session.door, main_module=session.main)
    assert builtins.display == second.display and session.driver._undo == []  # type: ignore[attr-defined]
    second.uninstall()
    assert not hasattr(builtins, "display") and time.sleep.__module__ == "time"


def test_turns_run_as_one_expression_and_statements_go_to_the_reactor(
    mod: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The image's reactor parses and compiles each turn three times; the driver gives it a
    runner that compiles the host's one-call turns once, evaluates them in the session's
    __main__, shows their value as the reactor does, hands it anything else, and is removed
    with the driver."""
    ran: list[tuple[str, str]] = []
    reactor = types.ModuleType("_reactor")
    reactor._run_turn = lambda text, name: ran.append((text, name))  # type: ignore[attr-defined]
    original = reactor._run_turn  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "_reactor", reactor)
    made = Session(mod)
    try:
        runner = reactor._run_turn  # type: ignore[attr-defined]
        assert runner is not original
        shown: list[object] = []
        monkeypatch.setattr(sys, "displayhook", shown.append)
        made.main.turn_value = 41  # type: ignore[attr-defined]
        runner("turn_value + 1", "<turn 7>")
        runner("x = 1", "<turn 8>")
        assert shown == [42] and ran == [("x = 1", "<turn 8>")]
    finally:
        made.driver.uninstall()
    assert reactor._run_turn is original  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "source",
    ["x = 1", "", "s = '\\')'\nprint(s)", "π = 'ü', '\ud800', '\x00', \"'''\"", "#" * 5000],
    ids=["trivial", "empty", "quotes", "unicode-surrogate-nul", "long"],
)
def test_a_cells_turn_is_taken_apart_as_evaluating_it_would(
    mod: types.ModuleType, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    """The host's turn for a cell reaches the driver's run_cell with the number and the source
    that evaluating it gives, without a compile; a malformed one is evaluated, and raises."""
    reactor = types.ModuleType("_reactor")
    reactor._run_turn = lambda text, name: None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "_reactor", reactor)
    made = Session(mod)
    try:
        runner = reactor._run_turn  # type: ignore[attr-defined]
        text = run_cell_turn(12, source)
        evaluated: list[tuple[object, ...]] = []
        called: list[tuple[object, ...]] = []
        recorder = types.SimpleNamespace(run_cell=lambda *args: evaluated.append(args))
        eval(text, {"__sandbox_kernel__": recorder})
        made.main.__sandbox_kernel__ = types.SimpleNamespace(  # type: ignore[attr-defined]
            run_cell=lambda *args: called.append(args)
        )
        with monkeypatch.context() as patched:
            patched.setattr(builtins, "compile", None)  # any compile fails (TypeError)
            runner(text, "<turn 3>")
        hashed = cell_hash(source.encode("utf-8", "surrogatepass"))
        assert called == evaluated == [(12, source, hashed)]
        malformed = text.replace("bytes.fromhex('", "bytes.fromhex('zz")
        with pytest.raises(ValueError, match="non-hexadecimal"):
            runner(malformed, "<turn 4>")
        assert called == [(12, source, hashed)]
    finally:
        made.driver.uninstall()


def test_every_loop_gets_a_check_first(mod: types.ModuleType) -> None:
    source = "async def f(y):\n    async for x in y:\n        while x:\n            x -= 1\n"
    tree = sys.modules["sandbox_kernel_cells"].LoopChecks().visit(ast.parse(source))
    loops = [node for node in ast.walk(tree) if isinstance(node, ast.AsyncFor | ast.While)]
    assert len(loops) == 2
    for loop in loops:
        check = loop.body[0]
        assert ast.unparse(check) == (
            "if __sandbox_kernel_flag__[0]:\n    __sandbox_kernel__.interrupted()"
        )
        assert check.lineno == loop.body[1].lineno
    compile(tree, "<cell-1>", "exec")


def test_loops_anywhere_a_statement_can_be_get_a_check(mod: types.ModuleType) -> None:
    """The checks' walk goes through statements only: loops in handlers, match cases, class
    and with bodies and else clauses get one; a comprehension (an expression) gets none."""
    source = (
        "class C:\n"
        "    def f(self, y):\n"
        "        with y:\n"
        "            try:\n"
        "                pass\n"
        "            except E:\n"
        "                for a in y: pass\n"
        "            else:\n"
        "                while y: y -= 1\n"
        "            finally:\n"
        "                for b in y: pass\n"
        "        match y:\n"
        "            case 1:\n"
        "                for c in y: pass\n"
        "        if y:\n"
        "            pass\n"
        "        else:\n"
        "            for d in y:\n"
        "                pass\n"
        "            else:\n"
        "                while y: break\n"
        "        return [z for z in y]\n"
    )
    tree = sys.modules["sandbox_kernel_cells"].LoopChecks().visit(ast.parse(source))
    loops = [node for node in ast.walk(tree) if isinstance(node, ast.For | ast.While)]
    assert len(loops) == 6
    assert all(
        ast.unparse(loop.body[0]).startswith("if __sandbox_kernel_flag__[0]") for loop in loops
    )
    assert "__sandbox_kernel_flag__" not in ast.unparse(tree).split("return")[1]
    compile(tree, "<cell-1>", "exec")


def test_state_persists_across_cells(session: Session) -> None:
    assert session.run("x = 41")["status"] == "ok"
    reply = session.run("x + 1")
    assert reply["result"] == {"text/plain": "42"} and reply["error"] is None
    assert session.main._ == 42


@pytest.mark.parametrize(
    ("source", "shown"),
    [
        ("1 + 1", "2"),
        ("1 + 1;", None),
        ("1 + 1;  # quiet", None),
        ("1 + 1  # comment;", "2"),
        ("'a;'", "'a;'"),
        ("x = 3", None),
        ("None", None),
        ("if True:\n    5", None),
        ("1;\n\n# trailing\n", None),
        ("[1,\n 2]\n", "[1, 2]"),
    ],
    ids=["expr", "semicolon", "semicolon-comment", "comment-semicolon", "str-semicolon",
         "assignment", "none", "inside-if", "semicolon-blank-lines", "multiline"],
)  # fmt: skip
def test_last_expression_display(session: Session, source: str, shown: str | None) -> None:
    reply = session.run(source)
    assert reply["status"] == "ok"
    assert reply["result"] == (None if shown is None else {"text/plain": shown})


RICH = """
class Html:
    def _repr_html_(self):
        return "<b>hi</b>"
class Bundle:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": "bundle", "text/markdown": "*b*"}, {"text/markdown": {"m": 1}}
    def _repr_markdown_(self):
        return "loses to the bundle"
    def _repr_html_(self):
        return "<i>b</i>"
class Png:
    def _repr_png_(self):
        return b"\\x89PNG"
class Broken:
    def _repr_html_(self):
        raise ValueError("boom")
    def __repr__(self):
        raise RuntimeError("no repr")
class Sneaky:
    def __getattr__(self, name):
        raise AssertionError(name)
"""


@pytest.mark.parametrize(
    ("expr", "data", "metadata"),
    [
        ("Html()", {"text/html": "<b>hi</b>"}, {}),
        (
            "Bundle()",
            {"text/plain": "bundle", "text/markdown": "*b*", "text/html": "<i>b</i>"},
            {"text/markdown": {"m": 1}},
        ),
        ("Png()", {"image/png": base64.b64encode(b"\x89PNG").decode()}, {}),
        ("Broken()", {"text/plain": "<Broken object (repr failed: RuntimeError: no repr)>"}, {}),
        ("Sneaky()", {}, {}),
    ],
    ids=["html", "mimebundle-wins", "png-bytes", "raising-reprs", "no-getattr"],
)
def test_rich_reprs(
    session: Session, expr: str, data: dict[str, str], metadata: dict[str, Any]
) -> None:
    session.run(RICH)
    reply = session.run(expr)
    assert reply["status"] == "ok"
    assert {k: v for k, v in reply["result"].items() if k in data} == data
    assert "text/plain" in reply["result"] and reply["result_metadata"] == metadata


def test_instance_attributes_are_not_rich_reprs(mod: types.ModuleType) -> None:
    obj = types.SimpleNamespace(_repr_html_=lambda: "<b>no</b>")
    assert "text/html" not in mod.format_bundle(obj)[0]


def test_traceback_points_at_the_cell_and_hides_the_driver(session: Session) -> None:
    session.run("def f():\n    return 1 / 0")
    reply = session.run("y = 1\nf()")
    assert reply["status"] == "error"
    error = reply["error"]
    assert (error["ename"], error["evalue"]) == ("ZeroDivisionError", "division by zero")
    text = "\n".join(error["traceback"])
    assert error["traceback"][0] == "Traceback (most recent call last):"
    assert 'File "<cell-2>", line 2' in text and 'File "<cell-1>", line 2, in f' in text
    assert "return 1 / 0" in text and str(DRIVER_PATH) not in text and "driver" not in text
    assert error["traceback"][-1] == "ZeroDivisionError: division by zero"


@pytest.mark.parametrize(
    ("source", "message"),
    [("x = (", "was never closed"), ("return 5", "'return' outside function")],
    ids=["parse", "compile"],
)
def test_syntax_error_reply(session: Session, source: str, message: str) -> None:
    error = session.run(source)["error"]
    assert error["ename"] == "SyntaxError" and message in error["evalue"]
    lines = error["traceback"]
    assert lines[0].strip().startswith('File "<cell-1>", line 1')
    assert lines[1].strip() == source and lines[2].strip().startswith("^")
    assert lines[-1].startswith("SyntaxError:") and not any("Traceback" in x for x in lines)


def test_system_exit_is_an_error(session: Session) -> None:
    reply = session.run("import sys\nsys.exit(3)")
    assert reply["status"] == "error"
    assert (reply["error"]["ename"], reply["error"]["evalue"]) == ("SystemExit", "3")


INTERRUPTED_LOOPS = {
    "while": ("", "before = 1\nwhile True:\n    pass"),
    "for": ("import itertools", "before = 1\nfor i in itertools.count():\n    i += 1"),
    "function": ("def spin():\n    while True:\n        x = 1", "before = 1\nspin()"),
    "method": ("class C:\n    def go(self):\n        for _ in iter(int, 1): pass",
               "before = 1\nC().go()"),
}  # fmt: skip


@pytest.mark.timeout(20)
@pytest.mark.parametrize("case", INTERRUPTED_LOOPS.values(), ids=INTERRUPTED_LOOPS.keys())
def test_soft_interrupt_stops_loops(session: Session, case: tuple[str, str]) -> None:
    setup, cell = case
    assert session.run(setup)["status"] == "ok"
    timer = threading.Timer(0.1, lambda: session.driver.flag.__setitem__(0, 1))
    timer.start()
    reply = session.run(cell)
    timer.join()
    assert reply["status"] == "cancelled" and reply["error"]["ename"] == "KeyboardInterrupt"
    assert session.main.before == 1 and session.driver.flag[0] == 0
    assert not any("interrupted" in line for line in reply["error"]["traceback"])


def test_a_stale_flag_is_cleared_when_a_cell_starts(session: Session) -> None:
    session.driver.flag[0] = 1
    assert session.run("for i in range(3):\n    pass\ni")["result"] == {"text/plain": "2"}


def test_sleep_goes_through_the_door(session: Session) -> None:
    started = time.monotonic()
    assert session.run("import time\ntime.sleep(30)")["status"] == "ok"
    assert time.monotonic() - started < 5
    assert session.door.sent("sleep") == [{"op": "sleep", "seconds": 30.0}]
    session.door.answers["sleep"] = answer_error("KeyboardInterrupt", "cancelled")
    reply = session.run("x = 1\ntime.sleep(1)\nx = 2")
    assert reply["status"] == "cancelled" and session.main.x == 1


@pytest.mark.parametrize(
    ("seconds", "error"),
    [(-1, ValueError), ("1", TypeError), (float("nan"), ValueError), (1e300, OverflowError)],
    ids=["negative", "str", "nan", "huge"],
)
def test_sleep_checks_its_argument(session: Session, seconds: Any, error: type) -> None:
    with pytest.raises(error):
        time.sleep(seconds)
    time.sleep(0)
    assert session.door.sent("sleep") == []


def test_input_and_getpass_go_through_the_door(session: Session) -> None:
    session.door.answers["input"] = lambda request: ok_answer("Ada")
    reply = session.run("import getpass\nname = input('who? ')\nsecret = getpass.getpass()")
    assert reply["status"] == "ok" and session.main.name == session.main.secret == "Ada"
    asked = [(r["prompt"], r["password"]) for r in session.door.sent("input")]
    assert asked == [("who? ", False), ("Password: ", True)]
    session.door.answers["input"] = answer_error("EOFError", "no stdin")
    error = session.run("input()")["error"]
    assert (error["ename"], error["evalue"]) == ("EOFError", "no stdin")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("llm_query(5)", "prompt must be a str, not int"),
        ("llm_query_batched('abc')", "takes a list of str, not str"),
        ("llm_query_batched(['a', 1])", "prompts[1] must be a str"),
        ("rlm_query(None)", "task must be a str"),
        ("rlm_query('t', b'x')", "decode it first"),
        ("rlm_query('t', {'a': object()})", "object of type object"),
    ],
    ids=["prompt", "batch-not-list", "batch-item", "task", "ctx-bytes", "ctx-object"],
)
def test_bridge_argument_checks(session: Session, call: str, message: str) -> None:
    error = session.run(call)["error"]
    assert error["ename"] == "TypeError" and message in error["evalue"]
    assert not any(op in r["op"] for r in session.door.requests for op in ("llm", "rlm"))


def test_errors_in_door_helpers_show_only_the_cells_frames(session: Session) -> None:
    error = session.run("x = 1\nrlm_query('t', b'x')")["error"]
    frames = [line for line in error["traceback"] if line.lstrip().startswith("File")]
    assert frames == ['  File "<cell-1>", line 2, in <module>']


def test_bridge_requests(session: Session) -> None:
    session.door.answers["llm_query_batched"] = lambda r: ok_answer([p * 2 for p in r["prompts"]])
    session.run("a = llm_query('q')\nb = llm_query_batched(['x', 'y'])\nc = llm_query_batched([])")
    session.run("d = rlm_query('t')\ne = rlm_query('t', {'k': [1]})")
    assert (session.main.a, session.main.b, session.main.c) == (True, ["xx", "yy"], [])
    assert session.door.sent("llm_query") == [{"op": "llm_query", "prompt": "q"}]
    sent = [(r["has_ctx"], r["ctx"]) for r in session.door.sent("rlm_query")]
    assert sent == [(False, None), (True, {"k": [1]})]


@pytest.mark.parametrize(
    ("kind", "raised"),
    [("ValueError", ValueError), ("TimeoutError", TimeoutError), ("SomethingWeird", RuntimeError)],
    ids=["value", "timeout", "unknown"],
)
def test_door_errors_are_raised(session: Session, kind: str, raised: type) -> None:
    session.door.answers["llm_query"] = answer_error(kind, "said no")
    with pytest.raises(raised, match="said no"):
        builtins.llm_query("q")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("failure", "message"),
    [(OSError("trap"), "failed to answer llm_query"), (ConnectionRefusedError(), "no sandbox")],
    ids=["host-fault", "no-host"],
)
def test_a_failing_door_is_a_runtime_error(
    session: Session, failure: OSError, message: str
) -> None:
    def broken(request: dict[str, Any]) -> bytes:
        raise failure

    session.door.answers["llm_query"] = broken
    with pytest.raises(RuntimeError, match=message) as caught:
        builtins.llm_query("q")  # type: ignore[attr-defined]
    assert caught.value.__cause__ is failure


def test_bridges_are_interrupt_points(session: Session) -> None:
    session.driver.flag[0] = 1
    with pytest.raises(KeyboardInterrupt):
        builtins.llm_query("q")  # type: ignore[attr-defined]
    assert session.driver.flag[0] == 0 and session.door.sent("llm_query") == []


@pytest.mark.parametrize(
    ("text", "size", "overlap", "chunks"),
    [
        ("", 4, 1, []),
        ("abc", 4, 1, ["abc"]),
        ("abcd", 4, 1, ["abcd"]),
        ("abcdefghij", 4, 1, ["abcd", "defg", "ghij"]),
        ("abcdefghijk", 4, 1, ["abcd", "defg", "ghij", "jk"]),
        ("abcdef", 2, 0, ["ab", "cd", "ef"]),
    ],
    ids=["empty", "short", "exact", "overlap-exact-end", "overlap-short-tail", "no-overlap"],
)
def test_chunk_text(
    mod: types.ModuleType, text: str, size: int, overlap: int, chunks: list[str]
) -> None:
    assert mod.chunk_text(text, size, overlap) == chunks


@pytest.mark.parametrize(
    ("args", "error"),
    [(("x", 0, 0), ValueError), (("x", 4, 4), ValueError), (("x", 4, -1), ValueError),
     ((b"x",), TypeError), (("x", 2.5), TypeError)],
    ids=["zero-size", "overlap-equals-size", "negative-overlap", "bytes", "float-size"],
)  # fmt: skip
def test_chunk_text_validation(mod: types.ModuleType, args: tuple[Any, ...], error: type) -> None:
    with pytest.raises(error):
        mod.chunk_text(*args)


def test_search_context(session: Session) -> None:
    search = session.driver.search_context
    session.main.context = "Alpha beta ALPHA gamma alpha"
    hits = search("alpha", window=3)
    assert [(h["start"], h["match"]) for h in hits] == [(0, "Alpha"), (11, "ALPHA"), (23, "alpha")]
    assert hits[0]["text"] == "Alpha be" and hits[2]["text"] == "ma alpha"
    assert [h["start"] for h in search("alpha", ignore_case=False)] == [23]
    assert len(search("a", max_matches=2)) == 2
    listed = search("b", text=["ab", "cd", "b"], window=0)
    assert [(h["index"], h["start"], h["text"]) for h in listed] == [(0, 1, "b"), (2, 0, "b")]
    assert search("k1", text={"k1": 1})[0]["match"] == "k1"
    with pytest.raises(ValueError, match="bad regular expression"):
        search("(")
    session.main.context = None
    with pytest.raises(ValueError, match="no context"):
        search("a")


@pytest.mark.parametrize(
    ("value", "kind"),
    [(None, "none"), ("text é", "str"), (b"\x00\xff", "bytes"), ({"a": [1, 2]}, "json"),
     (["doc"], "json"), ("x" * 5_000_000, "str")],
    ids=["none", "str", "bytes", "json-dict", "json-list", "5MB-str"],
)  # fmt: skip
def test_load_context(session: Session, value: object, kind: str) -> None:
    session.door.context = value
    session.driver.load_context()
    assert session.main.context == value and type(session.main.context) is type(value)
    assert session.run("len(context) if context is not None else -1")["status"] == "ok"


@pytest.mark.parametrize(
    ("answer", "raised", "message"),
    [
        (error_answer("PermissionError", "no context for you"), PermissionError, "for you"),
        (b'{"kind": "str", "length": 5}\nabc', RuntimeError, "wrong length"),
        (b'{"kind": "pickle", "length": 0}\n', RuntimeError, "unknown kind"),
        (b"garbage", RuntimeError, "malformed"),
    ],
    ids=["error", "short", "unknown-kind", "garbage"],
)
def test_bad_context_answers(session: Session, answer: bytes, raised: type, message: str) -> None:
    session.door.answers["context"] = lambda request: answer
    with pytest.raises(raised, match=message):
        session.driver.load_context()


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("v = 1", 1),
        ("v = float('nan')", None),
        ("v = b'hi'", {"__bytes__": "aGk="}),
        ("v = (1, [2, {3}])", [1, [2, [3]]]),
        ("v = {1: 'a', 'b': None}", {"1": "a", "b": None}),
        ("import datetime\nv = datetime.date(2024, 1, 2)", "2024-01-02"),
        ("v = object", "<class 'object'>"),
        ("v = []\nfor _ in range(30):\n    v = [v]", "<too deep>"),
    ],
    ids=["int", "nan", "bytes", "nested", "dict-keys", "date", "repr", "deep"],
)
def test_get_variable(session: Session, source: str, expected: Any) -> None:
    session.run(source)
    session.driver.get_variable("v")
    (sent,) = session.door.sent("value")
    assert sent["found"] is True
    value = sent["value"]
    while expected == "<too deep>" and isinstance(value, list):
        value = value[0]
    assert value == expected


def test_get_variable_missing_and_huge(session: Session, mod: types.ModuleType) -> None:
    session.driver.get_variable("nope")
    (sent,) = session.door.sent("value")
    assert sent == {"op": "value", "name": "nope", "found": False, "value": None}
    plain = mod.to_plain(list(range(10)), max_items=4)
    assert plain == [0, 1, 2, 3, "<truncated: more than 4 items>"]


def test_display_sends_live_and_lists_the_cells_displays(session: Session) -> None:
    reply = session.run(
        "display(1, 'a')\ndisplay({'text/markdown': '*m*'}, raw=True, metadata={'k': 1})"
    )
    sent = [{"data": r["data"], "metadata": r["metadata"]} for r in session.door.sent("display")]
    assert sent == [
        {"data": {"text/plain": "1"}, "metadata": {}},
        {"data": {"text/plain": "'a'"}, "metadata": {}},
        {"data": {"text/markdown": "*m*"}, "metadata": {"k": 1}},
    ]
    assert reply["displays"] == sent and reply["result"] is None
    assert session.run("display()")["displays"] == []
    assert session.run("display(1, raw=True)")["error"]["ename"] == "TypeError"

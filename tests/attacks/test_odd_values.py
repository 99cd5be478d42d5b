"""Odd values through every output path never stop the cell driver (issue 48).

A session is what the user spent the afternoon building: a value a cell produces (a result, a
display, an update, a repr, an error's text, a payload, a comm message, a widget's state, a
user expression) that cannot be sent as it is must end as an ordinary error or output of that
cell, never as "the cell driver stopped answering" with a rollback, and never as a rebuilt
session. Each cell below runs in one kernel in turn; after each, the next cell still sees the
variables made before all of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.kernel.conftest import CELL_TIMEOUT_SECONDS, RunningKernel, start_kernel

_DRIVER_LOST = ("stopped answering", "SandboxSessionRebuilt", "rolled back", "rebuilt")

# Odd values, defined in the session first.
SETUP = r"""
import math
class Odd:
    def __repr__(self):
        return 'odd'
class BadRepr:
    def __repr__(self):
        raise RuntimeError('repr broke')
class ExitRepr:
    def __repr__(self):
        raise SystemExit(3)
class StrBreaks(Exception):
    def __str__(self):
        raise RuntimeError('str broke')
class StrExits(Exception):
    def __str__(self):
        raise SystemExit('str exits')
class NotStr(Exception):
    def __str__(self):
        return 42
class Bundle:
    def __init__(self, value, mime='application/json'):
        self.value, self.mime = value, mime
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {'text/plain': 'bundle', self.mime: self.value}
class MetaBundle:
    def __init__(self, meta):
        self.meta = meta
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {'text/plain': 'meta'}, self.meta
class EndlessIter:
    def __iter__(self):
        while True:
            yield 1
class IterRaises:
    def __iter__(self):
        raise RuntimeError('iter broke')
circular = {}
circular['self'] = circular
deep = []
for _ in range(100_000):
    deep = [deep]
near = []
for _ in range(190):
    near = [near]
shared = []
for _ in range(16):
    shared = [shared, shared]
fan = {}
for i in range(20):
    fan[i] = fan
odd_keys = {(1, 2): 'tuple key', Odd(): 'object key', 1: 'int', '1': 'str'}
"""

ODD_VALUES = [
    "b'\\x89PNG raw bytes'",
    "bytearray(b'abc')",
    "memoryview(b'abc')",
    "object()",
    "Odd()",
    "circular",
    "deep",
    "odd_keys",
    "{'nan': float('nan'), 'inf': float('inf')}",
    "'\\ud800 lone surrogate \\udfff'",
    "{'\\ud800': '\\udc80'}",
    "EndlessIter()",
    "IterRaises()",
    "{1, 2, 3}",
    "shared",
    "fan",
    "'x' * 20_000_000",
]

CELLS = [
    "BadRepr()",
    "ExitRepr()",
    "display(BadRepr())",
    "display(ExitRepr())",
    "raise StrBreaks()",
    "raise StrExits()",
    "raise NotStr()",
    "raise ValueError('\\ud800 in an error')",
    "raise ValueError(b'bytes')",
    "print('\\ud800')",
    "import sys\nsys.stderr.write('\\udcff\\n')",
    "from IPython.display import HTML\nh = display(HTML('a'), display_id=True)\n"
    "h.update(Bundle(object()))",
    "get_ipython().display_pub.publish({'text/plain': 'x', 'image/png': b'png'}, "
    "metadata={'image/png': {'width': float('nan')}})",
    "get_ipython().display_pub.publish({'text/plain': object()})",
    "get_ipython().display_pub.publish({(1,): 'key'})",
    "get_ipython().display_pub.publish({'text/plain': 'x'}, transient={'display_id': object()})",
    "get_ipython().payload_manager.write_payload({'source': 'page', 'data': {'x': object()}})",
    "get_ipython().payload_manager.write_payload({'source': 'page', 'data': b'bytes'})",
    "get_ipython().set_next_input(b'bytes')",
    # a payload the host's report model refuses: the report goes again without it
    "get_ipython().payload_manager._payload.append(['not', 'a', 'dict'])\n'shown'",
    "import comm\nc = comm.create_comm(target_name='odd', data={'x': b'bytes'})",
    "c.send({'x': object()})",
    "c.send(circular)",
    "c.send({'s': '\\ud800'}, buffers=[b'raw'])",
    "c.close({'x': float('nan')})",
    "import ipywidgets\nw = ipywidgets.Text(value='\\ud800')\nw",
    "w.description = 'x' * 1_000_000\nw.value = '\\udfff'",
    "c.send({'d': deep})",
    "get_ipython().payload_manager.write_payload({'source': 'page', 'data': deep})",
    "rlm_query('task', deep)",
    # `!python` runs a program in the session's own interpreter: what it breaks is put back.
    "!python -c \"import sys; sys.modules['__main__'] = None; sys.argv = None\"",
    '!python -c "import sys; sys.stdout = sys.stderr = None; raise SystemExit(object())"',
    "!python -c \"import sys; sys.path.clear(); raise KeyError('\\ud800')\"",
    "!python -c \"import os; os.system('id')\"",
    "!python -c \"import subprocess; subprocess.run(['id'])\"",
    '!python -c "raise SystemExit(BadRepr())"',
    '!python -c "class E(Exception):\n    def __str__(self): raise SystemExit\nraise E"',
    "MetaBundle({'x': object()})",
    "MetaBundle(circular)",
    "display(MetaBundle(deep))",
    "from IPython.display import update_display\n"
    "update_display(Bundle(deep), display_id='nowhere')",
]
CELLS += [f"Bundle({value})" for value in ODD_VALUES]
CELLS += [f"display(Bundle({value}))" for value in ODD_VALUES]
CELLS += [f"display({value})" for value in ODD_VALUES]
CELLS += [f"{value}" for value in ODD_VALUES]


@pytest.fixture(scope="module")
def odd_kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningKernel]:
    running = start_kernel(tmp_path_factory.mktemp("odd"))
    running.run_ok("made_before = [1, 2, 3]")
    running.run_ok(SETUP)
    yield running
    running.shutdown()


def _intact(kernel: RunningKernel, after: str) -> None:
    check = kernel.run("made_before", timeout=CELL_TIMEOUT_SECONDS)
    assert check.status == "ok", f"after {after!r}: {check.describe()}"
    assert check.result() == "[1, 2, 3]", after


def _not_lost(execution_text: str, code: str) -> None:
    for word in _DRIVER_LOST:
        assert word not in execution_text, f"{code!r} lost the driver: {execution_text[:2000]}"


@pytest.mark.parametrize("code", CELLS)
def test_an_odd_value_is_an_ordinary_outcome(odd_kernel: RunningKernel, code: str) -> None:
    execution = odd_kernel.run(code, timeout=CELL_TIMEOUT_SECONDS)
    assert execution.status in ("ok", "error"), execution.describe()
    _not_lost(execution.describe(), code)
    _intact(odd_kernel, code)


@pytest.mark.parametrize("value", ODD_VALUES)
def test_odd_user_expressions(odd_kernel: RunningKernel, value: str) -> None:
    execution = odd_kernel.run(
        "pass",
        timeout=CELL_TIMEOUT_SECONDS,
        user_expressions={"odd": value, "b": f"Bundle({value})"},
    )
    assert execution.status == "ok", execution.describe()
    assert set(execution.reply["user_expressions"]) == {"odd", "b"}
    _intact(odd_kernel, value)


def test_odd_variables_and_inspection(odd_kernel: RunningKernel) -> None:
    """What the host asks of the guest about its values: completion and inspection."""
    odd_kernel.run_ok("lone = '\\ud800'\nbad = BadRepr()\nexits = ExitRepr()")
    for code in ("lone", "bad", "exits", "circular", "odd_keys"):
        msg_id = odd_kernel.kc.inspect(code, len(code))
        assert odd_kernel.reply(msg_id)["status"] in ("ok", "error")
        msg_id = odd_kernel.kc.complete(code[:2], 2)
        assert odd_kernel.reply(msg_id)["status"] == "ok"
    _intact(odd_kernel, "inspect")


# Values hypothesis builds: nested JSON-ish data with the leaves that have no JSON form.
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF)),
    st.binary(max_size=64),
    st.sampled_from(["object()", "Odd()", "BadRepr()", "float('nan')", "'\\ud800'"]).map(
        lambda code: _Code(code)
    ),
)


class _Code(str):
    """A leaf given as source, not as a literal."""


def _source(value: object) -> str:
    if isinstance(value, _Code):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_source(k)}: {_source(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_source(item) for item in value) + "]"
    if isinstance(value, tuple):
        return "(" + "".join(f"{_source(item)}, " for item in value) + ")"
    if isinstance(value, float):
        return f"float({str(value)!r})"
    return repr(value)


_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(
            st.one_of(st.text(max_size=4), st.integers(), st.binary(max_size=4)), inner, max_size=4
        ),
    ),
    max_leaves=12,
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    value=_VALUES,
    path=st.sampled_from(["Bundle({})", "display(Bundle({}))", "MetaBundle({})", "c2.send({})"]),
)
def test_any_value_through_any_path(odd_kernel: RunningKernel, value: object, path: str) -> None:
    """Hypothesis hunts the door's siblings: any nesting of odd leaves, through a result, a
    display, metadata or a comm message, is an ordinary outcome and the session survives."""
    odd_kernel.run("import comm\nc2 = comm.create_comm(target_name='hunt')")
    code = path.format(_source(value))
    execution = odd_kernel.run(code, timeout=CELL_TIMEOUT_SECONDS)
    assert execution.status in ("ok", "error"), execution.describe()
    _not_lost(execution.describe(), code)
    _intact(odd_kernel, code)


def test_data_just_under_the_nesting_limit_is_shown(odd_kernel: RunningKernel) -> None:
    """190 levels (the limit is 200): shown as on ipykernel, through the C json module."""
    execution = odd_kernel.run_ok("Bundle(near)")
    data = execution.of_type("execute_result")[0].content["data"]
    depth, value = 0, data["application/json"]
    while value:
        depth, value = depth + 1, value[0]
    assert depth == 190


def test_session_not_rebuilt(odd_kernel: RunningKernel) -> None:
    """After everything above, still the same session: the setup's values are there."""
    assert (
        odd_kernel.run_ok("type(circular['self']).__name__, len(odd_keys)").result()
        == "('dict', 4)"
    )


PLAIN_CELLS = [
    "Bundle(deep)",
    "Bundle(deep, 'application/vnd.custom+json')",
    "MetaBundle(deep)",
    "MetaBundle({'x': object()})",
    "display(Bundle(deep))",
    "display({'application/json': deep}, raw=True)",
    "display(b'bytes', BadRepr(), ExitRepr(), Bundle(object()))",
    "BadRepr()",
    "ExitRepr()",
    "raise StrExits()",
    "raise ValueError('\\ud800')",
    "'\\ud800'",
    "rlm_query('task', deep)",
    "llm_query_batched([deep])",
]


@pytest.mark.parametrize("code", PLAIN_CELLS)
def test_a_plain_session_survives_odd_values(make_repl: Any, code: str) -> None:
    """A session without IPython (ReplSandbox's default) formats results itself: the same odd
    values are ordinary outcomes there too, nothing rolled back."""
    repl = make_repl()
    assert repl.execute("made_before = [1, 2, 3]").ok
    assert repl.execute(SETUP).ok
    done = repl.execute(code)
    assert not done.rolled_back, (code, done)
    assert done.status.value in ("ok", "error"), (code, done)
    assert repl.get_variable("made_before") == [1, 2, 3]


def test_get_variable_of_odd_values(make_repl: Any) -> None:
    """The host's get_variable converts the value in the guest: a repr that raises or exits,
    a lone surrogate, a circular or deep structure are answered, and the session goes on."""
    repl = make_repl()
    assert repl.execute(SETUP).ok
    assert repl.execute("exits = [ExitRepr()]\nbroken = {'k': BadRepr()}\nlone = '\\ud800'").ok
    for name in ("exits", "broken", "lone", "circular", "deep", "odd_keys", "fan"):
        repl.get_variable(name)  # any answer: it must not stop the driver
    assert "repr failed" in str(repl.get_variable("exits"))
    assert repl.get_variable("lone") == "\ufffd"
    assert repl.execute("print('alive')").stdout == "alive\n"

"""The guest's to_message (bundles.py), which converts what a cell shows as ipykernel's packer
converts it, hunted with hypothesis under host CPython: for any value it either returns JSON
data the host's strict parser takes (no NaN, no lone surrogates, str keys, never deeper than
MAX_NESTING) or raises ValueError, never anything else; and what it returns it returns
unchanged when given again.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import math
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

DRIVER_PATH = Path(__file__).parents[2] / "sandbox_kernel" / "guest" / "driver.py"


@pytest.fixture(scope="module")
def bundles() -> types.ModuleType:
    if "sandbox_kernel_bundles" not in sys.modules:
        spec = importlib.util.spec_from_file_location("sandbox_kernel_driver", DRIVER_PATH)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)  # loads the driver's parts, bundles among them
    return sys.modules["sandbox_kernel_bundles"]


class _NoJSON:
    pass


class _BadIter:
    def __iter__(self) -> Any:
        raise RuntimeError("iter broke")


class _BadStr:
    def __str__(self) -> str:
        raise RuntimeError("str broke")

    def __hash__(self) -> int:
        return 1


_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**100), max_value=2**100),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(codec=None)),
    st.binary(max_size=32),
    st.dates(),
    st.builds(_NoJSON),
    st.builds(_BadIter),
    st.sets(st.integers(), max_size=3),
)
_KEYS = st.one_of(
    st.text(alphabet=st.characters(codec=None), max_size=4),
    st.integers(),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.tuples(st.integers()),
    st.builds(_BadStr),
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(_KEYS, inner, max_size=4),
    ),
    max_leaves=20,
)


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


@settings(max_examples=400, deadline=None)
@given(value=_VALUES)
def test_json_or_a_value_error(bundles: types.ModuleType, value: Any) -> None:
    try:
        converted = bundles.to_message(value)
    except ValueError as exc:
        assert str(exc).startswith("Can't clean for JSON")
        return
    text = json.dumps(converted, allow_nan=False, ensure_ascii=False)
    text.encode("utf-8")  # no lone surrogates
    assert _depth(converted) <= bundles.MAX_NESTING
    assert bundles.to_message(converted) == converted


def test_what_ipykernel_sends(bundles: types.ModuleType) -> None:
    """The conversions jupyter_client's packer makes, one by one."""
    converted = bundles.to_message(
        {
            "image/png": b"\x89PNG",
            "nan": math.nan,
            "when": datetime.date(2026, 1, 2),
            1: (1, 2),
            None: {3},
            "s": "\ud800",
        }
    )
    assert converted == {
        "image/png": "iVBORw==",
        "nan": "nan",
        "when": "2026-01-02",
        "1": [1, 2],
        "null": [3],
        "s": "\ufffd",
    }
    plain = {"data": {"text/plain": "x"}, "metadata": {}}
    assert bundles.to_message(plain) is plain  # the usual display: not copied


@pytest.mark.parametrize(
    "value",
    [
        {"x": _NoJSON()},
        {1: "a", "1": "b"},
        "circular",
        "deep",
        "endless",
    ],
)
def test_no_json_form_is_a_value_error(bundles: types.ModuleType, value: Any) -> None:
    if value == "circular":
        value = {}
        value["self"] = value
    elif value == "deep":
        value = []
        for _ in range(100_000):
            value = [value]
    elif value == "endless":
        value = {"x": iter(int, 1)}
    with pytest.raises(ValueError, match="Can't clean for JSON"):
        bundles.to_message(value)


def test_nested_too_deeply(bundles: types.ModuleType) -> None:
    shared: list[Any] = []
    for _ in range(100):
        shared = [shared, shared]  # 2**100 paths, 100 levels: walked once each
    assert not bundles.nested_too_deeply(shared)
    deep: list[Any] = []
    for _ in range(300):
        deep = [deep]
    assert bundles.nested_too_deeply(deep) and bundles.nested_too_deeply({"a": deep})
    assert not bundles.nested_too_deeply("text") and not bundles.is_jsonable(deep)

"""MIME bundles and plain data from guest objects, built as IPython builds them.

Runs INSIDE the sandbox (module sandbox_kernel_bundles, loaded before the driver): what a cell's
last expression, a display() or get_variable sends to the host. numpy, pandas and matplotlib
are found in sys.modules when an object could come from them, never imported here.

Must import only the standard library and sandbox_kernel_streams; never imports sandbox_kernel.
"""

from __future__ import annotations

import base64
import datetime
import io
import itertools
import json
import math
import numbers
import pprint
import re
import sys
from typing import Any

from sandbox_kernel_streams import describe, warn

__all__ = [
    "MAX_DEPTH",
    "MAX_ITEMS",
    "figure_png",
    "format_bundle",
    "is_jsonable",
    "nested_too_deeply",
    "not_jsonable",
    "plain_text",
    "put",
    "to_message",
    "to_plain",
]

MAX_DEPTH = 20  # to_plain: deeper containers become a marker string
MAX_ITEMS = 100_000  # to_plain: elements converted before the rest is cut with a marker
_RICH_REPRS = (
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_latex_", "text/latex"),
    ("_repr_json_", "application/json"),
)


def format_bundle(obj: object) -> tuple[dict[str, Any], dict[str, Any]]:
    """The MIME bundle (data, metadata) Jupyter shows for `obj`, built as IPython builds it.

    Rich reprs are looked up on the type. `_repr_mimebundle_` wins for the types it gives; a
    rich repr that raises or returns None is skipped; bytes are base64'd; text/plain is always
    there; a matplotlib Figure gives image/png.
    """
    data: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    bundle = _call_repr(obj, "_repr_mimebundle_", include=None, exclude=None)
    if isinstance(bundle, tuple) and len(bundle) == 2:
        bundle, extra = bundle
        metadata.update(extra if isinstance(extra, dict) else {})
    for mime, value in (bundle if isinstance(bundle, dict) else {}).items():
        put(data, str(mime), value)
    for method, mime in _RICH_REPRS:
        if mime not in data:
            value = _call_repr(obj, method)
            if isinstance(value, tuple) and len(value) == 2:
                value, metadata[mime] = value
            put(data, mime, value)
    figures = sys.modules.get("matplotlib.figure")
    if "image/png" not in data and figures is not None and isinstance(obj, figures.Figure):
        try:
            put(data, "image/png", figure_png(obj))
        except Exception as exc:  # shown as text only, with the reason on stderr
            warn(f"could not draw the figure: {describe(exc)}")
    data.setdefault("text/plain", plain_text(obj))
    return data, metadata if is_jsonable(metadata) else {}


def plain_text(obj: object) -> str:
    """repr(obj), pretty-printed for containers; a description if repr itself fails."""
    try:
        text = repr(obj)
        if isinstance(obj, dict | list | tuple | set | frozenset) and 80 < len(text) < 100_000:
            text = pprint.pformat(obj, sort_dicts=False)
        return text
    except BaseException as exc:
        return f"<{type(obj).__name__} object (repr failed: {describe(exc)})>"


def _call_repr(obj: object, name: str, **kwargs: Any) -> Any:
    """Call the rich repr `name` as defined on obj's type (never an instance attribute)."""
    for klass in type(obj).__mro__:
        if name in vars(klass):
            attr = vars(klass)[name]
            break
    else:
        return None
    try:
        getter = getattr(type(attr), "__get__", None)
        method = getter(attr, obj, type(obj)) if getter is not None else attr
        return method(**kwargs)
    except Exception:  # a broken rich repr is skipped, as IPython does
        return None


def put(data: dict[str, Any], mime: str, value: Any) -> None:
    """Add one rich repr's value; None (no repr) and what JSON cannot carry are left out."""
    if value is None:
        return
    if isinstance(value, bytes | bytearray | memoryview):
        value = base64.b64encode(value).decode("ascii")
    if isinstance(value, str) or (mime.endswith("json") and is_jsonable(value)):
        data[mime] = value


def figure_png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()


def to_plain(obj: object, max_depth: int = MAX_DEPTH, max_items: int = MAX_ITEMS) -> Any:
    """`obj` as JSON data: what get_variable sends the host.

    None, bool, int, str as they are; floats, with nan and inf as None; bytes as
    {"__bytes__": base64}; list, tuple, set as lists; dicts with str keys (others repr'd);
    dates and times as ISO text; numpy scalars and arrays, pandas Series and DataFrames (as
    records) by their values; anything else as its repr. Past `max_depth` levels a container
    becomes "<too deep>"; past `max_items` elements the rest becomes one "<truncated...>" marker.
    """
    return _Plain(max_items).convert(obj, max_depth)


class _Plain:
    """One conversion's state: how many elements may still be converted."""

    def __init__(self, max_items: int) -> None:
        self.left = max_items
        self.marker = f"<truncated: more than {max_items} items>"

    def convert(self, obj: Any, depth: int) -> Any:
        if obj is None or isinstance(obj, bool | int | str):
            return obj
        if isinstance(obj, float):
            return obj if math.isfinite(obj) else None
        if isinstance(obj, bytes | bytearray | memoryview):
            return {"__bytes__": base64.b64encode(obj).decode("ascii")}
        if isinstance(obj, datetime.date | datetime.time):
            return obj.isoformat()
        if depth <= 0:
            return "<too deep>"
        if isinstance(obj, dict):
            return self._dict(obj, depth - 1)
        if isinstance(obj, list | tuple | set | frozenset):
            return self._list(obj, depth - 1)
        return self._foreign(obj, depth)

    def _list(self, items: Any, depth: int) -> list[Any]:
        out = []
        for item in items:
            if self.left <= 0:
                out.append(self.marker)
                break
            self.left -= 1
            out.append(self.convert(item, depth))
        return out

    def _dict(self, items: dict[Any, Any], depth: int) -> dict[str, Any]:
        out = {}
        for key, item in items.items():
            if self.left <= 0:
                out["<truncated>"] = self.marker
                break
            self.left -= 1
            out[key if isinstance(key, str) else plain_text(key)] = self.convert(item, depth)
        return out

    def _foreign(self, obj: Any, depth: int) -> Any:
        """numpy and pandas objects (only if those modules are loaded); repr for the rest."""
        numpy, pandas = sys.modules.get("numpy"), sys.modules.get("pandas")
        room = self.left + 1  # one more than fits, so the marker shows
        if numpy is not None and isinstance(obj, numpy.generic):
            return self.convert(obj.item(), depth)
        if numpy is not None and isinstance(obj, numpy.ndarray):
            if obj.ndim == 0:
                return self.convert(obj.item(), depth)
            per_row = max(1, obj.size // max(1, len(obj)))
            return self._list(obj[: room // per_row + 1].tolist(), depth - 1)
        if pandas is not None and isinstance(obj, pandas.DataFrame):
            rows = obj.head(room // max(1, len(obj.columns)) + 1)
            return self._list(rows.to_dict(orient="records"), depth - 1)
        if pandas is not None and isinstance(obj, pandas.Series):
            return self._list(obj.head(room).tolist(), depth - 1)
        return plain_text(obj)


def not_jsonable(obj: object) -> Any:
    """json.dumps' fallback: say clearly what cannot go to the host, and what can."""
    hint = " (decode it first, e.g. data.decode())" if isinstance(obj, bytes | bytearray) else ""
    raise TypeError(
        f"cannot send an object of type {type(obj).__name__} to the host{hint}: only JSON data "
        "goes through (str, int, float, bool, None, and lists and dicts of them)"
    )


def is_jsonable(value: Any) -> bool:
    if nested_too_deeply(value):  # never given to the C json module (MAX_NESTING)
        return False
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


# -- what goes to a Jupyter frontend (results, displays, comms), as ipykernel sends it ----------

# Deeper data is refused: the image's C json module overflows the guest's stack (a trap, and
# a rollback) on nesting that CPython elsewhere turns into a RecursionError.
MAX_NESTING = 200
MAX_NODES = 5_000_000  # to_message's walk: past this many values, refused
_SURROGATE = re.compile("[\ud800-\udfff]")


def to_message(value: Any) -> Any:
    """`value` (a MIME bundle, its metadata, a comm message) as JSON data a frontend can be
    sent, converted as jupyter_client converts a message under ipykernel (json_default, then
    json_clean): bytes as base64 (an image formatter's PNG or JPEG), dates as ISO text, tuples,
    sets and other iterables as lists, numbers as int or float, NaN and infinities as their
    repr, keys as str; lone surrogates become U+FFFD. What has no JSON form (an object, data
    nested deeper than MAX_NESTING or referring to itself, keys that collide once made str) is
    a ValueError, as on ipykernel ("Can't clean for JSON"), raised where the value was shown:
    never a failure of the driver. Walked in Python, never by the C json module (see
    MAX_NESTING), and only when the value is not already plain."""
    if _simple(value, 2):
        return value  # the usual bundle: {"text/plain": "..."}, nothing to convert
    try:
        return _Clean().convert(value, MAX_NESTING)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # what the value's own methods raise (an __iter__, a __str__)
        raise ValueError(f"Can't clean for JSON: {describe(exc)}") from None


def _simple(value: Any, depth: int) -> bool:
    """A dict of str (or, `depth` levels down, of such dicts) with no lone surrogates: JSON as
    it is (a display's {"data": {"text/plain": ...}, "metadata": {}})."""
    if type(value) is not dict:
        return False
    for key, item in value.items():
        if type(key) is not str or (not key.isascii() and _SURROGATE.search(key)):
            return False
        if type(item) is str:
            if not item.isascii() and _SURROGATE.search(item):
                return False
        elif depth <= 1 or not _simple(item, depth - 1):
            return False
    return True


def _text(value: str) -> str:
    if type(value) is not str:
        value = str.__str__(value)
    if value.isascii() or not _SURROGATE.search(value):
        return value
    return _SURROGATE.sub("\ufffd", value)


class _Clean:
    """jupyter_client's json_default and json_clean in one walk: JSON data with str keys, or
    an exception. Containers on the current path are marked (a cycle is an error, as json's
    check_circular makes it), and the walk has a budget of nodes (shared references can make
    a small structure's JSON huge)."""

    def __init__(self) -> None:
        self.path: set[int] = set()
        self.left = MAX_NODES

    def convert(self, obj: Any, depth: int) -> Any:
        self.left -= 1
        if depth <= 0 or self.left <= 0:
            raise ValueError(f"the data is nested deeper than {MAX_NESTING} levels or too big")
        if obj is None or obj is True or obj is False:
            return obj
        if isinstance(obj, str):
            return _text(obj)
        if isinstance(obj, bool):
            return bool(obj)
        if isinstance(obj, numbers.Integral):
            return int(obj)
        if isinstance(obj, numbers.Real):
            number = float(obj)
            return number if math.isfinite(number) else repr(number)
        if isinstance(obj, bytes | bytearray | memoryview):
            return base64.b64encode(obj).decode("ascii")
        if isinstance(obj, datetime.date):
            return obj.isoformat()
        if id(obj) in self.path:
            raise ValueError("Circular reference detected")
        self.path.add(id(obj))
        try:
            return self._container(obj, depth - 1)
        finally:
            self.path.discard(id(obj))

    def _container(self, obj: Any, depth: int) -> Any:
        if isinstance(obj, dict):
            keys = [_text(k) if isinstance(k, str) else _key(k) for k in obj]
            if len(set(keys)) != len(keys):
                raise ValueError(
                    "dict cannot be safely converted to JSON: key collision would lead to "
                    "dropped values"
                )
            values = [self.convert(v, depth) for v in obj.values()]
            return dict(zip(keys, values, strict=True))
        if isinstance(obj, list | tuple | set | frozenset):
            return [self.convert(item, depth) for item in obj]
        if hasattr(type(obj), "__iter__") and not isinstance(obj, type):  # as json_default
            items = list(itertools.islice(obj, MAX_ITEMS + 1))
            if len(items) > MAX_ITEMS:  # an endless iterator would never end the cell
                raise ValueError(f"an iterator of more than {MAX_ITEMS} items cannot be sent")
            return [self.convert(item, depth) for item in items]
        raise ValueError(f"an object of type {type(obj).__name__} has no JSON form")


def _key(key: object) -> str:
    """A dict key as JSON's: None, bools and numbers as json.dumps writes them, else str()."""
    if key is None or isinstance(key, bool):
        return {None: "null", True: "true", False: "false"}[key]
    try:
        return _text(str(key))
    except BaseException:
        return plain_text(key)


def nested_too_deeply(value: Any, limit: int = MAX_NESTING) -> bool:
    """Whether lists, tuples and dicts in `value` nest deeper than `limit`: such data must not
    reach the C json module (MAX_NESTING). A container met again is not walked again (a cycle
    is json's own ValueError)."""
    if not isinstance(value, dict | list | tuple):
        return False
    stack, seen = [(value, 0)], set()
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if id(item) in seen:
            continue
        seen.add(id(item))
        children = item.values() if isinstance(item, dict) else item
        stack.extend((v, depth + 1) for v in children if isinstance(v, dict | list | tuple))
    return False

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
    "jupyter_default",
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
    except Exception as exc:
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
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


# -- what goes to a Jupyter frontend (results, displays, comms), as ipykernel sends it ----------

_NESTING = 200  # json_clean: deeper data is refused, as the guest's stack would be spent
_SURROGATE = re.compile("[\ud800-\udfff]")


def jupyter_default(obj: object) -> Any:
    """json.dumps' fallback for what a frontend is sent, as jupyter_client's json_default (the
    packer under ipykernel): bytes as base64 (an image formatter's PNG or JPEG), dates as ISO
    text, other iterables as lists, numbers as int or float; anything else a TypeError."""
    if isinstance(obj, bytes | bytearray | memoryview):
        return base64.b64encode(obj).decode("ascii")
    if isinstance(obj, datetime.date):
        return obj.isoformat()
    if isinstance(obj, str):  # a str subclass json refused (never: json takes them)
        return str.__str__(obj)
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        return float(obj)
    if hasattr(type(obj), "__iter__") and not isinstance(obj, type):
        items = list(itertools.islice(obj, MAX_ITEMS + 1))  # type: ignore[call-overload]
        if len(items) > MAX_ITEMS:  # an endless iterator would never end the cell
            raise TypeError(f"an iterator of more than {MAX_ITEMS} items cannot be sent")
        return items
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def to_message(value: Any) -> Any:
    """`value` (a MIME bundle, its metadata, a comm message) as JSON data a frontend can be
    sent, converted as jupyter_client converts a message under ipykernel: jupyter_default for
    what JSON lacks, then, if that fails, json_clean's way (keys as str, NaN and infinities as
    their repr). What even that cannot carry (an object with no JSON form, a circular or too
    deeply nested structure) is a ValueError, as on ipykernel ("Can't clean for JSON"), raised
    where the value was shown; never a failure of the driver. Lone surrogates become U+FFFD."""
    if _simple(value, 2):
        return value  # the usual bundle: {"text/plain": "..."}, nothing to convert
    try:
        text = json.dumps(value, default=jupyter_default, ensure_ascii=False)
    except Exception:  # what the value's own methods raise too (an __iter__, a __float__)
        try:
            text = json.dumps(_clean(value, _NESTING), default=jupyter_default, ensure_ascii=False)
        except Exception as exc:
            raise ValueError(f"Can't clean for JSON: {describe(exc)}") from None
    return json.loads(_SURROGATE.sub("\ufffd", text))


def _clean(obj: Any, depth: int) -> Any:
    """jupyter_client's json_clean: JSON data with str keys, or ValueError."""
    if depth <= 0:
        raise ValueError("the data is nested too deeply (or refers to itself)")
    if obj is None or isinstance(obj, bool | str):
        return obj
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        number = float(obj)
        return number if math.isfinite(number) else repr(number)
    if isinstance(obj, bytes | bytearray | memoryview):
        return base64.b64encode(obj).decode("ascii")
    if isinstance(obj, dict):
        keys = [k if isinstance(k, str) else _key(k) for k in obj]
        if len(set(keys)) != len(keys):
            raise ValueError(
                "dict cannot be safely converted to JSON: key collision would lead to dropped "
                "values"
            )
        return {k: _clean(v, depth - 1) for k, v in zip(keys, obj.values(), strict=True)}
    if isinstance(obj, list | tuple | set | frozenset):
        return [_clean(item, depth - 1) for item in obj]
    if isinstance(obj, datetime.date):
        return obj.isoformat()
    raise ValueError(f"cannot send an object of type {type(obj).__name__} to the frontend")


def _key(key: object) -> str:
    try:
        return str(key)
    except Exception:
        return plain_text(key)


def _simple(value: Any, depth: int) -> bool:
    """A dict of str (or, `depth` levels down, of such dicts) with no lone surrogates: JSON as
    it is (a display's {"data": {"text/plain": ...}, "metadata": {}})."""
    if type(value) is not dict:
        return False
    for key, item in value.items():
        if type(key) is not str:
            return False
        if type(item) is str:
            if not item.isascii() and _SURROGATE.search(item):
                return False
        elif depth <= 1 or not _simple(item, depth - 1):
            return False
    return True

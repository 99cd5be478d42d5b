"""What arrives at the runner, before it is a RunnerRequest: JSON text or bytes or data.

`request_data` turns JSON text into data and applies the entrypoint's query_type (filled in
when missing, refused when different); the `peek_*` helpers read a field of a request that
did not validate, for its error response and its capsule.

Must not import anything from sandbox_kernel but runner.models.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from sandbox_kernel.runner.models import QueryType

__all__ = ["RequestUnreadable", "peek_code", "peek_query_type", "peek_text", "request_data"]


class RequestUnreadable(ValueError):
    """The request is not a JSON object, or is for another entrypoint."""


def request_data(raw: object, entrypoint: QueryType | None) -> object:
    """JSON text as data; the entrypoint's query_type filled in, or checked."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise RequestUnreadable("the request is not UTF-8 text") from None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise RequestUnreadable(f"the request is not JSON: {exc}") from None
    if not isinstance(raw, Mapping):
        raise RequestUnreadable(f"the request must be a JSON object, not {type(raw).__name__}")
    if entrypoint is None:
        return raw
    given = raw.get("query_type", entrypoint.value)
    if given != entrypoint.value:
        raise RequestUnreadable(
            f"query_type: this entrypoint answers {entrypoint.value!r} requests, not {given!r}"
        )
    return {**raw, "query_type": entrypoint.value}


def peek_query_type(raw: object) -> QueryType | None:
    value = raw.get("query_type") if isinstance(raw, Mapping) else None
    try:
        return QueryType(value) if isinstance(value, str) else None
    except ValueError:
        return None


def peek_text(raw: object, name: str) -> str | None:
    value = raw.get(name) if isinstance(raw, Mapping) else None
    return value if isinstance(value, str) else None


def peek_code(raw: object) -> str:
    return peek_text(raw, "python_code") or peek_text(raw, "sql") or ""

"""Functions the tests name as "module:function" providers."""

from __future__ import annotations

from typing import Any


def shout(messages: list[dict[str, Any]]) -> str:
    return str(messages[-1]["content"]).upper()

"""Providers without a server: a script of replies, or any Python function.

ScriptedProvider answers from rules, for offline notebooks, demos and tests. A rule's `when`
is a regular expression searched in the last user message; the first rule that matches
answers with its `reply`, in which \\1 or \\g<name> stand for the match's groups. A rule
without `when` matches anything (a fallback). No matching rule is an LLMRefusalError.

    # replies.toml
    [[rule]]
    when = 'capital of (\\w+)'
    reply = 'I only know the capital of France: Paris. You asked about \\1.'
    [[rule]]
    reply = "I have no scripted answer to that."

    ScriptedProvider.from_file("replies.toml")   # or .json: {"rule": [{...}, ...]}

FunctionProvider wraps a callable that takes the conversation (a list of {"role", "content"}
dicts) and returns the reply text or a Completion; `load_function("package.module:function")`
imports one by name, so any code a user writes can be the model.

Must not import: wasmtime, anything Jupyter, sandbox_kernel.repl.
"""

from __future__ import annotations

import importlib
import json
import re
import threading
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sandbox_kernel.llm.base import ChatMessage, Completion
from sandbox_kernel.llm.errors import LLMConfigError, LLMError, LLMRefusalError, LLMResponseError

__all__ = ["FunctionProvider", "ScriptRule", "ScriptedProvider", "load_function"]


class ScriptRule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    when: str | None = None  # a regular expression (re.DOTALL); None matches anything
    reply: str
    ignore_case: bool = False

    @field_validator("when")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"bad regular expression {value!r}: {exc}") from None
        return value

    def answer(self, text: str) -> str | None:
        if self.when is None:
            return self.reply
        flags = re.DOTALL | (re.IGNORECASE if self.ignore_case else 0)
        match = re.search(self.when, text, flags)
        return None if match is None else _expand(self.reply, match)


_GROUP_REFERENCE = re.compile(r"\\(\d{1,2})|\\g<(\w+)>")


def _expand(reply: str, match: re.Match[str]) -> str:
    """`reply` with \\1 or \\g<name> replaced by the match's groups; every other backslash
    stays as written (a reply is often code, full of regular expressions of its own)."""

    def group(reference: re.Match[str]) -> str:
        number, name = reference.groups()
        try:
            value = match.group(int(number) if number else name)
        except IndexError:  # no such group: the text stays as written
            return reference.group()
        return value or ""

    return _GROUP_REFERENCE.sub(group, reply)


class _Script(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rule: list[ScriptRule] = Field(min_length=1)


class ScriptedProvider:
    """Replies from rules; records every conversation it was sent in `conversations`."""

    def __init__(self, rules: Sequence[ScriptRule | dict[str, Any]], name: str = "scripted"):
        try:
            self.rules = _Script.model_validate({"rule": list(rules)}).rule
        except ValidationError as exc:
            raise LLMConfigError(f"invalid script: {_first_problem(exc)}") from None
        self.name = name
        self.conversations: list[list[ChatMessage]] = []
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedProvider:
        """Rules from a TOML or JSON file holding a `rule` list."""
        file = Path(path).expanduser()
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise LLMConfigError(f"cannot read the LLM script {file}: {exc}") from None
        try:
            document = json.loads(text) if file.suffix == ".json" else tomllib.loads(text)
        except (ValueError, tomllib.TOMLDecodeError) as exc:
            raise LLMConfigError(f"the LLM script {file} is not valid: {exc}") from None
        if not isinstance(document, dict) or not isinstance(document.get("rule"), list):
            raise LLMConfigError(f"the LLM script {file} has no `rule` list")
        return cls(document["rule"], name=f"scripted:{file.name}")

    def __call__(self, prompt: str) -> str:
        return self.complete([{"role": "user", "content": prompt}]).text

    def complete(self, messages: Sequence[ChatMessage]) -> Completion:
        with self._lock:
            self.conversations.append(list(messages))
        last = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        for rule in self.rules:
            reply = rule.answer(last)
            if reply is not None:
                return Completion(text=reply, model=self.name)
        raise LLMRefusalError(f"the script has no reply for: {last[:80]!r}")


class FunctionProvider:
    """Any callable as the model: fn(messages) -> str | Completion."""

    def __init__(self, function: Callable[[list[ChatMessage]], Any], name: str | None = None):
        if not callable(function):
            raise LLMConfigError(f"{function!r} is not callable")
        self.function = function
        self.name: str = name or str(getattr(function, "__qualname__", "function"))

    def __call__(self, prompt: str) -> str:
        return self.complete([{"role": "user", "content": prompt}]).text

    def complete(self, messages: Sequence[ChatMessage]) -> Completion:
        try:
            value = self.function(list(messages))
        except LLMError:
            raise
        except Exception as exc:
            raise LLMError(f"{self.name} raised {type(exc).__name__}: {exc}") from exc
        if isinstance(value, Completion):
            return value
        if isinstance(value, str):
            return Completion(text=value, model=self.name)
        kind = type(value).__name__
        raise LLMResponseError(f"{self.name} returned {kind}, not str or Completion")


def load_function(spec: str) -> FunctionProvider:
    """ "package.module:function" -> a FunctionProvider calling it."""
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise LLMConfigError(f"expected 'module:function', not {spec!r}")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise LLMConfigError(f"cannot import {module_name!r} for {spec!r}: {exc}") from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise LLMConfigError(f"{module_name!r} has no {attribute!r}") from None
    return FunctionProvider(target, name=spec)


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}"

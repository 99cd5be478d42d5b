"""What cells call that the host answers: display, input, getpass, time.sleep, llm_query,
llm_query_batched, rlm_query, and search_context (answered in the guest).

Runs INSIDE the sandbox's CPython, as the guest module "sandbox_kernel_calls" (a part of the
cell driver, driver.py, whose Driver these methods belong to). Each request from user code is
a safe point for the soft interrupt (DoorClient.call). Under host CPython 3.11 in the unit
tests: no newer syntax.

Must import only the standard library and the driver's earlier parts; never sandbox_kernel.
"""

from __future__ import annotations

import math
import operator
import re
from typing import Any

from sandbox_kernel_bundles import MAX_NESTING, format_bundle, nested_too_deeply, put, to_message
from sandbox_kernel_door import DoorClient
from sandbox_kernel_helpers import haystacks, need_int, need_str
from sandbox_kernel_streams import describe, flush_streams, warn

__all__ = ["HostCalls", "text_of"]

_LONGEST_SLEEP_SECONDS = 9.2e9  # what fits time.sleep's int64 nanoseconds
_NO_CTX = object()


class HostCalls(DoorClient):
    """The helpers bound in builtins (and time.sleep, getpass.getpass) for cells to call.

    The driver sets `main` (the cells' __main__ module, where `context` lives) and `displays`
    (the running cell's, in order).
    """

    main: Any
    displays: list[dict[str, Any]]

    def display(
        self, *objs: Any, raw: bool = False, metadata: dict[str, Any] | None = None
    ) -> None:
        """Show each object below the cell now, as Jupyter's display() does.

        raw=True: each object is already a MIME bundle, {mime type: data}.
        """
        if metadata is not None and not isinstance(metadata, dict):
            raise TypeError(f"display() metadata must be a dict, not {type(metadata).__name__}")
        for obj in objs:
            if not raw:
                data, extra = format_bundle(obj)
            elif isinstance(obj, dict):
                data, extra = {}, {}
                for mime, value in obj.items():
                    put(data, str(mime), value)
            else:
                raise TypeError(
                    f"display(raw=True) takes MIME bundle dicts, not {type(obj).__name__}"
                )
            self._send_display({"data": data, "metadata": {**extra, **(metadata or {})}})

    def _send_display(self, message: dict[str, Any]) -> None:
        """Send a display (as ipykernel's packer converts it: to_message); what has no JSON
        form is a ValueError where it was displayed."""
        message = to_message(message)
        self.call("display", **message)
        self.displays.append(message)

    def _report(self, n: int, reply: dict[str, Any]) -> None:
        """Send the cell's reply. What the host cannot take (a value with no JSON form that
        reached it some other way, a reply past its caps) never stops the driver: the reply
        goes again without its result, displays and payloads, with the reason on stderr, and
        at worst as a bare error."""
        flush_streams()
        try:
            self.request("done", cell=n, reply=reply)
            return
        except Exception as exc:
            reason = describe(exc)
        warn(f"[sandbox] the cell's outputs could not be reported ({reason}): left out")
        flush_streams()
        error = reply.get("error")
        kept: dict[str, Any] = {"status": reply.get("status", "error")}
        if isinstance(error, dict):
            kept["error"] = {
                "ename": text_of(error.get("ename")),
                "evalue": text_of(error.get("evalue")),
                "traceback": [text_of(line) for line in error.get("traceback") or ()],
            }
        try:
            self.request("done", cell=n, reply=kept)
        except Exception as again:
            bare = {"ename": type(again).__name__, "evalue": reason, "traceback": []}
            self.request("done", cell=n, reply={"status": "error", "error": bare})

    def _answer(self, name: str, value: Any, fallback: Any) -> None:
        """A value the host waits for; `fallback` when `value` cannot be sent (or is None)."""
        if value is not None:
            try:
                self.request("value", name=name, found=True, value=value)
                return
            except Exception as exc:
                warn(f"[sandbox] {name.strip('_')} could not be answered: {describe(exc)}")
        self.request("value", name=name, found=True, value=fallback)

    def input(self, prompt: object = "") -> str:
        """Read a line from the user (the notebook's input box), as the builtin input() does."""
        flush_streams()
        return self.call("input", prompt=str(prompt), password=False)

    def getpass(self, prompt: str = "Password: ", stream: object = None) -> str:
        """Read a line from the user without echoing it, as getpass.getpass() does."""
        flush_streams()
        return self.call("input", prompt=str(prompt), password=True)

    def sleep(self, seconds: float) -> None:
        """time.sleep through the host: bounded by the cell's deadline, ended by interrupts."""
        if isinstance(seconds, float):
            value = seconds
        else:
            try:
                value = float(operator.index(seconds))
            except TypeError:
                name = type(seconds).__name__
                raise TypeError(f"'{name}' object cannot be interpreted as an integer") from None
        if math.isnan(value):
            raise ValueError("Invalid value NaN (not a number)")
        if value < 0:
            raise ValueError("sleep length must be non-negative")
        if value > _LONGEST_SLEEP_SECONDS:
            raise OverflowError("sleep length is too large")
        if value == 0:  # a yield, nothing to wait for: spare the host a request
            self.check_interrupt()
            return
        flush_streams()  # what the cell printed shows while it waits, as ipykernel's flusher
        self.call("sleep", seconds=value)

    def llm_query(self, prompt: str) -> str:
        """Ask the session's language model one question; its answer."""
        need_str("llm_query", "prompt", prompt)
        return self.call("llm_query", prompt=prompt)

    def llm_query_batched(self, prompts: list[str]) -> list[str]:
        """Ask the language model several independent questions at once; answers in order."""
        if not isinstance(prompts, list | tuple):
            raise TypeError(
                f"llm_query_batched() takes a list of str, not {type(prompts).__name__}"
            )
        for i, prompt in enumerate(prompts):
            need_str("llm_query_batched", f"prompts[{i}]", prompt)
        if not prompts:
            return []
        return self.call("llm_query_batched", prompts=list(prompts))

    def rlm_query(self, task: str, ctx: Any = _NO_CTX) -> str:
        """Hand `task` (and, optionally, a JSON-able `ctx`) to a recursive language-model run."""
        need_str("rlm_query", "task", task)
        if ctx is _NO_CTX:
            return self.call("rlm_query", task=task, has_ctx=False, ctx=None)
        if nested_too_deeply(ctx):
            raise ValueError(f"rlm_query() ctx is nested deeper than {MAX_NESTING} levels")
        return self.call("rlm_query", task=task, has_ctx=True, ctx=ctx)

    def search_context(
        self,
        pattern: str,
        window: int = 200,
        *,
        ignore_case: bool = True,
        max_matches: int = 100,
        text: Any = None,
    ) -> list[dict[str, Any]]:
        """Find a regular expression in `text` (default: `context`), with text around each match.

        Each match is {"start", "end", "match", "text"}: offsets of the match and the text from
        `window` characters before it to `window` after. Patterns use re.MULTILINE, and
        re.IGNORECASE unless ignore_case=False. A str is searched as is; a list of str element by
        element (matches then carry the element's "index"); bytes as UTF-8 (bad bytes replaced);
        anything else, such as a dict, as its JSON text.
        """
        need_str("search_context", "pattern", pattern)
        for name, number in (("window", window), ("max_matches", max_matches)):
            need_int("search_context", name, number)
            if number < 0:
                raise ValueError(f"search_context() {name} must be >= 0, not {number}")
        flags = re.MULTILINE | (re.IGNORECASE if ignore_case else 0)
        try:
            regex = re.compile(pattern, flags)
        except re.error as exc:
            raise ValueError(
                f"search_context(): bad regular expression {pattern!r}: {exc}"
            ) from exc
        source = getattr(self.main, "context", None) if text is None else text
        if source is None:
            raise ValueError("search_context(): there is no context; pass text=...")
        found: list[dict[str, Any]] = []
        for index, haystack in haystacks(source):
            for match in regex.finditer(haystack):
                if len(found) >= max_matches:
                    return found
                start, end = match.span()
                hit = {"start": start, "end": end, "match": match.group()}
                hit["text"] = haystack[max(0, start - window) : end + window]
                if index is not None:
                    hit["index"] = index
                found.append(hit)
        return found


def text_of(value: object) -> str:
    """`value` as str for a reply (a str subclass or an object with a failing __str__ too)."""
    if type(value) is str:
        return value
    try:
        return str.__str__(value) if isinstance(value, str) else str(value)
    except BaseException as exc:
        return f"<unprintable {type(value).__name__}: {describe(exc)}>"

"""A cell's code as the driver runs it: the soft interrupt's check put into every loop, the
last expression told from a statement, and tracebacks cut to the user's own frames.

Runs INSIDE the sandbox (module sandbox_kernel_cells, loaded before the driver); the shell
(shell.py) uses `chain` and `user_frames` for IPython's tracebacks.

Must import only the standard library; never imports sandbox_kernel.
"""

from __future__ import annotations

import ast
import io
import linecache
import os
import tokenize
import traceback
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "DRIVER_NAME",
    "FLAG_NAME",
    "LoopChecks",
    "chain",
    "ends_with_semicolon",
    "forget_turns",
    "is_cell",
    "prune",
    "user_frames",
]

DRIVER_NAME = "__sandbox_kernel__"  # protocol.DRIVER_NAME
FLAG_NAME = "__sandbox_kernel_flag__"
# The sandbox's own frames, cut from user tracebacks: its guest modules as the host compiles
# them (repl/guest_sources.py), and under host CPython (the unit tests) the files of this folder.
_OWN_PREFIX = "<sandbox-kernel "
_HERE = os.path.dirname(globals().get("__file__") or "")

_CHECK_SOURCE = f"if {FLAG_NAME}[0]: {DRIVER_NAME}.interrupted()"
# Tokens that can follow a cell's last statement without being part of it.
_TRIVIA = {tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT}


class LoopChecks(ast.NodeTransformer):
    """Puts a soft-interrupt check first in the body of every loop of a cell."""

    def _check(self, node: ast.For | ast.AsyncFor | ast.While) -> ast.AST:
        self.generic_visit(node)
        check = ast.parse(_CHECK_SOURCE).body[0]
        for part in ast.walk(check):  # the loop's own first line, so tracebacks name user lines
            ast.copy_location(part, node.body[0])
        node.body.insert(0, check)
        return node

    visit_For = visit_AsyncFor = visit_While = _check


def ends_with_semicolon(lines: list[str], node: ast.stmt) -> bool:
    """Whether a ';' follows the cell's last statement (IPython's "do not show the value")."""
    end_line = node.end_lineno or node.lineno
    tail = lines[end_line - 1].encode("utf-8")[node.end_col_offset :].decode("utf-8")
    rest = tail + "".join(lines[end_line:])  # only ';', comments and blank lines remain
    last = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(rest).readline):
            if token.type not in _TRIVIA and token.type != tokenize.ENDMARKER:
                last = token
    except (tokenize.TokenError, SyntaxError):
        return False
    return last is not None and last.string == ";"


def prune(report: traceback.TracebackException) -> None:
    """Keep the user's frames: from the first cell frame on (none if there is no cell frame),
    minus the sandbox's own frames and what they called (user_frames)."""
    for item in chain(report):
        frames = list(item.stack)
        first = next((i for i, f in enumerate(frames) if is_cell(f.filename)), len(frames))
        frames = frames[first:]
        keep = user_frames([frame.filename for frame in frames], is_cell)
        item.stack[:] = [frame for frame, kept in zip(frames, keep, strict=True) if kept]


def chain(first: Any) -> Iterator[Any]:
    """`first` and what is chained to it (__cause__, __context__, an exception group's
    members), each once: exceptions, or the reports traceback.TracebackException makes."""
    pending: list[Any] = [first]
    seen: set[int] = set()
    while pending:
        item = pending.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        pending += [item.__cause__, item.__context__, *(getattr(item, "exceptions", None) or ())]


def user_frames(filenames: list[str], is_cell: Callable[[str], bool]) -> list[bool]:
    """Which frames of a traceback (their files, outermost first) are the user's: not the
    sandbox's own (its guest modules), nor what they called (json, ...) until code of a cell
    runs again. A helper the user called (display, llm_query, time.sleep) then ends the
    traceback as a built-in function would."""
    kept, inside = [], False
    for name in filenames:
        if name.startswith(_OWN_PREFIX) or (_HERE and os.path.dirname(name) == _HERE):
            inside = True
        elif is_cell(name):
            inside = False
        kept.append(not inside)
    return kept


def is_cell(filename: str) -> bool:
    return filename.startswith("<cell-")


def forget_turns() -> None:
    """Drop the sources the reactor keeps for its turns' tracebacks (`<turn N>` in
    linecache._interactive_cache): user tracebacks are cut to the cells' frames, so they were
    only a copy of every cell's text, kept for the session's life."""
    cache = vars(linecache).get("_interactive_cache")
    if type(cache) is not dict:  # a Python without it, or a cell's replacement (repaired later)
        return
    for key in [k for k in cache if type(k) is tuple and k and type(k[0]) is str]:
        if key[0].startswith("<turn "):
            del cache[key]

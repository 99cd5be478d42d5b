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
import sys
import tokenize
import traceback
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "CELL_TURN",
    "DRIVER_NAME",
    "FLAG_NAME",
    "LoopChecks",
    "chain",
    "ends_with_semicolon",
    "forget_turns",
    "is_cell",
    "prune",
    "turn_runner",
    "user_frames",
]

DRIVER_NAME = "__sandbox_kernel__"  # protocol.DRIVER_NAME
FLAG_NAME = "__sandbox_kernel_flag__"
# The host's turn for a cell, around its number, its source's hex digits and the hash that
# names its file: protocol.CELL_TURN.
CELL_TURN = (
    f"{DRIVER_NAME}.run_cell(",
    ", bytes.fromhex('",
    "').decode('utf-8', 'surrogatepass'), ",
    ")",
)
# The sandbox's own frames, cut from user tracebacks: its guest modules as the host compiles
# them (repl/guest_sources.py), and under host CPython (the unit tests) the files of this folder.
_OWN_PREFIX = "<sandbox-kernel "
_HERE = os.path.dirname(globals().get("__file__") or "")

# Tokens that can follow a cell's last statement without being part of it.
_TRIVIA = {tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT}


class LoopChecks:
    """Puts a soft-interrupt check first in the body of every loop of a cell:
    `if __sandbox_kernel_flag__[0]: __sandbox_kernel__.interrupted()`, placed at the loop's
    first statement so that a traceback names the user's own line.

    Loops are statements, and statements live only in other statements' bodies, so the walk
    visits statements and never an expression. As an ast.NodeTransformer (every node, in
    Python) with each check parsed from source it cost a 25-line cell a third of its turn."""

    def visit(self, tree: ast.AST) -> ast.AST:
        """`tree` (a Module or Interactive) with the checks added, in place."""
        self._statements(getattr(tree, "body", None))
        return tree

    def _statements(self, statements: object) -> None:
        if type(statements) is not list:  # an Expression's body, or a transformer's oddity
            return
        for statement in statements:
            for field in ("body", "orelse", "finalbody"):
                self._statements(getattr(statement, field, None))
            for part in (*getattr(statement, "handlers", ()), *getattr(statement, "cases", ())):
                self._statements(getattr(part, "body", None))
            if isinstance(statement, ast.For | ast.AsyncFor | ast.While) and statement.body:
                statement.body.insert(0, _check(statement.body[0]))


def _check(at: ast.stmt) -> ast.If:
    """The check, every node at `at`'s place."""
    where = {
        "lineno": getattr(at, "lineno", 1),
        "col_offset": getattr(at, "col_offset", 0),
        "end_lineno": getattr(at, "end_lineno", None),
        "end_col_offset": getattr(at, "end_col_offset", None),
    }
    flag = ast.Subscript(
        value=ast.Name(id=FLAG_NAME, ctx=ast.Load(), **where),
        slice=ast.Constant(value=0, **where),
        ctx=ast.Load(),
        **where,
    )
    method = ast.Attribute(
        value=ast.Name(id=DRIVER_NAME, ctx=ast.Load(), **where),
        attr="interrupted",
        ctx=ast.Load(),
        **where,
    )
    call = ast.Expr(value=ast.Call(func=method, args=[], keywords=[], **where), **where)
    return ast.If(test=flag, body=[call], orelse=[], **where)


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


def turn_runner(
    reactor_run_turn: Callable[[str, str], None], namespace: dict[str, Any]
) -> Callable[[str, str], None]:
    """The reactor's `_run_turn(text, name)` for the host's turns, which are each one call
    (`__sandbox_kernel__.complete('pri', 3)`): a cell's (CELL_TURN) taken apart and called
    without a compile, any other compiled once as an expression, evaluated in `namespace`
    (__main__'s) and shown as the reactor shows a last expression. The reactor's own way
    (ast.parse, a compile of the statements, another of the last expression, both kept in
    linecache) was 11% of a trivial cell's guest instructions, the one compile 8%; any other
    text is still run by it."""

    def run_turn(text: str, name: str) -> None:
        cell = _cell_of(text)
        if cell is not None and DRIVER_NAME in namespace:
            namespace[DRIVER_NAME].run_cell(*cell)
            return
        try:
            code = compile(text, name, "eval", dont_inherit=True)
        except SyntaxError:  # statements: the reactor's own way
            reactor_run_turn(text, name)
            return
        sys.displayhook(eval(code, namespace))

    return run_turn


def _cell_of(text: str) -> tuple[int, str, int] | None:
    """The number, the source and the file's hash of a cell's turn; None for any other text
    (evaluated as it is, which for a malformed cell turn raises what Python would)."""
    head, middle, tail, end = CELL_TURN
    if not (text.startswith(head) and text.endswith(end)):
        return None
    number, found, rest = text[len(head) : -len(end)].partition(middle)
    digits, found_tail, hashed = rest.partition(tail)
    if not (found and found_tail and _is_count(number) and _is_count(hashed)):
        return None
    try:
        return int(number), bytes.fromhex(digits).decode("utf-8", "surrogatepass"), int(hashed)
    except ValueError:  # not hex digits, or not UTF-8: the expression says which
        return None


def _is_count(text: str) -> bool:
    return text.isascii() and text.isdigit()


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

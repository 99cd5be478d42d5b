"""Completion and inspection, computed inside the guest where the session's objects live.

Loaded into the guest as the module "sandbox_kernel_introspect" before the driver; the driver's
`complete` and `inspect` methods call these and send the answers to the host. Only the standard
library is imported. Runs under host CPython too, for unit tests.
"""

from __future__ import annotations

import builtins
import contextlib
import inspect as _inspect
import keyword
import os
import pkgutil
import re
import sys
from typing import Any

__all__ = ["complete", "inspect_object", "token_at"]

_NAME_CHARS = re.compile(r"[A-Za-z0-9_.]*$")
_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]*)\s+import\s+(\w*)|import\s+([\w.]*))$")
_PATH_IN_STRING = re.compile(r"""(['"])(/[^'"]*)$""")
_MAX_MATCHES = 500


def complete(namespace: dict[str, Any], code: str, cursor_pos: int) -> dict[str, Any]:
    """Jupyter's complete_reply content (matches, cursor_start, cursor_end, metadata)."""
    line_start = code.rfind("\n", 0, cursor_pos) + 1
    line = code[line_start:cursor_pos]
    path = _PATH_IN_STRING.search(line)
    if path:
        typed = path.group(2)
        return _reply(_paths(typed), cursor_pos - len(typed), cursor_pos)
    imported = _IMPORT.match(line)
    if imported:
        return _complete_import(imported, cursor_pos)
    token = _NAME_CHARS.search(line)
    text = token.group(0) if token else ""
    return _reply(_names(namespace, text), cursor_pos - len(text), cursor_pos)


def _reply(matches: list[str], start: int, end: int) -> dict[str, Any]:
    return {
        "matches": matches[:_MAX_MATCHES],
        "cursor_start": start,
        "cursor_end": end,
        "metadata": {},
        "status": "ok",
    }


def _names(namespace: dict[str, Any], text: str) -> list[str]:
    if "." in text:
        head, _, tail = text.rpartition(".")
        try:
            obj = eval(head, dict(namespace))  # only a dotted name: see _NAME_CHARS
        except Exception:
            return []
        names = [n for n in dir(obj) if n.startswith(tail)]
        if not tail.startswith("_"):
            names = [n for n in names if not n.startswith("_")]
        return sorted(f"{head}.{n}" for n in names)
    pool = set(namespace) | set(dir(builtins)) | set(keyword.kwlist)
    return sorted(n for n in pool if n.startswith(text) and not n.startswith("__sandbox"))


def _complete_import(found: re.Match[str], cursor_pos: int) -> dict[str, Any]:
    package, member, module = found.group(1), found.group(2), found.group(3)
    if module is not None:
        return _reply(_modules(module), cursor_pos - len(module), cursor_pos)
    try:
        names = dir(__import__(package, fromlist=["*"]))
    except Exception:
        names = []
    matches = sorted(n for n in names if n.startswith(member) and not n.startswith("_"))
    return _reply(matches, cursor_pos - len(member), cursor_pos)


def _modules(prefix: str) -> list[str]:
    if "." in prefix:
        package = prefix.rpartition(".")[0]
        try:
            path = __import__(package, fromlist=["*"]).__path__
        except Exception:
            return []
        found = {f"{package}.{m.name}" for m in pkgutil.iter_modules(path)}
        return sorted(n for n in found if n.startswith(prefix))
    found = {m.name for m in pkgutil.iter_modules()} | set(sys.builtin_module_names)
    return sorted(n for n in found if n.startswith(prefix) and "." not in n)


def _paths(typed: str) -> list[str]:
    folder, _, partial = typed.rpartition("/")
    try:
        entries = os.listdir(folder or "/")
    except OSError:
        if folder:
            return []
        # WASI has no "/" to list: offer the granted folders that exist.
        entries = [d for d in ("app", "data", "tmp") if os.path.isdir(f"/{d}")]
    matches = []
    for entry in sorted(entries):
        if entry.startswith(partial):
            full = f"{folder}/{entry}"
            matches.append(full + "/" if os.path.isdir(full) else full)
    return matches


def token_at(code: str, cursor_pos: int) -> str:
    """The dotted name under or just before the cursor (`df.hea|d` -> `df.head`)."""
    left = re.search(r"[A-Za-z0-9_.]*$", code[:cursor_pos])
    right = re.match(r"[A-Za-z0-9_]*", code[cursor_pos:])
    name = (left.group(0) if left else "") + (right.group(0) if right else "")
    if not name and code[:cursor_pos].rstrip().endswith("("):  # inside a call: the callee
        return token_at(code, len(code[:cursor_pos].rstrip()) - 1)
    return name.strip(".")


def inspect_object(namespace: dict[str, Any], code: str, cursor_pos: int, detail: int) -> dict:
    """Jupyter's inspect_reply content: signature and docstring (detail 1 adds the source)."""
    name = token_at(code, cursor_pos)
    if not name:
        return {"status": "ok", "found": False, "data": {}, "metadata": {}}
    try:
        obj = eval(name, dict(namespace))  # a dotted name only
    except Exception:
        return {"status": "ok", "found": False, "data": {}, "metadata": {}}
    lines = [f"Type:      {type(obj).__name__}"]
    with contextlib.suppress(TypeError, ValueError):  # no signature: builtins, classes
        lines.append(f"Signature: {name}{_inspect.signature(obj)}")
    if not callable(obj) or isinstance(obj, type):
        text = repr(obj)
        lines.append(f"Value:     {text[:500]}")
    doc = _inspect.getdoc(obj)
    if doc:
        lines.append(f"Docstring:\n{doc}")
    if detail >= 1:
        with contextlib.suppress(OSError, TypeError):  # no source: C code, the zip
            lines.append(f"Source:\n{_inspect.getsource(obj)}")
    data = {"text/plain": "\n".join(lines)}
    return {"status": "ok", "found": True, "data": data, "metadata": {}}

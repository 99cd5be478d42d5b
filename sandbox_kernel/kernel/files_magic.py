"""`%files`: what the session wrote beside the notebook, and keeping it (repl/files.py).

    %files                       what the session created, changed and deleted in the
                                 notebook's folder (kind, size, time), compared with yours
    %files --keep NAME ... [--force]
                                 copy those files from the session's layer beside the
                                 notebook (--force: over a file of yours, or a name other
                                 programs run as code or configuration)
    %files --diff NAME           a unified diff of a text file the session changed

Also the one line after a cell that wrote there (`written_line`).

Must not import: ipykernel, kernel.py.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from sandbox_kernel.repl import files as layer_view

if TYPE_CHECKING:
    from sandbox_kernel.repl.sandbox import ReplSandbox

__all__ = ["USAGE", "files_line", "files_magic", "written_line"]

USAGE = "usage: %files | %files --keep NAME... [--force] | %files --diff NAME"


def files_magic(repl: ReplSandbox, args: str) -> str:
    """What `%files ARGS` prints; ValueError for a misuse."""
    words = shlex.split(args)
    force = "--force" in words
    words = [w for w in words if w != "--force"]
    if not words:
        return _listing(repl.files())
    action, names = words[0], words[1:]
    if action == "--keep" and names:
        return "".join(_kept(done) for done in repl.keep_files(names, force=force))
    if action == "--diff" and len(names) == 1:
        return repl.diff_file(names[0]) or f"{names[0]}: no difference\n"
    raise ValueError(USAGE)


def _listing(changes: list[layer_view.FileChange]) -> str:
    if not changes:
        return "the session has not changed the notebook's folder\n"
    rows = [
        f"{c.kind:<8} {c.type:<6} {c.size:>12,}  {c.modified:%Y-%m-%d %H:%M:%S}  {c.path}"
        for c in changes
    ]
    return (
        f"in the session's copy of the folder ({layer_view.LAYER} beside the notebook), "
        "compared with yours:\n" + "\n".join(rows) + f"\n{layer_view.KEEP_HINT} copies one "
        "beside the notebook\n"
    )


def _kept(done: layer_view.KeptFile) -> str:
    if done.kept:
        return f"kept {done.name} ({done.size:,} bytes) beside the notebook\n"
    return f"not kept {done.name}: {done.reason}\n"


def written_line(repl: ReplSandbox) -> str:
    """The line for the cell that just ran ("" when it wrote nothing in the layer)."""
    return layer_view.note(repl.written.news())


def files_line(repl: ReplSandbox) -> list[str]:
    """%sandbox's line about the layer: how many files the session changed there."""
    try:
        changes = repl.files()
    except (layer_view.NoLayer, OSError):
        return []
    return [
        f"notebook folder: {len(changes)} changes in the session's copy "
        f"({layer_view.LAYER}); %files lists them, {layer_view.KEEP_HINT} keeps one"
    ]

"""The files a session wrote into the notebook folder's layer, as the user sees them: the
list (`%files`, ReplSandbox.files), keeping chosen ones beside the notebook (`--keep`), a
diff, and the one line a cell's output gets when it wrote there (host/layer_files.py does
the file work; overlay.py says what the layer is).

Must not import: anything Jupyter.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from sandbox_kernel.core.errors import SandboxError
from sandbox_kernel.host import layer_files
from sandbox_kernel.host.overlay import Overlay

__all__ = [
    "KEEP_HINT",
    "FileChange",
    "KeptFile",
    "NoLayer",
    "WrittenSince",
    "changed_files",
    "diff_file",
    "keep_files",
    "note",
    "remove_if_empty",
]

NAMED = 3  # names the line spells out before "and N more"
LAYER = ".sandbox-kernel/layer/"  # where the session's files are, beside the notebook
KEEP_HINT = "%files --keep NAME"


class FileChange(BaseModel):
    """One file or folder the session created, changed or deleted, compared with yours."""

    model_config = ConfigDict(frozen=True)

    path: str  # relative to the notebook's folder
    kind: Literal["new", "changed", "deleted"]
    type: Literal["file", "folder", "link", "other"]
    size: int
    modified: datetime.datetime


class KeptFile(BaseModel):
    """What `keep_files` did with one name: copied (bytes) or refused (why)."""

    model_config = ConfigDict(frozen=True)

    name: str
    kept: bool
    size: int = 0
    reason: str = ""


class NoLayer(SandboxError, ValueError):
    """The session has no layer: the notebook's folder is not shown as an overlay."""


def _fds(overlay: Overlay | None) -> tuple[int, int]:
    if overlay is None or overlay.fds is None or overlay.read_only:
        raise NoLayer(
            "this session shows the notebook's folder without a layer (SANDBOX_KERNEL_"
            "NOTEBOOK_FOLDER is not overlay): what it writes goes to /app, the workspace"
        )
    real, _, layer = overlay.fds
    return real, layer


# What was kept, by path: an entry whose layer file and user's copy are still the ones kept
# is the same on both sides, so no longer listed.
KeptMemory = dict[str, layer_files.Kept]


def changed_files(overlay: Overlay | None, kept: KeptMemory | None = None) -> list[FileChange]:
    """What differs between the layer and the user's folder, sorted by path."""
    real, layer = _fds(overlay)
    assert overlay is not None
    entries = layer_files.changes(real, layer, overlay.state.record)
    memory = kept or {}
    return [
        FileChange(
            path=entry.path,
            kind=entry.kind,
            type=entry.type,
            size=entry.size,
            modified=datetime.datetime.fromtimestamp(entry.mtime_ns / 1e9, datetime.UTC),
        )
        for entry in entries
        if not _still_kept(entry, memory.get(entry.path))
    ]


def _still_kept(entry: layer_files.Entry, kept: layer_files.Kept | None) -> bool:
    return kept is not None and entry.ours == kept.ours and entry.theirs == kept.theirs


def keep_files(
    overlay: Overlay | None,
    names: Iterable[str],
    force: bool = False,
    kept: KeptMemory | None = None,
) -> list[KeptFile]:
    """Copy each of `names` from the layer into the user's folder (layer_files.keep),
    remembering in `kept` what was copied."""
    real, layer = _fds(overlay)
    done = []
    for name in names:
        try:
            made = layer_files.keep(real, layer, name, force)
        except layer_files.KeepRefused as exc:
            done.append(KeptFile(name=name, kept=False, reason=str(exc)))
        except OSError as exc:
            done.append(KeptFile(name=name, kept=False, reason=exc.strerror or str(exc)))
        else:
            if kept is not None:
                kept[name] = made
            done.append(KeptFile(name=name, kept=True, size=made.size))
    return done


def diff_file(overlay: Overlay | None, name: str) -> str:
    """A unified diff from the user's `name` to the session's (capped); ValueError when it
    is not a text file."""
    real, layer = _fds(overlay)
    return layer_files.diff(real, layer, name)


def note(news: list[FileChange]) -> str:
    """The one line for a cell that wrote `news` ("" when it wrote nothing)."""
    # A folder is named only for itself (made or removed empty), not for the files in it
    paths = [change.path for change in news]
    news = [
        change
        for change in news
        if change.type != "folder" or not any(p.startswith(change.path + "/") for p in paths)
    ]
    if not news:
        return ""
    shown = ", ".join(_named(change) for change in news[:NAMED])
    more = f" and {len(news) - NAMED} more" if len(news) > NAMED else ""
    return (
        f"[sandbox] this cell wrote {shown}{more} in the session's copy of the folder "
        f"({LAYER} beside the notebook), not in yours: {KEEP_HINT} keeps one; %files lists "
        "them\n"
    )


def _named(change: FileChange) -> str:
    suffix = "/" if change.type == "folder" else ""
    label = {"new": "", "changed": " (changed)", "deleted": " (deleted)"}[change.kind]
    return f"{change.path}{suffix}{label}"


def remove_if_empty(folder: Path) -> None:
    """Remove the workspace folder a session made if the guest never wrote to it (an empty
    folder only: rmdir fails on anything else, and never follows a link)."""
    with contextlib.suppress(OSError):
        folder.rmdir()


class WrittenSince:
    """The layer's differences as of the last look, to tell what a cell changed."""

    def __init__(self, overlay: Overlay | None) -> None:
        self.overlay = overlay if overlay is not None and not overlay.read_only else None
        self.kept: KeptMemory = {}
        self.seen = self._look()

    def _look(self) -> dict[str, FileChange]:
        if self.overlay is None or self.overlay.fds is None:
            return {}
        try:
            return {change.path: change for change in changed_files(self.overlay, self.kept)}
        except OSError:
            return {}

    def news(self) -> list[FileChange]:
        """What changed since the last look: new entries, or ones with another size, time or
        kind (a file the cell removed that was its own is not news)."""
        now = self._look()
        news = [change for path, change in now.items() if self.seen.get(path) != change]
        self.seen = now
        return news

"""What a frontend of the REPL (the kernel) may know of the layers below it: the guest's Python
version, whether a first session must fetch or compile the guest, and the workspace's files
before and after a cell. The kernel knows only the REPL; this module is its one window onto
host/, so that window stays small and in one place.

Must not import: wasmtime at module level (the kernel answers kernel_info before it loads
wasmtime), anything Jupyter.
"""

from __future__ import annotations

from pathlib import Path

from sandbox_kernel.host import GUEST_PYTHON
from sandbox_kernel.host.workspace import Snapshot, diff, snapshot

__all__ = ["GUEST_PYTHON", "Snapshot", "files_changed", "list_files", "preparing_notice"]

# The run log's per-cell listing looks at this many entries at most (a cell could make hundreds
# of thousands of folders; listing them twice per cell would cost seconds).
LISTING_LIMIT = 10_000


def list_files(workspace: Path) -> Snapshot:
    """The workspace's files (links not followed), at most LISTING_LIMIT entries looked at."""
    return snapshot(workspace, limit=LISTING_LIMIT)


def files_changed(before: Snapshot, after: Snapshot) -> tuple[list[str], list[str]]:
    """(created, modified) relative paths, sorted."""
    return diff(before, after)


def preparing_notice() -> str | None:
    """What a first session will do before it can run a cell, when that takes a while (the
    guest fetched from the package index, or compiled for this machine); None when it is
    ready. Only a cold cache is announced: a notice that comes and goes would make notebook
    outputs differ from run to run. Nothing is fetched here."""
    from sandbox_kernel.host.artifacts import PYTHON_PINS, python_artifacts_source
    from sandbox_kernel.host.engine import get_engine

    if python_artifacts_source()[1] is None:
        return (
            "[sandbox] fetching the Python guest from the package index (about 100 MB) and "
            "compiling it for this machine (a minute or two, once; `sandbox-kernel warm` "
            "does it ahead of time)...\n"
        )
    if get_engine().cached_path(PYTHON_PINS["python-snapshot.wasm"]).is_file():
        return None
    return (
        "[sandbox] compiling the Python guest for this machine (about a minute, once; "
        "`sandbox-kernel warm` does it ahead of time)...\n"
    )

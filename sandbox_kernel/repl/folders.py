"""The folders a session's guest sees, and the one it works in.

    /app        the workspace, read-write (REPLConfig.workspace, else the policy's mount_host_dir)
    /data       the policy's mount_data_dir, read-only, when it names one
    /tmp        a private scratch folder, read-write, removed with the session
    GUEST_PATH  the guest library (IPython and its dependencies), read-only, with IPython
    /notebook   REPLConfig.notebook_dir's layer (host/overlay.py), the working folder:
                read-write with notebook_overlay (copy-on-write), else read-only; the folder
                itself, read-only, when no layer can be made there

Must not import: anything Jupyter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sandbox_kernel.core.errors import SandboxExecutionError
from sandbox_kernel.host.guest_library import GUEST_PATH, guest_library
from sandbox_kernel.host.overlay import Overlay, OverlayRefused, prepare_overlay
from sandbox_kernel.host.wasi_config import Preopen
from sandbox_kernel.repl.guest_sources import NOTEBOOK_PATH
from sandbox_kernel.repl.models import REPLConfig

__all__ = ["Folders", "session_folders"]


@dataclass
class Folders:
    """What a session's guest sees: its preopened folders, its working folder (None: the
    workspace), the notebook folder's overlay when it is one, and what to tell the user
    about them (the overlay refused, files left out)."""

    preopens: list[Preopen]
    workdir: str | None = None
    overlay: Overlay | None = None
    notes: list[str] = field(default_factory=list)


def session_folders(config: REPLConfig, workspace: Path, scratch: Path) -> Folders:
    """The session's folders (see Folders)."""
    policy = config.policy
    preopens = [Preopen(workspace, policy.guest_mount_path, writable=True)]
    if policy.mount_data_dir is not None:
        data = Path(policy.mount_data_dir).resolve()
        preopens.append(Preopen(data, policy.guest_data_path, writable=False))
    preopens.append(Preopen(scratch, "/tmp", writable=True))
    if config.ipython:
        preopens.append(Preopen(guest_library(), GUEST_PATH, writable=False))
    folders = Folders(preopens)
    if config.notebook_dir is None:
        return folders
    notebook = Path(config.notebook_dir).expanduser().resolve()
    if not notebook.is_dir():
        raise SandboxExecutionError(f"notebook_dir {notebook} is not a folder")
    # Read-only too, the guest sees the layer (read-only): the same files, without the hidden,
    # secret and runtime files or names its WASI cannot carry (host/overlay_sync.py).
    writable = config.notebook_overlay
    try:
        folders.overlay = prepare_overlay(
            notebook, exclude=(workspace, scratch), read_only=not writable
        )
    except OverlayRefused as exc:
        if exc.never_shown:
            folders.notes.append(f"the notebook's folder is not shown: {exc}")
            return folders
        folders.notes.append(f"the notebook's folder is shown read-only, whole: {exc}")
    else:
        folders.notes.extend(folders.overlay.notes)
        preopens.append(Preopen(folders.overlay.layer, NOTEBOOK_PATH, writable=writable))
        folders.workdir = NOTEBOOK_PATH
        return folders
    preopens.append(Preopen(notebook, NOTEBOOK_PATH, writable=False))
    folders.workdir = NOTEBOOK_PATH
    return folders

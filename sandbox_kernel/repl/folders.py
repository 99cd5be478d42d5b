"""The folders a session's guest sees, and the one it works in.

    /app        the workspace, read-write (REPLConfig.workspace, else the policy's mount_host_dir)
    /data       the policy's mount_data_dir, read-only, when it names one
    /tmp        a private scratch folder, read-write, removed with the session
    GUEST_PATH  the guest library (IPython and its dependencies), read-only, with IPython
    /notebook   REPLConfig.notebook_dir, read-only, and then the working folder

Must not import: anything Jupyter.
"""

from __future__ import annotations

from pathlib import Path

from sandbox_kernel.core.errors import SandboxExecutionError
from sandbox_kernel.host.guest_library import GUEST_PATH, guest_library
from sandbox_kernel.host.wasi_config import Preopen
from sandbox_kernel.repl.guest_sources import NOTEBOOK_PATH
from sandbox_kernel.repl.models import REPLConfig

__all__ = ["session_folders"]


def session_folders(
    config: REPLConfig, workspace: Path, scratch: Path
) -> tuple[list[Preopen], str | None]:
    """The session's preopened folders, and its working folder (None: the workspace)."""
    policy = config.policy
    preopens = [Preopen(workspace, policy.guest_mount_path, writable=True)]
    if policy.mount_data_dir is not None:
        data = Path(policy.mount_data_dir).resolve()
        preopens.append(Preopen(data, policy.guest_data_path, writable=False))
    preopens.append(Preopen(scratch, "/tmp", writable=True))
    if config.ipython:
        preopens.append(Preopen(guest_library(), GUEST_PATH, writable=False))
    if config.notebook_dir is None:
        return preopens, None
    notebook = Path(config.notebook_dir).expanduser().resolve()
    if not notebook.is_dir():
        raise SandboxExecutionError(f"notebook_dir {notebook} is not a folder")
    preopens.append(Preopen(notebook, NOTEBOOK_PATH, writable=False))
    return preopens, NOTEBOOK_PATH

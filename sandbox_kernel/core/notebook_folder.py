"""Where the notebook folder's copy-on-write overlay keeps its files (host/overlay.py fills
them), named here so that the kernel's settings can refuse configuration from there without
loading the sandbox.

Must not import: anything outside the standard library.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

__all__ = ["STATE_FOLDER", "layer_of"]

STATE_FOLDER: Final = ".sandbox-kernel"


def layer_of(notebook: Path) -> Path:
    """The folder the guest sees as the notebook folder `notebook` (its writes land there)."""
    return notebook.expanduser().resolve() / STATE_FOLDER / "layer"

"""Install the `sandbox-python` kernel spec: `sandbox-kernel install [--user|--sys-prefix|
--prefix P] [--name N]`.

The spec is spec/kernel.json (package data, beside this module) with its argv pointed at this
Python, plus the logos. Its guarded twin, `sandbox-python-guarded` (NAME-guarded), is
installed beside it: the same kernel with SANDBOX_KERNEL_GUARDED=1, which checks each cell
with the AST policy first.

Must not import: ipykernel (jupyter_client's KernelSpecManager is enough).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from jupyter_client.kernelspec import KernelSpecManager

from sandbox_kernel.kernel import KERNEL_NAME

__all__ = ["GUARDED_SUFFIX", "install_kernel_spec", "kernel_spec"]

GUARDED_SUFFIX = "-guarded"

_SPEC_DIR = Path(__file__).resolve().with_name("spec")  # package data: in the wheel too


def kernel_spec(name: str = KERNEL_NAME, *, guarded: bool = False) -> dict[str, object]:
    """kernel.json's content for this interpreter (`guarded`: the guarded twin's)."""
    spec: dict[str, object] = json.loads((_SPEC_DIR / "kernel.json").read_text())
    spec["argv"] = [sys.executable, "-m", "sandbox_kernel", "-f", "{connection_file}"]
    if name != KERNEL_NAME:
        spec["display_name"] = f"{spec['display_name']} [{name}]"
    if guarded:
        spec["display_name"] = f"{spec['display_name']} [guarded]"
        env = spec.get("env")
        spec["env"] = {**(env if isinstance(env, dict) else {}), "SANDBOX_KERNEL_GUARDED": "1"}
    return spec


def install_kernel_spec(
    *,
    user: bool = False,
    prefix: str | None = None,
    sys_prefix: bool = False,
    name: str = KERNEL_NAME,
) -> Path:
    """Install the spec and its guarded twin; the folder the spec went to."""
    if sys_prefix:
        prefix = sys.prefix
    target = _install(name, kernel_spec(name), user, prefix)
    _install(name + GUARDED_SUFFIX, kernel_spec(name, guarded=True), user, prefix)
    return target


def _install(name: str, spec: dict[str, object], user: bool, prefix: str | None) -> Path:
    with tempfile.TemporaryDirectory() as folder:
        staging = Path(folder)
        (staging / "kernel.json").write_text(json.dumps(spec, indent=2))
        for logo in ("logo-32x32.png", "logo-64x64.png"):
            shutil.copy(_SPEC_DIR / logo, staging / logo)
        target = KernelSpecManager().install_kernel_spec(
            str(staging), kernel_name=name, user=user, prefix=prefix
        )
    return Path(target)

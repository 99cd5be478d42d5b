"""The kernel's start: its first reply does not wait for its settings, and settings that do not
load are named by every cell of a kernel that stays up, instead of a kernel that dies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.kernel.conftest import start_kernel

# What the kernel's first reply must not wait for: pydantic's models (the policy, the results),
# the sanitizers and wasmtime are imported on the start thread, after that reply.
LOADED_LATER = ("pydantic", "nh3", "wasmtime", "sandbox_kernel.core.policy")


def test_the_kernel_class_is_imported_without_its_settings_modules() -> None:
    probe = (
        "import sys\n"
        "import sandbox_kernel.kernel.app, sandbox_kernel.kernel.kernel\n"
        f"print([name for name in {LOADED_LATER!r} if name in sys.modules])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_a_policy_file_that_does_not_load_is_named_by_every_cell(tmp_path: Path) -> None:
    kernel = start_kernel(tmp_path / "notebook", policy="fuel_budget = 'lots'\n")
    try:
        for code in ("1 + 1", "%sandbox"):  # the kernel stays up and says why, every time
            refused = kernel.run(code)
            assert refused.status == "error", refused.describe()
            evalue = refused.reply["evalue"]
            assert "the sandbox could not start: PolicyValidationError" in evalue
            assert "policy.toml: fuel_budget" in evalue
        assert kernel.km.is_alive()
        completion = kernel.kc.complete("pri", 3, reply=True, timeout=60)["content"]
        assert completion["status"] == "ok" and completion["matches"] == []
        assert kernel.shutdown_by_request()[0] == 0  # and it leaves when asked
    finally:
        kernel.shutdown()

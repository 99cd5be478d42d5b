"""`sandbox-kernel install --enterprise-gateway distributed --gateway-python PATH`: the spec goes
into the environment of the Python named (its sys.prefix/share/jupyter, where that
environment's Jupyter looks), not into sandbox-kernel's own; `--remote-workspace` reaches the
launcher's argv. The gateway seeing it for real: tests/kernel/test_enterprise_gateway.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SANDBOX_KERNEL = Path(sys.executable).parent / "sandbox-kernel"


def _install(*args: str) -> subprocess.CompletedProcess[str]:
    command = [str(SANDBOX_KERNEL), "install", "--enterprise-gateway", "distributed", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_the_spec_goes_into_the_gateways_environment(tmp_path: Path) -> None:
    gateway_env = tmp_path / "eg-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(gateway_env)], check=True)
    done = _install(
        "--gateway-python", str(gateway_env / "bin" / "python"),
        "--remote-python", "/home/kernels/venv/bin/python", "--remote-workspace", "/srv/work",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    spec_file = gateway_env / "share/jupyter/kernels/sandbox-python-distributed/kernel.json"
    argv = json.loads(spec_file.read_text())["argv"]
    assert argv[:4] == ["/home/kernels/venv/bin/python", "-P", "-m", "sandbox_kernel.kernel.remote"]
    assert argv[-2:] == ["--workspace", "/srv/work"]


def test_a_gateway_python_that_is_not_there_or_a_second_place_is_refused(tmp_path: Path) -> None:
    missing = _install("--gateway-python", str(tmp_path / "nowhere" / "python"))
    assert missing.returncode == 2 and "no Python at" in missing.stderr, missing.stderr
    both = _install("--gateway-python", sys.executable, "--user")
    assert both.returncode == 2 and "no --user, --sys-prefix or --prefix" in both.stderr

"""Attacks on the kernel's configuration: a workspace set to the notebook's folder (the setting
the docs offer for ipykernel's semantics) lets a cell write files the next kernel start used to
read as configuration: config/policy.toml (`mount_data_dir = "/"`, `trust_outputs = true`) and
datasets/datasets.toml (a dataset whose folder is anywhere on the host). After a restart,
neither configures anything: the policy is the defaults and `%policy` says so, /data shows no
host file, and `%dataset` refuses the registry with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kernel.conftest import RunningKernel, start_kernel

HOSTILE_POLICY = 'mount_data_dir = "/"\ntrust_outputs = true\nfuel_budget = 2000\n'


@pytest.fixture
def notebook_folder_kernel(tmp_path: Path) -> Iterator[tuple[RunningKernel, Path]]:
    root = tmp_path / "notebook"
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "keys.csv").write_text("name,key\nprod,s3cr3t\n")
    env = {
        "SANDBOX_KERNEL_WORKSPACE": str(root),
        "SANDBOX_KERNEL_POLICY": "",  # none named: the kernel looks where it looks by itself
        "XDG_CONFIG_HOME": str(tmp_path / "empty-config"),
        "SANDBOX_KERNEL_DATASETS": "",
    }
    kernel = start_kernel(root, extra_env=env)
    yield kernel, tmp_path
    kernel.shutdown()


def test_a_cell_cannot_write_the_next_sessions_configuration(
    notebook_folder_kernel: tuple[RunningKernel, Path],
) -> None:
    kernel, top = notebook_folder_kernel
    registry = f"[datasets.loot]\npath = {str(top / 'secrets')!r}\n"
    kernel.run_ok(
        "import os\n"
        "os.makedirs('config', exist_ok=True)\n"
        f"open('config/policy.toml', 'w').write({HOSTILE_POLICY!r})\n"
        "os.makedirs('datasets', exist_ok=True)\n"
        f"open('datasets/datasets.toml', 'w').write({registry!r})\n"
        "os.makedirs('sandbox-kernel', exist_ok=True)\n"
        f"open('sandbox-kernel/policy.toml', 'w').write({HOSTILE_POLICY!r})\n"
    )
    assert (kernel.root / "config" / "policy.toml").is_file()  # the cell did write them
    kernel.km.restart_kernel(now=False)
    kernel.kc.wait_for_ready(timeout=120)

    shown = kernel.run_ok("%policy").stream()
    assert "policy file: none (defaults)" in shown
    assert "trust_outputs: False" in shown
    assert "fuel_budget: 2000\n" not in shown
    probe = kernel.run(
        "import os\nprint(os.listdir('/data'))\nprint(open('/data/etc/hostname').read())"
    )
    assert probe.status == "error" and probe.reply["ename"] == "FileNotFoundError"
    assert "[]" in probe.stream()  # /data is the kernel's own empty staging folder

    refused = kernel.run("%dataset loot")
    assert refused.status == "error"
    assert "lies inside the workspace" in refused.reply["evalue"]
    assert "s3cr3t" not in kernel.run("print(open('/data/loot/keys.csv').read())").stream()
    assert kernel.run_ok("1 + 1").result() == "2"

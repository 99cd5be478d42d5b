"""Attacks on the kernel's configuration: a workspace set to the notebook's folder (the setting
the docs offer for ipykernel's semantics) lets a cell write files the next kernel start used to
read as configuration: config/policy.toml (`mount_data_dir = "/"`, `trust_outputs = true`) and
datasets/datasets.toml (a dataset whose folder is anywhere on the host). After a restart,
neither configures anything: the policy is the defaults and `%policy` says so, /data shows no
host file, and `%dataset` never reads a registry beside the notebook.
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
    # The registry the cell wrote beside the notebook is never looked at: the default registry
    # is the user's own (an empty configuration folder here).
    assert "does not exist" in refused.reply["evalue"]
    assert "s3cr3t" not in kernel.run("print(open('/data/loot/keys.csv').read())").stream()
    assert kernel.run_ok("1 + 1").result() == "2"


def test_a_workspace_link_beside_the_notebook_is_refused_not_followed(tmp_path: Path) -> None:
    """A cloned folder ships `workspace -> <somewhere of the user's>` (git keeps links): with no
    SANDBOX_KERNEL_WORKSPACE, the default workspace was that link resolved, and the guest read
    and wrote the folder it named (a site-packages there: a .pth runs at the host's next
    Python start). The kernel refuses it, says why in the cell, and writes nothing there."""
    root, victim = tmp_path / "clone", tmp_path / "victim"
    root.mkdir()
    victim.mkdir()
    (victim / "secret.txt").write_text("the user's\n")
    (root / "workspace").symlink_to(victim)
    env = {"SANDBOX_KERNEL_WORKSPACE": "", "XDG_CONFIG_HOME": str(tmp_path / "empty-config")}
    kernel = start_kernel(root, extra_env=env)
    try:
        execution = kernel.run("open('/app/planted.pth', 'w').write('import os')")
    finally:
        kernel.shutdown()
    assert execution.status == "error", execution.describe()
    assert "is a link to" in execution.error_text(), execution.error_text()
    assert sorted(p.name for p in victim.iterdir()) == ["secret.txt"]


def test_a_dataset_registry_beside_the_notebook_is_never_read(tmp_path: Path) -> None:
    """A cloned folder's datasets/datasets.toml named a host folder of CSVs, and `%dataset`
    showed them at /data: the host read configuration from the notebook's folder. The default
    registry is the user's own (~/.config/sandbox-kernel/datasets.toml)."""
    root, private = tmp_path / "clone", tmp_path / "private"
    (root / "datasets").mkdir(parents=True)
    private.mkdir()
    (private / "bank.csv").write_text("name,balance\nPRIVATE,100\n")
    (root / "datasets" / "datasets.toml").write_text(f'[datasets.x]\npath = "{private}"\n')
    env = {"SANDBOX_KERNEL_DATASETS": "", "XDG_CONFIG_HOME": str(tmp_path / "empty-config")}
    kernel = start_kernel(root, extra_env=env)
    try:
        magic = kernel.run("%dataset x")
        listing = kernel.run("import os\nsorted(os.listdir('/data'))")
    finally:
        kernel.shutdown()
    assert magic.status == "error", magic.describe()
    assert "PRIVATE" not in magic.describe()
    assert "bank" not in listing.describe()

"""sandbox-python on a remote host through Jupyter Enterprise Gateway's distributed process
proxy, for real: Enterprise Gateway (its own venv, .venv-eg) starts the kernel over SSH, with
key authentication, as a separate user (`sandbox-remote`), through Debian's sshd bound to
127.0.0.2, which Enterprise Gateway does not count as its own address, so it does use SSH. The
remote user's kernel runs from its own install (bin/setup-remote-host), with our launcher
(sandbox_kernel/kernel/remote.py) reporting back. A client then runs cells over the gateway's
WebSocket, interrupts and restarts over REST, as with Kernel Gateway.

bin/setup --tests prepares all of it; a missing piece fails the test and names the fix.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.kernel.conftest import processes_mentioning
from tests.kernel.gateway import TOKEN, Gateway, serve_gateway
from tests.processes import free_port, stop

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
REMOTE_USER = os.environ.get("SANDBOX_KERNEL_REMOTE_USER", "sandbox-remote")
REMOTE_ADDRESS = "127.0.0.2"
SPEC = "sandbox-python-distributed"
# Enterprise Gateway refuses kernels for root; a client says whose kernel it asks for.
CLIENT = {"KERNEL_USERNAME": "alice"}
FIX = "run bin/setup --tests (as root, or with sudo): it prepares the remote host"


@dataclass
class RemoteHost:
    """Debian's sshd on REMOTE_ADDRESS, for REMOTE_USER's key only."""

    port: int
    process: subprocess.Popen[bytes]
    log: Path
    python: Path
    client_home: Path  # HOME for Enterprise Gateway: the user's key and the host's known key

    def sshd_log(self) -> str:
        return self.log.read_text(errors="replace")


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip()


def _authorize(user: pwd.struct_passwd, public_key: str) -> None:
    ssh_dir = Path(user.pw_dir) / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    keys = ssh_dir / "authorized_keys"
    keys.write_text(public_key + "\n")
    keys.chmod(0o600)
    for path in (ssh_dir, keys):
        os.chown(path, user.pw_uid, user.pw_gid)


@pytest.fixture(scope="module")
def remote_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RemoteHost]:
    assert os.geteuid() == 0, "sshd and the remote user's keys need root: " + FIX
    sshd = Path("/usr/sbin/sshd")
    assert sshd.is_file(), "no Debian openssh-server: " + FIX
    try:
        user = pwd.getpwnam(REMOTE_USER)
    except KeyError:
        pytest.fail(f"no user {REMOTE_USER}: {FIX}")
    python = Path(user.pw_dir) / "venv" / "bin" / "python"
    assert python.is_file(), f"{REMOTE_USER} has no sandbox-kernel install: {FIX}"
    root = tmp_path_factory.mktemp("remote-host")
    host_key = _keygen(root / "host_key")
    _authorize(user, _keygen(root / "client_key"))
    port = free_port(REMOTE_ADDRESS)
    config = root / "sshd_config"
    config.write_text(
        f"ListenAddress {REMOTE_ADDRESS}:{port}\nHostKey {root / 'host_key'}\n"
        f"PidFile {root / 'sshd.pid'}\nAllowUsers {REMOTE_USER}\nPermitRootLogin no\n"
        "AuthenticationMethods publickey\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nX11Forwarding no\n"
        "AllowTcpForwarding no\nLogLevel VERBOSE\n"
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation folder
    client_home = root / "gateway-home"
    (client_home / ".ssh").mkdir(parents=True)
    shutil.copy(root / "client_key", client_home / ".ssh" / "id_ed25519")
    (client_home / ".ssh" / "known_hosts").write_text(f"[{REMOTE_ADDRESS}]:{port} {host_key}\n")
    log = root / "sshd.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [str(sshd), "-D", "-e", "-f", str(config)], stdout=output, stderr=subprocess.STDOUT
        )
    host = RemoteHost(port, process, log, python, client_home)
    deadline = time.monotonic() + 30
    while "Server listening" not in host.sshd_log():
        assert process.poll() is None, f"sshd ended: {host.sshd_log()}"
        assert time.monotonic() < deadline, f"sshd did not listen: {host.sshd_log()}"
        time.sleep(0.1)
    try:
        yield host
    finally:
        stop(process)


@pytest.fixture(scope="module")
def enterprise_gateway(
    remote_host: RemoteHost, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    jupyter = ROOT / ".venv-eg" / "bin" / "jupyter"
    assert jupyter.is_file(), "no Enterprise Gateway in .venv-eg: " + FIX
    root = tmp_path_factory.mktemp("enterprise-gateway")
    prefix = root / "prefix"
    subprocess.run(
        [str(ROOT / ".venv" / "bin" / "sandbox-kernel"), "install", "--enterprise-gateway",
         "distributed", "--prefix", str(prefix), "--remote-python", str(remote_host.python),
         "--remote-hosts", REMOTE_ADDRESS, "--kernel-ip", REMOTE_ADDRESS],
        check=True, capture_output=True,
    )  # fmt: skip
    port = free_port()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(remote_host.client_home),
        "JUPYTER_PATH": str(prefix / "share" / "jupyter"),
        "EG_REMOTE_USER": REMOTE_USER,
        "EG_SSH_PORT": str(remote_host.port),
        "EG_RESPONSE_IP": "127.0.0.1",
        "EG_RESPONSE_PORT": str(free_port()),
        "EG_KERNEL_LAUNCH_TIMEOUT": "120",
    }
    command = [
        str(jupyter), "enterprisegateway", "--ip=127.0.0.1", f"--port={port}",
        "--port_retries=0", f"--EnterpriseGatewayApp.auth_token={TOKEN}",
    ]  # fmt: skip
    gateway = serve_gateway(command, root, port, env, "Enterprise Gateway")
    try:
        yield gateway
    finally:
        gateway.stop()


def _remote_kernel_pids() -> dict[int, int]:
    """pid -> uid of the processes running our launcher on this machine."""
    found = {}
    for pid in processes_mentioning("sandbox_kernel.kernel.remote"):
        with contextlib.suppress(OSError):  # it ended meanwhile
            found[pid] = Path(f"/proc/{pid}").stat().st_uid
    return found


def test_cells_run_on_the_remote_host_as_its_user_over_ssh(
    enterprise_gateway: Gateway, remote_host: RemoteHost
) -> None:
    kernel_id = enterprise_gateway.start_kernel(SPEC, CLIENT)
    kernel = enterprise_gateway.connect(kernel_id)
    try:
        cell = kernel.execute("import sys\nfor i in range(2):\n    print('line', i)\n6 * 7")
        assert cell.stream() == "line 0\nline 1\n" and cell.result() == "42", cell.describe()
        rich = kernel.execute(
            "from IPython.display import HTML\n"
            "HTML('<b>bold</b><script>alert(1)</script><img src=x onerror=alert(2)>')"
        )
        html = rich.result("text/html")
        # The guest's part, then the firewall's note on what it removed (escaped text).
        shown, _, note = html.partition('<div class="sandbox-kernel-note">')
        assert "<b>bold</b>" in shown and "<script" not in html and "onerror" not in shown
        assert "&lt;script&gt; element in text/html" in note, html
        sshd_log = remote_host.sshd_log()
        assert f"Accepted publickey for {REMOTE_USER}" in sshd_log, sshd_log
        uid = pwd.getpwnam(REMOTE_USER).pw_uid
        assert set(_remote_kernel_pids().values()) == {uid}, "the kernel runs as the remote user"
    finally:
        kernel.close()
        enterprise_gateway.api("DELETE", f"/api/kernels/{kernel_id}")  # never left for the next


def test_interrupt_and_restart_through_enterprise_gateway(enterprise_gateway: Gateway) -> None:
    kernel_id = enterprise_gateway.start_kernel(SPEC, CLIENT)
    kernel = enterprise_gateway.connect(kernel_id)
    try:
        kernel.execute("kept = 'still here'")
        before = set(_remote_kernel_pids())
        running = kernel.submit("import time\ntime.sleep(60)")
        time.sleep(1.5)
        answer = enterprise_gateway.api("POST", f"/api/kernels/{kernel_id}/interrupt")
        assert answer.status_code == 204, answer.text
        cell = kernel.collect(running, timeout=30)
        assert cell.reply["status"] == "error", cell.describe()
        assert cell.reply["ename"] == "KeyboardInterrupt", cell.describe()
        assert kernel.execute("print(kept)").stream() == "still here\n"

        answer = enterprise_gateway.api("POST", f"/api/kernels/{kernel_id}/restart")
        assert answer.status_code == 200, answer.text
    finally:
        kernel.close()
    kernel = enterprise_gateway.connect(kernel_id)
    try:
        gone = kernel.execute("'kept' in globals()")
        assert gone.result() == "False", gone.describe()
        assert set(_remote_kernel_pids()).isdisjoint(before), "a new kernel process"
    finally:
        kernel.close()
        enterprise_gateway.api("DELETE", f"/api/kernels/{kernel_id}")
    deadline = time.monotonic() + 30
    while _remote_kernel_pids() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _remote_kernel_pids() == {}, "shutting the kernel down ends it on the remote host"

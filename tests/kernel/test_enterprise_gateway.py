"""sandbox-python on a remote host through Jupyter Enterprise Gateway's distributed process
proxy, for real, set up by docs/install.md's recipe ("Jupyter Enterprise Gateway, step by
step"), whose blocks this module runs as written (tests/kernel/recipe.py): Enterprise Gateway
(its own venv, .venv-eg) starts the kernel over SSH, with key authentication, as a separate
user (`sandbox-remote`), through Debian's sshd bound to 127.0.0.2, which Enterprise Gateway
does not count as its own address, so it does use SSH. The remote user's kernel runs from its
own venv, into which the recipe installs this checkout, with our launcher
(sandbox_kernel/kernel/remote.py) reporting back. A client then runs cells over the gateway's
WebSocket, interrupts and restarts over REST, as with Kernel Gateway.

The "fresh pair of hosts": the remote user's authorized keys emptied, a new home for the
gateway's user (no key, no known host), a new sshd host key. bin/setup --tests prepares the
rest (the user, its venv, Debian's sshd); a missing piece fails the test and names the fix.
SANDBOX_KERNEL_RECIPE_SOURCE=HEAD installs the last commit instead of the work tree.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.kernel.conftest import processes_mentioning
from tests.kernel.gateway import Gateway
from tests.kernel.recipe import (
    SYSTEM_PATH,
    run_block,
    settings_names,
    start_block,
    stop_group,
)
from tests.processes import free_port, stop, wait_until_up

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
REMOTE_USER = os.environ.get("SANDBOX_KERNEL_REMOTE_USER", "sandbox-remote")
REMOTE_ADDRESS = "127.0.0.2"
SPEC = "sandbox-python-distributed"
# Enterprise Gateway refuses kernels for root; a client says whose kernel it asks for.
CLIENT = {"KERNEL_USERNAME": "alice"}
FIX = "run bin/setup --tests (as root, or with sudo): it prepares the remote host"
TOKEN = "enterprise-gateway-token-0123456789"


@dataclass
class RemoteHost:
    """Debian's sshd on REMOTE_ADDRESS, for REMOTE_USER's keys only."""

    port: int
    process: subprocess.Popen[bytes]
    log: Path
    python: Path
    user: pwd.struct_passwd

    def sshd_log(self) -> str:
        return self.log.read_text(errors="replace")


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip()


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
    assert python.is_file(), f"{REMOTE_USER} has no venv: {FIX}"
    keys = Path(user.pw_dir) / ".ssh" / "authorized_keys"
    if keys.exists():
        keys.write_text("")  # a fresh host: no gateway's key yet (the recipe adds it)
    root = tmp_path_factory.mktemp("remote-host")
    _keygen(root / "host_key")
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
    log = root / "sshd.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [str(sshd), "-D", "-e", "-f", str(config)], stdout=output, stderr=subprocess.STDOUT
        )
    host = RemoteHost(port, process, log, python, user)
    deadline = time.monotonic() + 30
    while "Server listening" not in host.sshd_log():
        assert process.poll() is None, f"sshd ended: {host.sshd_log()}"
        assert time.monotonic() < deadline, f"sshd did not listen: {host.sshd_log()}"
        time.sleep(0.1)
    try:
        yield host
    finally:
        stop(process)


@contextlib.contextmanager
def _staged_package(user: pwd.struct_passwd) -> Iterator[str]:
    """This checkout as the recipe's PACKAGE: its sources copied where the remote user reads
    them (the work tree, or the last commit with SANDBOX_KERNEL_RECIPE_SOURCE=HEAD)."""
    stage = Path(tempfile.mkdtemp(prefix="eg-recipe-package-"))
    try:
        parts = ["pyproject.toml", "README.md", "LICENSE", "sandbox_kernel"]
        if os.environ.get("SANDBOX_KERNEL_RECIPE_SOURCE") == "HEAD":
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", "HEAD", *parts], check=True,
                capture_output=True,
            ).stdout  # fmt: skip
            subprocess.run(["tar", "-x", "-C", str(stage)], input=archive, check=True)
        else:
            for part in parts:
                source = ROOT / part
                if source.is_dir():
                    ignore = shutil.ignore_patterns("__pycache__")
                    shutil.copytree(source, stage / part, ignore=ignore)
                else:
                    shutil.copy(source, stage / part)
        stage.chmod(0o755)
        subprocess.run(["chown", "-R", f"{user.pw_uid}:{user.pw_gid}", str(stage)], check=True)
        yield f"{stage}[enterprise-gateway]"
    finally:
        shutil.rmtree(stage, ignore_errors=True)


@dataclass
class Recipe:
    """The hosts as the recipe left them: the settings, the environments of each host."""

    settings: dict[str, str]
    gateway_env: dict[str, str]
    root: Path

    @property
    def url(self) -> str:
        return f"http://{self.settings['GATEWAY_IP']}:{self.settings['GATEWAY_PORT']}"


@pytest.fixture(scope="module")
def recipe(remote_host: RemoteHost, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recipe]:
    """docs/install.md's steps 1 to 4, its blocks run as written."""
    eg_venv = ROOT / ".venv-eg"
    assert (eg_venv / "bin" / "jupyter").is_file(), "no Enterprise Gateway in .venv-eg: " + FIX
    root = tmp_path_factory.mktemp("recipe")
    gateway_home = root / "gateway-home"  # the gateway's user: nothing in ~/.ssh yet
    gateway_home.mkdir()
    with _staged_package(remote_host.user) as package:
        settings = {
            "KERNEL_HOST": REMOTE_ADDRESS, "SSH_PORT": str(remote_host.port),
            "KERNEL_USER": REMOTE_USER, "KERNEL_PYTHON": str(remote_host.python),
            "GATEWAY_IP": "127.0.0.1", "GATEWAY_PORT": str(free_port()),
            "RESPONSE_PORT": str(free_port()), "EG_VENV": str(eg_venv), "PACKAGE": package,
            "TOKEN": TOKEN, "KERNEL_USERNAME": CLIENT["KERNEL_USERNAME"],
        }  # fmt: skip
        assert set(settings) == settings_names(), "the docs' settings changed: set them here"
        base = {"LANG": "C.UTF-8", **settings}
        kernel_host = {**base, "PATH": SYSTEM_PATH, "HOME": "/root"}
        gateway_env = {**base, "PATH": f"{ROOT / '.venv' / 'bin'}:{SYSTEM_PATH}",
                       "HOME": str(gateway_home)}  # fmt: skip
        run_block("kernel-host", kernel_host, Path("/"))
    printed = run_block("gateway-ssh", gateway_env, root).stdout.strip().splitlines()
    run_block("kernel-host-key", {**kernel_host, "GATEWAY_KEY": printed[-1]}, Path("/"))
    run_block("gateway-spec", gateway_env, root)
    yield Recipe(settings, gateway_env, root)


@pytest.fixture(scope="module")
def enterprise_gateway(recipe: Recipe) -> Iterator[Gateway]:
    """docs/install.md's gateway, started by its `gateway-start` block."""
    log = recipe.root / "gateway.log"
    process = start_block("gateway-start", recipe.gateway_env, recipe.root, log)
    gateway = Gateway(recipe.url, process, log, token=TOKEN)
    try:
        wait_until_up(
            lambda: gateway.api("GET", "/api/kernelspecs").status_code == 200, process, log,
            "Enterprise Gateway",
        )  # fmt: skip
        yield gateway
    finally:
        stop_group(process)


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


def _kernel_processes(python: Path) -> list[int]:
    """The remote kernels' Python processes (not a shell that started one)."""
    found = []
    for pid in processes_mentioning("sandbox_kernel.kernel.remote"):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if argv[0].decode() == str(python):
                found.append(pid)
    return found


def _runtime_root(user: pwd.struct_passwd) -> Path:
    return Path(tempfile.gettempdir()) / f"sandbox-kernel-{user.pw_uid}"


def test_the_recipe_checks_the_gateway_and_a_kernel_starts_without_a_warning(
    enterprise_gateway: Gateway, recipe: Recipe, remote_host: RemoteHost
) -> None:
    before = set(_kernel_processes(remote_host.python))
    checked = run_block("gateway-check", recipe.gateway_env, recipe.root, timeout=300)
    assert f"lists {SPEC}" in checked.stdout, checked.stdout
    kernel_id = json.loads(checked.stdout.strip().splitlines()[-1])["id"]
    kernel = enterprise_gateway.connect(kernel_id)
    try:
        first = kernel.execute("import os\nos.getcwd()")
        assert first.result() == "'/app'", first.describe()
        said = json.dumps([output.content for output in first.outputs])
        assert "[sandbox]" not in said and "notebook's folder" not in said, said
        listed = enterprise_gateway.api("GET", "/api/kernels")
        assert kernel_id in {k["id"] for k in listed.json()}, "jupyter server --gateway-url lists"
        (pid,) = set(_kernel_processes(remote_host.python)) - before
        folder = Path(os.readlink(f"/proc/{pid}/cwd"))
        assert folder.parent == _runtime_root(remote_host.user), folder
        assert folder.name.startswith(f"kernel-{pid}-") and folder.stat().st_mode & 0o077 == 0
    finally:
        kernel.close()
        enterprise_gateway.api("DELETE", f"/api/kernels/{kernel_id}")
    deadline = time.monotonic() + 60
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not folder.exists(), "a kernel the gateway shuts down takes its folder with it"


def test_a_killed_remote_kernels_folders_are_gone_after_the_next_start(
    enterprise_gateway: Gateway, remote_host: RemoteHost
) -> None:
    before = set(_kernel_processes(remote_host.python))
    kernel_id = enterprise_gateway.start_kernel(SPEC, CLIENT)
    kernel = enterprise_gateway.connect(kernel_id)
    try:
        kernel.execute("open('/tmp/scratch.txt', 'w').write('x')")  # the session's /tmp
        (pid,) = set(_kernel_processes(remote_host.python)) - before
        folder = Path(os.readlink(f"/proc/{pid}/cwd"))
        held = sorted(entry.name.split("-")[2] for entry in folder.glob("sandbox-kernel-*-*"))
        assert held == ["data", "repl"], f"the kernel's temporary folders: {held}"
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert folder.is_dir(), "a killed kernel cannot clean up after itself"
    finally:
        kernel.close()
        enterprise_gateway.api("DELETE", f"/api/kernels/{kernel_id}")
    next_id = enterprise_gateway.start_kernel(SPEC, CLIENT)
    try:
        assert not folder.exists(), "the next kernel's start removed the killed kernel's folder"
    finally:
        enterprise_gateway.api("DELETE", f"/api/kernels/{next_id}")

"""The shell and iopub ports bound before ipykernel is imported (kernel/early.py): what is
bound and when, what is left to ipykernel, and kernels that start either way."""

from __future__ import annotations

import hashlib
import inspect
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
from ipykernel.kernelapp import IPKernelApp
from jupyter_client.connect import write_connection_file
from jupyter_client.manager import KernelManager

from sandbox_kernel.kernel import early
from tests.kernel.conftest import (
    CELL_TIMEOUT_SECONDS,
    REPO,
    STARTUP_TIMEOUT_SECONDS,
    RunningKernel,
    install_kernel_spec,
    kernel_env,
)


@pytest.fixture
def connection(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """A connection file as jupyter_client writes one (free TCP ports, a key)."""
    path, info = write_connection_file(str(tmp_path / "kernel.json"))
    yield Path(path), dict(info)
    early.take("", "", 0, 0)  # closes whatever a test left bound (it asks for no ports)


def _delivered(info: dict[str, Any], port_name: str, socket_type: int, bound: Any) -> bool:
    """Does a client socket connected to the port reach the bound socket?"""
    context = zmq.Context()
    client = context.socket(socket_type)
    try:
        client.connect(f"tcp://{info['ip']}:{info[port_name]}")
        if socket_type == zmq.SUB:
            client.setsockopt(zmq.SUBSCRIBE, b"")
        else:
            client.send(b"hello")
        return bool(bound.poll(10_000))
    finally:
        client.close(linger=0)
        context.term()


def test_a_plain_connection_file_is_bound_and_taken_once(
    connection: tuple[Path, dict[str, Any]],
) -> None:
    path, info = connection
    bound = early.bind_early(["-f", str(path)])
    assert bound is not None
    try:
        assert _delivered(info, "shell_port", zmq.DEALER, bound.shell)
        assert _delivered(info, "iopub_port", zmq.SUB, bound.iopub)  # a subscription
        taken = early.take("tcp", info["ip"], info["shell_port"], info["iopub_port"])
        assert taken is bound
        assert early.take("tcp", info["ip"], info["shell_port"], info["iopub_port"]) is None
    finally:
        bound.close()


def test_sockets_for_other_ports_are_closed_not_adopted(
    connection: tuple[Path, dict[str, Any]],
) -> None:
    path, info = connection
    assert early.bind_early([f"--f={path}"]) is not None
    assert early.take("tcp", info["ip"], info["shell_port"] + 1, info["iopub_port"]) is None
    context = zmq.Context()  # the ports are free again
    sockets = [context.socket(zmq.ROUTER) for _ in range(2)]
    try:
        for socket, port in zip(sockets, (info["shell_port"], info["iopub_port"]), strict=True):
            socket.bind(f"tcp://{info['ip']}:{port}")
    finally:
        for socket in sockets:
            socket.close(linger=0)
        context.term()


@pytest.mark.parametrize(
    "change",
    [
        {"curve_secretkey": "x" * 40, "curve_publickey": "y" * 40},
        {"shell_port": 0},
        {"transport": "inproc"},
        {"iopub_port": "many"},
        None,  # not JSON
    ],
    ids=["curve", "port-0", "transport", "bad-port", "not-json"],
)
def test_anything_but_a_plain_file_is_left_to_ipykernel(
    connection: tuple[Path, dict[str, Any]], change: dict[str, Any] | None
) -> None:
    path, info = connection
    path.write_text("{ not json" if change is None else json.dumps({**info, **change}))
    assert early.bind_early(["-f", str(path)]) is None
    assert early.bind_early(["-f", str(path.with_name("missing.json"))]) is None
    assert early.bind_early(["--debug"]) is None


def test_a_port_in_use_is_left_to_ipykernel(connection: tuple[Path, dict[str, Any]]) -> None:
    path, info = connection
    context = zmq.Context()
    holder, retry = context.socket(zmq.ROUTER), context.socket(zmq.ROUTER)
    try:
        holder.bind(f"tcp://{info['ip']}:{info['iopub_port']}")
        assert early.bind_early(["-f", str(path)]) is None
        retry.bind(f"tcp://{info['ip']}:{info['shell_port']}")  # the one it bound is let go
    finally:
        for socket in (holder, retry):
            socket.close(linger=0)
        context.term()


# A stand-in for ipykernel, first on the path of a `python -m sandbox_kernel`: it records
# whether the shell and iopub ports already take connections when ipykernel is imported,
# then stops the process.
_IMPORT_PROBE = """
import json, os, socket, sys
info = json.load(open(os.environ["PROBE_CONNECTION"]))
seen = {}
for name in ("shell_port", "iopub_port", "stdin_port"):
    probe = socket.socket()
    seen[name] = probe.connect_ex((info["ip"], info[name])) == 0
    probe.close()
open(os.environ["PROBE_OUT"], "w").write(json.dumps(seen))
os._exit(0)
"""


def test_the_ports_a_client_waits_on_take_connections_before_ipykernel_is_imported(
    connection: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, _ = connection
    stand_in = tmp_path / "probe" / "ipykernel"
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text(_IMPORT_PROBE)
    out = tmp_path / "seen.json"
    subprocess.run(
        [sys.executable, "-m", "sandbox_kernel", "-f", str(path)],
        env={
            "PYTHONPATH": f"{stand_in.parent}:{REPO}",
            "PROBE_CONNECTION": str(path),
            "PROBE_OUT": str(out),
        },
        timeout=120,
        check=True,
    )
    assert json.loads(out.read_text()) == {
        "shell_port": True,
        "iopub_port": True,
        "stdin_port": False,  # bound by ipykernel, as before
    }


@pytest.mark.parametrize("transport", ["tcp", "ipc"])
def test_a_kernel_started_over_either_transport_runs_cells(tmp_path: Path, transport: str) -> None:
    install_kernel_spec()
    manager = KernelManager(kernel_name="sandbox-python", transport=transport)
    if transport == "ipc":
        manager.ip = str(tmp_path / "kernel-ipc")
    manager.start_kernel(cwd=str(tmp_path), env=kernel_env(tmp_path))
    client = manager.client()
    client.start_channels()
    kernel = RunningKernel(manager, client, tmp_path)
    try:
        client.wait_for_ready(timeout=STARTUP_TIMEOUT_SECONDS)
        ran = kernel.run_ok("print(6 * 7)", timeout=CELL_TIMEOUT_SECONDS)
        assert ran.stream("stdout") == "42\n"
    finally:
        kernel.shutdown()


# ipykernel 7.4's methods that SandboxKernelApp repeats (app.py), by digest of their source.
_REPEATED = {"init_sockets": "2aa791c3f7a2e811", "init_iopub": "c8228627add3de71"}


def test_the_methods_the_app_repeats_are_still_ipykernels() -> None:
    """A new ipykernel that changes how it makes its sockets fails here, so that the app's
    copies are looked at again (and the digests updated), never silently left behind."""
    digests = {
        name: hashlib.sha256(inspect.getsource(getattr(IPKernelApp, name)).encode()).hexdigest()
        for name in _REPEATED
    }
    assert {name: digest[:16] for name, digest in digests.items()} == _REPEATED

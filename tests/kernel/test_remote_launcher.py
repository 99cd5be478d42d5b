"""The Enterprise Gateway launcher (sandbox_kernel/kernel/remote.py) against the gateway's side
of the protocol (tests/kernel/remote_launch.py): its arguments, the encrypted connection info,
a real kernel reached with it, and the gateway's signal and shutdown requests on the
communication port. The whole path through Enterprise Gateway and sshd is
test_enterprise_gateway.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_kernel.kernel.install import InstallError, enterprise_gateway_spec
from sandbox_kernel.kernel.remote import RemoteLaunchError, parse_launch
from tests.kernel.remote_launch import LaunchedKernel, start_launched

KEY = "QUJD"  # base64, enough for the argument checks


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ([], {}, "the gateway gave no kernel id"),
        (["--kernel-id", "k1"], {}, "the gateway gave no response address"),
        (["--kernel-id", "k1", "--response-address", "10.0.0.1:99"], {}, "no public key"),
        (["--kernel-id", "k1", "--response-address", "10.0.0.1", "--public-key", KEY], {},
         "response_port"),
        (["--kernel-id", "k1", "--response-address", "h:1", "--public-key", "not base64!"], {},
         "not base64"),
        (["--kernel-id", "../x", "--response-address", "h:1", "--public-key", KEY], {},
         "kernel_id"),
        (["--kernel-id", "k", "--response-address", "h:1", "--public-key", KEY,
          "--port-range", "9000..8000"], {}, "is not LOW..HIGH"),
        (["--kernel-id", "k", "--response-address", "h:1", "--public-key", KEY,
          "--port-range", "9000..9002"], {}, "too small for six ports"),
        (["--kernel-id", "k", "--response-address", "h:1", "--public-key", KEY,
          "--RemoteProcessProxy.spark-context-initialization-mode", "eager"], {}, "no Spark"),
        (["--bogus"], {}, "unrecognised launcher arguments"),
    ],
    ids=["no-id", "no-address", "no-key", "no-port", "key-not-base64", "id-with-slash",
         "range-reversed", "range-too-small", "spark", "unknown-flag"],
)  # fmt: skip
def test_bad_launch_requests_are_named(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(RemoteLaunchError, match=message):
        parse_launch(argv, env)


def test_the_environment_stands_in_for_arguments_as_in_a_kubernetes_pod() -> None:
    env = {"KERNEL_ID": "abc-1", "RESPONSE_ADDRESS": "10.1.2.3:8877", "PUBLIC_KEY": KEY,
           "PORT_RANGE": "40000..41000"}  # fmt: skip
    launch = parse_launch([], env)
    assert (launch.kernel_id, launch.response_host, launch.response_port) == (
        "abc-1", "10.1.2.3", 8877,
    )  # fmt: skip
    assert (launch.port_low, launch.port_high, launch.ip) == (40000, 41000, "0.0.0.0")
    assert parse_launch(["--kernel-id", "given"], env).kernel_id == "given"


def test_a_launcher_error_is_one_line_and_exit_status_two() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sandbox_kernel.kernel.remote", "--kernel-id", "k"],
        capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin"},
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "sandbox-kernel remote launcher: the gateway gave no response address"
    )


def test_the_specs_for_enterprise_gateway() -> None:
    spec = enterprise_gateway_spec(
        "distributed", remote_python="/opt/py/bin/python", remote_hosts=["a", "b"],
        kernel_ip="10.0.0.5",
    )  # fmt: skip
    argv = spec["argv"]
    assert isinstance(argv, list)
    assert argv[:4] == ["/opt/py/bin/python", "-P", "-m", "sandbox_kernel.kernel.remote"]
    assert "{response_address}" in argv and "{public_key}" in argv and argv[-2:] == [
        "--ip", "10.0.0.5",
    ]  # fmt: skip
    assert spec["interrupt_mode"] == "signal"
    proxy = spec["metadata"]["process_proxy"]  # type: ignore[index]
    assert proxy["class_name"].endswith("distributed.DistributedProcessProxy")
    assert proxy["config"] == {"remote_hosts": "a,b"}
    kube = enterprise_gateway_spec("kubernetes", image="registry.example/sandbox-kernel:1")
    assert kube["argv"][1:3] == ["-P", "{resource_dir}/scripts/launch_kubernetes.py"]  # type: ignore[index]
    assert kube["metadata"]["process_proxy"]["config"] == {  # type: ignore[index]
        "image_name": "registry.example/sandbox-kernel:1"
    }
    with pytest.raises(InstallError, match="needs --image"):
        enterprise_gateway_spec("kubernetes")
    with pytest.raises(InstallError, match="unknown Enterprise Gateway mode"):
        enterprise_gateway_spec("yarn")


def test_the_kubernetes_spec_wants_enterprise_gateways_launcher(tmp_path: Path) -> None:
    def install() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(Path(sys.executable).parent / "sandbox-kernel"), "install",
             "--enterprise-gateway", "kubernetes", "--image", "img:1",
             "--launcher-scripts", str(tmp_path), "--prefix", str(tmp_path / "prefix")],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    done = install()
    assert done.returncode == 2
    assert "not found:" in done.stderr and "launch_kubernetes.py" in done.stderr
    for script in ("launch_kubernetes.py", "kernel-pod.yaml.j2"):
        (tmp_path / script).write_text("# Enterprise Gateway's, from its release\n")
    done = install()
    assert done.returncode == 0, done.stderr
    spec_dir = tmp_path / "prefix" / "share" / "jupyter" / "kernels" / "sandbox-python-kubernetes"
    assert json.loads((spec_dir / "kernel.json").read_text())["argv"][0] == "python"
    assert (spec_dir / "scripts" / "kernel-pod.yaml.j2").is_file()


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaunchedKernel]:
    kernel = start_launched(tmp_path_factory.mktemp("launched"))
    try:
        yield kernel
    finally:
        kernel.stop()


def test_the_connection_info_reaches_the_gateway_encrypted_and_the_kernel_answers(
    launched: LaunchedKernel,
) -> None:
    info = launched.info
    assert info["kernel_id"] and info["pid"] == launched.process.pid
    assert info["pgid"] and isinstance(info["comm_port"], int) and info["comm_port"] > 0
    assert info["ip"] == "127.0.0.1" and info["signature_scheme"] == "hmac-sha256"
    cell = launched.run_ok("import sys\nprint(sys.platform)\n6 * 7")
    assert cell.stream() == "wasi\n" and cell.result() == "42"


def test_the_gateways_interrupt_and_poll_keep_the_session(launched: LaunchedKernel) -> None:
    launched.run_ok("kept = 'still here'")
    launched.request(json.dumps({"signum": 0}).encode())  # the gateway's liveness poll
    running = launched.send("import time\ntime.sleep(60)")
    time.sleep(1.0)
    launched.request(json.dumps({"signum": int(signal.SIGINT)}).encode())
    cell = launched.collect(running, timeout=30)
    assert cell.status == "error" and cell.reply["ename"] == "KeyboardInterrupt", cell.describe()
    assert launched.run_ok("print(kept)").stream() == "still here\n"


def test_the_gateways_sigterm_ends_the_kernel(tmp_path: Path) -> None:
    kernel = start_launched(tmp_path)
    try:
        kernel.run_ok("1")
        kernel.request(json.dumps({"signum": int(signal.SIGTERM)}).encode())
        assert kernel.process.wait(timeout=30) == -signal.SIGTERM
    finally:
        kernel.stop()

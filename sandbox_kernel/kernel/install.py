"""Install the `sandbox-python` kernel spec: `sandbox-kernel install [--user|--sys-prefix|
--prefix P] [--name N] [--policy FILE]`.

`--policy FILE` writes the file's absolute path into the spec's environment
(SANDBOX_KERNEL_POLICY): the way to give a set of notebooks a policy of their own, since the
kernel never picks up a policy file from the notebook's folder. The file is checked here.

The spec is spec/kernel.json (package data, beside this module) with its argv pointed at this
Python, plus the logos. Its guarded twin, `sandbox-python-guarded` (NAME-guarded), is
installed beside it: the same kernel with SANDBOX_KERNEL_GUARDED=1, which checks each cell
with the AST policy first.

`sandbox-kernel install --enterprise-gateway distributed|kubernetes` writes the specs Jupyter
Enterprise Gateway reads instead (`enterprise_gateway_spec`): its process proxy in the metadata,
and an argv that starts our launcher, `sandbox_kernel.kernel.remote`, on the remote host
(distributed: over SSH, with the remote host's Python) or in a pod (Kubernetes: through
Enterprise Gateway's own `launch_kubernetes.py` and pod template, copied in from its release,
with our image; see deploy/kubernetes/).

Enterprise Gateway 3.3 needs `jupyter-client<7` and this package `>=8`, so the gateway lives in
an environment of its own, which does not read this one's specs: `--gateway-python PATH` (the
gateway environment's Python) installs the spec where that environment's Jupyter looks, its
`sys.prefix`/share/jupyter (asked of that Python, started isolated: `-I`).
`sandbox-kernel doctor --gateway URL` then asks the running gateway whether it sees the spec.

Must not import: ipykernel (jupyter_client's KernelSpecManager is enough).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from jupyter_client.kernelspec import KernelSpecManager

from sandbox_kernel.core.errors import PolicyValidationError
from sandbox_kernel.core.launch import host_python
from sandbox_kernel.core.policy import load_policy
from sandbox_kernel.kernel import KERNEL_NAME

__all__ = [
    "GATEWAY_MODES",
    "GUARDED_SUFFIX",
    "InstallError",
    "enterprise_gateway_spec",
    "environment_prefix",
    "install_enterprise_gateway_spec",
    "install_kernel_spec",
    "kernel_spec",
]

GUARDED_SUFFIX = "-guarded"

_SPEC_DIR = Path(__file__).resolve().with_name("spec")  # package data: in the wheel too

GATEWAY_MODES = ("distributed", "kubernetes")
_PROCESS_PROXIES = {
    "distributed": "enterprise_gateway.services.processproxies.distributed.DistributedProcessProxy",
    "kubernetes": "enterprise_gateway.services.processproxies.k8s.KubernetesProcessProxy",
}
# Enterprise Gateway fills these in; the launchers read them (kernel/remote.py, or its own
# launch_kubernetes.py, which passes them to the pod's environment).
_GATEWAY_ARGS = [
    "--RemoteProcessProxy.kernel-id", "{kernel_id}",
    "--RemoteProcessProxy.response-address", "{response_address}",
    "--RemoteProcessProxy.public-key", "{public_key}",
    "--RemoteProcessProxy.port-range", "{port_range}",
]  # fmt: skip
_KUBERNETES_SCRIPTS = ("launch_kubernetes.py", "kernel-pod.yaml.j2")


class InstallError(ValueError):
    """A kernel spec cannot be written as asked; the message says what to change."""


def _shipped_spec() -> dict[str, object]:
    """spec/kernel.json as shipped, before this interpreter's argv goes in."""
    spec: dict[str, object] = json.loads((_SPEC_DIR / "kernel.json").read_text())
    return spec


def kernel_spec(
    name: str = KERNEL_NAME, *, guarded: bool = False, policy: Path | None = None
) -> dict[str, object]:
    """kernel.json's content for this interpreter (`guarded`: the guarded twin's; `policy`: a
    policy file every kernel of the spec loads, checked and made absolute here)."""
    spec = _shipped_spec()
    spec["argv"] = host_python("-m", "sandbox_kernel", "-f", "{connection_file}")
    if name != KERNEL_NAME:
        spec["display_name"] = f"{spec['display_name']} [{name}]"
    variables: dict[str, str] = {}
    if guarded:
        spec["display_name"] = f"{spec['display_name']} [guarded]"
        variables["SANDBOX_KERNEL_GUARDED"] = "1"
    if policy is not None:
        variables["SANDBOX_KERNEL_POLICY"] = str(_checked_policy(policy))
    if variables:
        env = spec.get("env")
        spec["env"] = {**(env if isinstance(env, dict) else {}), **variables}
    return spec


def _checked_policy(policy: Path) -> Path:
    """`policy` as an absolute path, once it is known to load."""
    path = policy.expanduser().resolve()
    if not path.is_file():
        raise InstallError(f"no policy file at {policy}")
    try:
        load_policy(path)
    except PolicyValidationError as exc:
        raise InstallError(str(exc)) from None
    return path


def install_kernel_spec(
    *,
    user: bool = False,
    prefix: str | None = None,
    sys_prefix: bool = False,
    name: str = KERNEL_NAME,
    policy: Path | None = None,
) -> Path:
    """Install the spec and its guarded twin; the folder the spec went to."""
    spec, guarded = kernel_spec(name, policy=policy), kernel_spec(name, guarded=True, policy=policy)
    target = _install(name, spec, user, sys_prefix, prefix)
    _install(name + GUARDED_SUFFIX, guarded, user, sys_prefix, prefix)
    return target


def _install(
    name: str,
    spec: dict[str, object],
    user: bool,
    sys_prefix: bool,
    prefix: str | None,
    scripts: Sequence[Path] = (),
) -> Path:
    if sys_prefix:
        prefix = sys.prefix
    with tempfile.TemporaryDirectory() as folder:
        staging = Path(folder)
        (staging / "kernel.json").write_text(json.dumps(spec, indent=2))
        for logo in ("logo-32x32.png", "logo-64x64.png"):
            shutil.copy(_SPEC_DIR / logo, staging / logo)
        if scripts:
            (staging / "scripts").mkdir()
            for script in scripts:
                shutil.copy(script, staging / "scripts" / script.name)
        target = KernelSpecManager().install_kernel_spec(
            str(staging), kernel_name=name, user=user, prefix=prefix
        )
    return Path(target)


def environment_prefix(python: Path) -> Path:
    """The `sys.prefix` of the environment whose Python is `python` (a venv's bin/python)."""
    if not python.is_file():
        raise InstallError(f"no Python at {python}: name the gateway environment's bin/python")
    try:
        answer = subprocess.run(
            [str(python), "-I", "-c", "import sys; print(sys.prefix)"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        raise InstallError(f"{python} did not say its prefix: {exc}") from None
    prefix = Path(answer.stdout.strip())
    if not prefix.is_dir():
        raise InstallError(f"{python} names a prefix that is not a folder: {prefix}")
    return prefix


def enterprise_gateway_spec(
    mode: str,
    *,
    remote_python: str | None = None,
    remote_hosts: Sequence[str] = (),
    kernel_ip: str | None = None,
    image: str | None = None,
    remote_workspace: str | None = None,
) -> dict[str, object]:
    """kernel.json for Enterprise Gateway's distributed (SSH) or Kubernetes process proxy."""
    if mode not in GATEWAY_MODES:
        raise InstallError(f"unknown Enterprise Gateway mode {mode!r}: one of {GATEWAY_MODES}")
    spec = _shipped_spec()
    spec["display_name"] = f"{spec['display_name']} [Enterprise Gateway, {mode}]"
    config: dict[str, str] = {}
    if mode == "distributed":
        argv = host_python("-m", "sandbox_kernel.kernel.remote", python=remote_python)
        argv += _GATEWAY_ARGS + (["--ip", kernel_ip] if kernel_ip else [])
        argv += ["--workspace", remote_workspace] if remote_workspace else []
        if remote_hosts:
            config["remote_hosts"] = ",".join(remote_hosts)
    else:
        if not image:
            raise InstallError("the Kubernetes spec needs --image (built from deploy/kubernetes)")
        argv = host_python(
            "{resource_dir}/scripts/launch_kubernetes.py", *_GATEWAY_ARGS, python="python"
        )
        config["image_name"] = image
    spec["argv"] = argv
    proxy: dict[str, object] = {"class_name": _PROCESS_PROXIES[mode]}
    if config:
        proxy["config"] = config
    metadata = spec.get("metadata")
    spec["metadata"] = {**(metadata if isinstance(metadata, dict) else {}), "process_proxy": proxy}
    return spec


def install_enterprise_gateway_spec(
    mode: str,
    *,
    user: bool = False,
    prefix: str | None = None,
    sys_prefix: bool = False,
    name: str | None = None,
    remote_python: str | None = None,
    remote_hosts: Sequence[str] = (),
    kernel_ip: str | None = None,
    image: str | None = None,
    launcher_scripts: Path | None = None,
    gateway_python: Path | None = None,
    remote_workspace: str | None = None,
) -> Path:
    """Install `enterprise_gateway_spec`'s spec where Enterprise Gateway looks for specs: the
    gateway's environment when `gateway_python` names its Python."""
    spec = enterprise_gateway_spec(
        mode, remote_python=remote_python, remote_hosts=remote_hosts, kernel_ip=kernel_ip,
        image=image, remote_workspace=remote_workspace,
    )  # fmt: skip
    if gateway_python is not None:
        if user or sys_prefix or prefix:
            raise InstallError(
                "--gateway-python names the place: no --user, --sys-prefix or --prefix"
            )
        prefix, sys_prefix = str(environment_prefix(gateway_python)), False
    scripts: list[Path] = []
    if mode == "kubernetes":
        if launcher_scripts is None:
            raise InstallError(
                "the Kubernetes spec needs --launcher-scripts: the folder of Enterprise Gateway's "
                "release holding " + " and ".join(_KUBERNETES_SCRIPTS)
            )
        scripts = [launcher_scripts / script for script in _KUBERNETES_SCRIPTS]
        missing = [str(script) for script in scripts if not script.is_file()]
        if missing:
            raise InstallError(f"not found: {', '.join(missing)}")
    return _install(name or f"{KERNEL_NAME}-{mode}", spec, user, sys_prefix, prefix, scripts)

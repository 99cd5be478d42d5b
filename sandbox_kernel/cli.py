"""The `sandbox-kernel` command: warm the compile cache, run code once, show what is installed.

    sandbox-kernel warm                 compile the guest images into the cache (progress bar)
    sandbox-kernel run FILE|-  [--js]   run code once in a fresh sandbox; the result as JSON
    sandbox-kernel info                 versions, image digests, cache folder
    sandbox-kernel doctor [--json]      what is installed, cached and missing, and the fixes
        [--role jupyter|remote|gateway] [--gateway URL]   (each host's own checks; doctor.py)
    sandbox-kernel install [--user|--sys-prefix|--prefix P] [--name N] [--policy FILE]
                                        install the `sandbox-python` Jupyter kernel specs
    sandbox-kernel install --enterprise-gateway distributed|kubernetes [--gateway-python P] [...]
                                        the spec for Jupyter Enterprise Gateway's proxies
    sandbox-kernel runner sql|python    answer one data analysis request (JSON on stdin)
    sandbox-kernel runner datasets      the registered datasets
    sandbox-kernel capsules list|show   the record of runner runs (sandbox_kernel/runner/cli.py)

Exit status: 0 on success, 1 when the guest's code failed, 2 on bad usage or a broken install.

Must not import: anything Jupyter (the kernel's own commands come with it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from sandbox_kernel.core.errors import SandboxError
from sandbox_kernel.core.policy import ExecutionPolicy, load_policy
from sandbox_kernel.core.results import RuntimeType
from sandbox_kernel.runner.cli import add_subcommands as add_runner_subcommands

__all__ = ["main"]

_DESCRIPTION = "Run untrusted code in a resource-limited WebAssembly sandbox."


def _progress_bar(label: str) -> tuple[Callable[[float], None], Callable[[], None]]:
    from tqdm import tqdm

    # Redrawn often on a terminal; a few lines in all when stderr is a log (CI).
    interval = 0.1 if sys.stderr.isatty() else 10.0
    bar = tqdm(total=100, desc=label, unit="%", file=sys.stderr, mininterval=interval)

    def update(fraction: float) -> None:
        bar.update(max(0, round(fraction * 100) - bar.n))

    return update, bar.close


def _warm(args: argparse.Namespace) -> int:
    import time

    from sandbox_kernel.host.artifacts import javascript_image, python_image
    from sandbox_kernel.host.engine import get_engine
    from sandbox_kernel.host.guest_library import guest_library

    handle = get_engine()
    py, js = python_image(), javascript_image()
    images = [("python", py.binary, py.binary_sha256), ("javascript", js.binary, js.binary_sha256)]
    for name, binary, sha256 in images:
        cached = handle.cached_path(sha256).is_file()
        started = time.perf_counter()
        if cached:
            handle.module(binary, sha256)
        else:
            update, close = _progress_bar(f"compiling the {name} guest")
            try:
                handle.module(binary, sha256, progress=update)
            finally:
                close()
        took = time.perf_counter() - started
        state = "cached" if cached else "compiled"
        print(f"{name} guest: {state}, ready in {took:.2f} s", file=sys.stderr)
    started = time.perf_counter()
    library = guest_library()  # IPython for the kernel's sessions, from the package index once
    took = time.perf_counter() - started
    print(f"guest library (IPython): {library}, ready in {took:.2f} s", file=sys.stderr)
    _warm_kernel_image()
    return 0


def _warm_kernel_image() -> None:
    """The kernel's warm-start image (IPython and its default modules imported), made once."""
    import tempfile
    import time

    from sandbox_kernel.kernel.settings import NOTEBOOK_DEFAULTS, WARM_MODULES
    from sandbox_kernel.repl.models import REPLConfig
    from sandbox_kernel.repl.sandbox import ReplSandbox

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sandbox-kernel-warm-") as folder:
        data = Path(folder) / "data"  # the kernel always mounts /data (%dataset): same layout
        data.mkdir()
        policy = ExecutionPolicy(**NOTEBOOK_DEFAULTS, mount_data_dir=data)
        config = REPLConfig(
            policy=policy, workspace=Path(folder), warm_start_modules=WARM_MODULES, ipython=True
        )
        with ReplSandbox(config):
            pass
    took = time.perf_counter() - started
    modules = ", ".join(WARM_MODULES)
    print(f"kernel warm image ({modules}): ready in {took:.2f} s", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    from sandbox_kernel.runtimes.factory import create_sandbox

    code = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    runtime = RuntimeType.JAVASCRIPT if args.js else RuntimeType.PYTHON
    policy = load_policy(args.policy)
    if args.timeout is not None:
        policy = policy.with_overrides(timeout_seconds=args.timeout)
    sandbox = create_sandbox(runtime, policy=policy, workspace=args.workspace)
    result = sandbox.execute(code)
    print(result.model_dump_json(indent=2))
    return 0 if result.success else 1


def _info(args: argparse.Namespace) -> int:
    from sandbox_kernel.host.artifacts import javascript_image, python_image
    from sandbox_kernel.host.cache import cache_dir
    from sandbox_kernel.host.engine import wasmtime_version

    py, js = python_image(), javascript_image()
    info = {
        "wasmtime": wasmtime_version(),
        "python_image": {"path": str(py.binary), "sha256": py.binary_sha256},
        "javascript_image": {"path": str(js.binary), "sha256": js.binary_sha256},
        "cache_dir": str(cache_dir()),
    }
    print(json.dumps(info, indent=2))
    return 0


def _install(args: argparse.Namespace) -> int:
    from sandbox_kernel.kernel.install import (
        GUARDED_SUFFIX,
        InstallError,
        install_enterprise_gateway_spec,
        install_kernel_spec,
    )

    if args.enterprise_gateway:
        try:
            target = install_enterprise_gateway_spec(
                args.enterprise_gateway, user=args.user, prefix=args.prefix,
                sys_prefix=args.sys_prefix, name=args.name, remote_python=args.remote_python,
                remote_hosts=[h for h in (args.remote_hosts or "").split(",") if h],
                kernel_ip=args.kernel_ip, image=args.image, launcher_scripts=args.launcher_scripts,
                gateway_python=args.gateway_python, remote_workspace=args.remote_workspace,
            )  # fmt: skip
        except InstallError as exc:
            print(f"sandbox-kernel install: {exc}", file=sys.stderr)
            return 2
        print(f"installed kernel spec {target.name!r} for Enterprise Gateway in {target}")
        return 0
    args.name = args.name or "sandbox-python"
    try:
        target = install_kernel_spec(
            user=args.user, prefix=args.prefix, sys_prefix=args.sys_prefix, name=args.name,
            policy=args.policy,
        )  # fmt: skip
    except InstallError as exc:
        print(f"sandbox-kernel install: {exc}", file=sys.stderr)
        return 2
    print(f"installed kernel spec {args.name!r} in {target}")
    print(f"installed kernel spec {args.name + GUARDED_SUFFIX!r} beside it (the guarded mode)")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from sandbox_kernel.doctor import run_checks

    token = os.environ.get("JUPYTER_GATEWAY_AUTH_TOKEN") or None
    checks = run_checks(args.role, gateway=args.gateway, token=token, spec=args.spec)
    if args.json:
        print(json.dumps([check.model_dump() for check in checks], indent=2))
    else:
        for check in checks:
            print(f"{'ok' if check.ok else 'MISSING':<8} {check.name:<17} {check.detail}")
            if check.fix:
                print(f"{'':<8} {'':<17} fix: {check.fix}")
    return 0 if all(check.ok for check in checks) else 1


def _daemon(args: argparse.Namespace) -> int:
    from sandbox_kernel.repl.daemon import (
        DaemonSettings,
        daemon_status,
        start_daemon,
        stop_daemon,
    )
    from sandbox_kernel.repl.daemon.protocol import DaemonUnavailable, default_socket

    path = args.socket or default_socket()
    if args.action == "start":
        settings = DaemonSettings(socket=path, pool=args.pool, max_sessions=args.max_sessions)
        print(json.dumps(start_daemon(settings), indent=2))
        return 0
    if args.action == "stop":
        stopped = stop_daemon(path)
        print(f"stopped the daemon at {path}" if stopped else f"no daemon answers at {path}")
        return 0
    try:
        print(json.dumps(daemon_status(path), indent=2))
    except DaemonUnavailable as exc:
        print(f"sandbox-kernel daemon: {exc}", file=sys.stderr)
        return 1
    return 0


def _pyodide(args: argparse.Namespace) -> int:
    from sandbox_kernel.repl.pyodide import install_pyodide

    print(f"Pyodide is in {install_pyodide()}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sandbox-kernel", description=_DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("warm", help="compile the guest images into the on-disk cache").set_defaults(
        func=_warm
    )
    run = sub.add_parser("run", help="run code once in a fresh sandbox")
    run.add_argument("file", help="a source file, or - for standard input")
    run.add_argument("--js", action="store_true", help="run JavaScript (QuickJS) instead")
    run.add_argument("--policy", type=Path, default=None, help="a policy TOML file")
    run.add_argument("--workspace", type=Path, default=None, help="host folder mounted at /app")
    run.add_argument("--timeout", type=float, default=None, help="wall-clock seconds")
    run.set_defaults(func=_run)
    sub.add_parser("info", help="versions, image digests, cache folder").set_defaults(func=_info)
    doctor = sub.add_parser("doctor", help="what is installed, cached and missing, and the fixes")
    doctor.add_argument("--json", action="store_true", help="as JSON")
    doctor.add_argument(
        "--role",
        choices=("jupyter", "remote", "gateway"),
        default=None,
        help="this host's part (default: gateway with --gateway, else jupyter)",
    )
    doctor.add_argument(
        "--gateway",
        metavar="URL",
        default=None,
        help="ask this Enterprise Gateway whether it sees the kernel spec "
        "(token: JUPYTER_GATEWAY_AUTH_TOKEN)",
    )
    doctor.add_argument("--spec", default="sandbox-python-distributed",
                        help="the spec --gateway looks for")  # fmt: skip
    doctor.set_defaults(func=_doctor)
    install = sub.add_parser("install", help="install the sandbox-python Jupyter kernel spec")
    where = install.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="for this user only")
    where.add_argument("--sys-prefix", action="store_true", help="into this environment")
    where.add_argument("--prefix", default=None, help="under this prefix")
    install.add_argument("--name", default=None, help="the kernel spec's name")
    install.add_argument("--policy", type=Path, default=None,
                         help="a policy file every kernel of this spec loads")  # fmt: skip
    gateway = install.add_argument_group("Jupyter Enterprise Gateway (README: gateways)")
    gateway.add_argument("--enterprise-gateway", choices=("distributed", "kubernetes"),
                         help="write the spec for this process proxy instead")  # fmt: skip
    gateway.add_argument("--remote-python", help="distributed: the Python on the remote hosts")
    gateway.add_argument("--remote-hosts", help="distributed: host1,host2 (else EG's own list)")
    gateway.add_argument("--kernel-ip", help="distributed: the address the kernel binds")
    gateway.add_argument(
        "--remote-workspace",
        help="distributed: the kernels' /app on the remote host (else private)",
    )
    gateway.add_argument(
        "--gateway-python",
        type=Path,
        help="install into the gateway's environment (its bin/python)",
    )
    gateway.add_argument("--image", help="kubernetes: the kernel image (deploy/kubernetes)")
    gateway.add_argument("--launcher-scripts", type=Path,
                         help="kubernetes: EG's folder with launch_kubernetes.py")  # fmt: skip
    install.set_defaults(func=_install)
    daemon = sub.add_parser("daemon", help="the REPL daemon: warm sandbox sessions on a socket")
    daemon.add_argument("action", choices=("start", "stop", "status"))
    daemon.add_argument("--socket", type=Path, default=None, help="default ~/.rlm/daemon.sock")
    daemon.add_argument("--pool", type=int, default=2, help="warm workers kept waiting")
    daemon.add_argument("--max-sessions", type=int, default=16, help="sessions at once")
    daemon.set_defaults(func=_daemon)
    pyodide = sub.add_parser("pyodide", help="the pyodide REPL backend's files")
    pyodide.add_argument("action", choices=("install",), help="fetch the pinned npm package")
    pyodide.set_defaults(func=_pyodide)
    add_runner_subcommands(sub)  # runner sql|python|datasets, capsules list|show
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        status: int = args.func(args)
    except (SandboxError, OSError) as exc:
        print(f"sandbox-kernel: {exc}", file=sys.stderr)
        return 2
    return status


if __name__ == "__main__":
    sys.exit(main())

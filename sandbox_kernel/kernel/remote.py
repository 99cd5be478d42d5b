"""The kernel launcher Jupyter Enterprise Gateway expects: start `sandbox-python` on a remote
host (over SSH, or in a Kubernetes pod) and hand its connection back to the gateway.

`python -m sandbox_kernel.kernel.remote --kernel-id ID --response-address IP:PORT
--public-key KEY [--port-range LO..HI] [--ip ADDRESS] [--workspace PATH]` (or the same from
the environment: KERNEL_ID, RESPONSE_ADDRESS, PUBLIC_KEY, PORT_RANGE, as Enterprise
Gateway's Kubernetes pods receive them; the older `--RemoteProcessProxy.kernel-id` spellings are
read too).

What it does, in the order of Enterprise Gateway's remote-process protocol (launcher version 1):

1. Picks the kernel's five ports and a communication port in the port range, and writes a
   connection file (mode 0600) with a fresh HMAC key.
2. Sends the connection info, with this process's pid, pgid, the communication port and the
   kernel id, to the gateway's response address: the JSON is encrypted with a fresh AES-128 key
   (ECB with PKCS#7 padding, as the gateway decrypts it) and that key with the gateway's RSA
   public key (PKCS#1 v1.5). The cipher choices are the protocol's, not ours.
3. Listens on the communication port for the gateway's requests: `{"signum": N}` (0 is its
   liveness poll; 2 interrupts a cell, as `interrupt_mode: signal` does locally; 9 and 15 stop
   the kernel) and `{"shutdown": 1}`. Anyone who reaches the port can send these, so only those
   signals are obeyed, a request is at most `_REQUEST_MAX_BYTES` read within
   `_REQUEST_SECONDS` in all, each connection is read on a thread of its own (a slow sender
   cannot delay the gateway's interrupt), and anything else is logged and dropped: the kernel
   lives on.
4. Runs the kernel: `SandboxKernelApp` on that connection file, in this process; the file
   (it holds the HMAC key) is removed as soon as the kernel has read it.

A remote kernel has no notebook folder of the user's (the gateway starts it in the remote
user's home, which the client cannot change), so none is shown (SANDBOX_KERNEL_NOTEBOOK_FOLDER
is off, silently) and the kernel runs in a private folder of its own, this process's folder of
the per-user runtime folder (core/runtime_folder.py), removed when the kernel ends and pruned
by the next kernel's start when it was killed. Its workspace (/app) is, as the operator
configures it: `--workspace PATH` (in the kernel spec's argv: `sandbox-kernel install
--enterprise-gateway distributed --remote-workspace PATH`), else SANDBOX_KERNEL_WORKSPACE from
the remote environment, else a private `workspace` folder there, gone with the kernel (and its
run log beside it, unless SANDBOX_KERNEL_RUN_LOG says otherwise).

Errors in the arguments are `RemoteLaunchError`s, printed as one line with exit status 2.

Must not import: wasmtime (the kernel app imports what it needs when it starts).
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jupyter_client.connect import write_connection_file
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sandbox_kernel.core.runtime_folder import (
    kernel_folder,
    private_mkdtemp,
    remove_kernel_folders,
)

__all__ = [
    "LAUNCHER_VERSION",
    "RemoteLaunch",
    "RemoteLaunchError",
    "encrypt_connection_info",
    "main",
    "parse_launch",
    "remote_environment",
]

LAUNCHER_VERSION = 1  # the payload version Enterprise Gateway 3 decodes
_PORT_NAMES = ("shell_port", "iopub_port", "stdin_port", "hb_port", "control_port")
_OBEYED_SIGNALS = frozenset({0, signal.SIGINT, signal.SIGTERM, signal.SIGKILL})
_REQUEST_MAX_BYTES = 4096
_REQUEST_SECONDS = 5.0  # for a whole request, not for each read
_CONNECTIONS = 64  # requests read at once; the gateway sends one at a time
_RESPONSE_SECONDS = 30.0
_BIND_ATTEMPTS = 20

log = logging.getLogger("sandbox_kernel.remote")


class RemoteLaunchError(ValueError):
    """The launcher's arguments or environment cannot start a kernel; the message says why."""


class RemoteLaunch(BaseModel):
    """What the gateway asked for, checked."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kernel_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$")
    response_host: str = Field(min_length=1, max_length=255)
    response_port: int = Field(ge=1, le=65535)
    public_key: str = Field(min_length=1, max_length=16384)
    port_low: int = Field(default=0, ge=0, le=65535)
    port_high: int = Field(default=0, ge=0, le=65535)
    ip: str = Field(default="0.0.0.0", min_length=1, max_length=255)
    workspace: Path | None = None

    @field_validator("public_key")
    @classmethod
    def _base64(cls, value: str) -> str:
        try:
            base64.b64decode(value.encode(), validate=True)
        except ValueError as exc:
            raise ValueError("the public key is not base64") from exc
        return value


def parse_launch(argv: Sequence[str], environ: Mapping[str, str]) -> RemoteLaunch:
    """The launch request from the arguments, falling back to the environment (Kubernetes)."""
    parser = argparse.ArgumentParser(prog="python -m sandbox_kernel.kernel.remote")
    for name in ("kernel-id", "response-address", "public-key", "port-range"):
        dest = name.replace("-", "_")
        parser.add_argument(f"--{name}", f"--RemoteProcessProxy.{name}", dest=dest)
    # Enterprise Gateway's own kernel specs pass these; a sandboxed kernel has no Spark or Dask.
    parser.add_argument("--RemoteProcessProxy.spark-context-initialization-mode", dest="_mode")
    parser.add_argument("--spark-context-initialization-mode", dest="_mode")
    parser.add_argument("--RemoteProcessProxy.cluster-type", "--cluster-type", dest="_cluster")
    parser.add_argument("--ip", default=None, help="the address the kernel's ports bind")
    parser.add_argument("--workspace", default=None, help="the folder mounted at /app")
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        raise RemoteLaunchError("unrecognised launcher arguments (see --help)") from exc
    if args._mode not in (None, "none") or args._cluster not in (None, "none", "spark"):
        raise RemoteLaunchError("sandbox-python has no Spark or Dask context: use mode 'none'")

    def need(value: str | None, env_name: str, what: str) -> str:
        found = value or environ.get(env_name)
        if not found:
            raise RemoteLaunchError(f"the gateway gave no {what}")
        return found

    kernel_id = need(args.kernel_id, "KERNEL_ID", "kernel id")
    address = need(args.response_address, "RESPONSE_ADDRESS", "response address")
    public_key = need(args.public_key, "PUBLIC_KEY", "public key")
    host, _, port = address.rpartition(":")
    low, high = _port_range(args.port_range or environ.get("PORT_RANGE"))
    try:
        return RemoteLaunch(
            kernel_id=kernel_id, response_host=host, response_port=int(port) if port.isdigit()
            else 0, public_key=public_key, port_low=low, port_high=high,
            **({"ip": args.ip} if args.ip else {}),
            workspace=Path(args.workspace).expanduser() if args.workspace else None,
        )  # fmt: skip
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise RemoteLaunchError(f"bad launch request: {problems}") from None


def _port_range(text: str | None) -> tuple[int, int]:
    if not text:
        return 0, 0
    low, sep, high = text.partition("..")
    if not sep or not low.isdigit() or not high.isdigit() or int(low) > int(high):
        raise RemoteLaunchError(f"the port range {text!r} is not LOW..HIGH")
    if int(low) != int(high) and int(high) - int(low) < 6:
        raise RemoteLaunchError(f"the port range {text!r} is too small for six ports")
    return int(low), int(high)


def _bind(launch: RemoteLaunch) -> socket.socket:
    """A TCP socket bound in the port range (any free port when the range is 0..0)."""
    for _ in range(_BIND_ATTEMPTS):
        port = 0
        if launch.port_high:
            port = launch.port_low + secrets.randbelow(launch.port_high - launch.port_low + 1)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((launch.ip, port))
        except OSError:
            sock.close()
            continue
        return sock
    raise RemoteLaunchError(
        f"no free port on {launch.ip} in {launch.port_low}..{launch.port_high} "
        f"after {_BIND_ATTEMPTS} tries"
    )


def encrypt_connection_info(info: Mapping[str, Any], public_key: str) -> bytes:
    """The version-1 payload: base64 of JSON {version, key, conn_info} (module docstring, 2)."""
    try:
        from cryptography.hazmat.primitives import padding, serialization
        from cryptography.hazmat.primitives.asymmetric import padding as asymmetric
        from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    except ImportError as exc:  # pragma: no cover - the extra is part of the documented install
        raise RemoteLaunchError(
            "the Enterprise Gateway launcher needs `pip install sandbox-kernel[enterprise-gateway]`"
        ) from exc
    try:
        key = serialization.load_der_public_key(base64.b64decode(public_key))
    except ValueError as exc:
        raise RemoteLaunchError("the gateway's public key is not an RSA key in DER") from exc
    if not isinstance(key, RSAPublicKey):
        raise RemoteLaunchError("the gateway's public key is not an RSA key")
    aes_key = secrets.token_bytes(16)
    padder = padding.PKCS7(128).padder()
    plain = padder.update(json.dumps(dict(info)).encode()) + padder.finalize()
    encryptor = Cipher(algorithms.AES(aes_key), modes.ECB()).encryptor()
    sealed = encryptor.update(plain) + encryptor.finalize()
    payload = {
        "version": LAUNCHER_VERSION,
        "key": base64.b64encode(key.encrypt(aes_key, asymmetric.PKCS1v15())).decode(),
        "conn_info": base64.b64encode(sealed).decode(),
    }
    return base64.b64encode(json.dumps(payload).encode())


def _send_connection_info(launch: RemoteLaunch, info: Mapping[str, Any]) -> None:
    payload = encrypt_connection_info(info, launch.public_key)
    address = (launch.response_host, launch.response_port)
    with socket.create_connection(address, timeout=_RESPONSE_SECONDS) as sock:
        sock.sendall(payload)


def _read_request(conn: socket.socket) -> dict[str, Any] | None:
    """One request: JSON sent then closed, at most `_REQUEST_MAX_BYTES` within
    `_REQUEST_SECONDS` for the whole request (a byte a second must not stretch it)."""
    deadline = time.monotonic() + _REQUEST_SECONDS
    data = b""
    try:
        while len(data) <= _REQUEST_MAX_BYTES:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            conn.settimeout(left)
            chunk = conn.recv(1024)
            if not chunk:
                break
            data += chunk
    except OSError:
        log.warning("communication port: a request did not finish in time; dropped")
        return None
    if len(data) > _REQUEST_MAX_BYTES:
        log.warning("communication port: a request over %d bytes; dropped", _REQUEST_MAX_BYTES)
        return None
    try:
        request = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        log.warning("communication port: a request that is not JSON; dropped")
        return None
    return request if isinstance(request, dict) else None


def _obey(request: Mapping[str, Any]) -> bool:
    """Act on one request; True when the gateway asked the listener to stop."""
    signum = request.get("signum")
    if signum is not None:
        if type(signum) is int and signum in _OBEYED_SIGNALS:
            if signum:
                log.info("communication port: signal %d from the gateway", signum)
                if signum != signal.SIGINT:  # the kernel ends without its exit handlers
                    remove_kernel_folders()
                os.kill(os.getpid(), signum)
        else:
            log.warning("communication port: signal %r is not one the gateway sends; ignored",
                        signum)  # fmt: skip
    return bool(request.get("shutdown"))


def _listen(server: socket.socket) -> None:
    """The communication port's loop: each connection served on a thread of its own (a slow
    sender must not hold the gateway's next request), at most `_CONNECTIONS` at once (more
    are closed at once), until a request asks the listener to shut down."""
    server.listen(8)
    slots = threading.BoundedSemaphore(_CONNECTIONS)
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        if not slots.acquire(blocking=False):
            log.warning("communication port: %d requests are being read; one dropped",
                        _CONNECTIONS)  # fmt: skip
            conn.close()
            continue
        threading.Thread(
            target=_serve, args=(server, conn, slots), name="eg-comm-request", daemon=True
        ).start()


def _serve(server: socket.socket, conn: socket.socket, slots: threading.BoundedSemaphore) -> None:
    try:
        with conn:
            request = _read_request(conn)
        if request is not None and _obey(request):
            server.close()  # the accept loop ends
    finally:
        slots.release()


def start_listener(server: socket.socket) -> threading.Thread:
    """Serve the communication port on a daemon thread (it dies with the kernel)."""
    thread = threading.Thread(target=_listen, args=(server,), name="eg-comm-port", daemon=True)
    thread.start()
    return thread


def _prepare(launch: RemoteLaunch) -> tuple[Path, socket.socket]:
    """Ports chosen, the connection file written and sent; the bound communication socket."""
    held = [_bind(launch) for _ in _PORT_NAMES]
    ports = {name: sock.getsockname()[1] for name, sock in zip(_PORT_NAMES, held, strict=True)}
    comm = _bind(launch)
    folder = private_mkdtemp("sandbox-kernel-connection-")
    connection_file = folder / f"kernel-{launch.kernel_id}.json"
    key = secrets.token_hex(16).encode()
    for sock in held:  # the kernel binds them next; held until now so no two are the same
        sock.close()
    _, info = write_connection_file(str(connection_file), ip=launch.ip, key=key, **ports)
    report: dict[str, Any] = {
        **info, "key": key.decode(), "pid": os.getpid(), "pgid": os.getpgid(0),
        "comm_port": comm.getsockname()[1], "kernel_id": launch.kernel_id,
    }  # fmt: skip
    _send_connection_info(launch, report)
    return connection_file, comm


def remote_environment(launch: RemoteLaunch, environ: Mapping[str, str]) -> dict[str, str]:
    """The settings a remote kernel starts with (module docstring): no notebook folder, and
    the operator's workspace or a private one in `kernel_folder()`, also its working folder."""
    folder = kernel_folder()
    updates = {"SANDBOX_KERNEL_NOTEBOOK_FOLDER": "off"}
    if launch.workspace is not None:
        updates["SANDBOX_KERNEL_WORKSPACE"] = str(launch.workspace)
    elif not environ.get("SANDBOX_KERNEL_WORKSPACE"):
        workspace = folder / "workspace"
        workspace.mkdir(mode=0o700, exist_ok=True)
        updates["SANDBOX_KERNEL_WORKSPACE"] = str(workspace)
        if not environ.get("SANDBOX_KERNEL_RUN_LOG"):
            updates["SANDBOX_KERNEL_RUN_LOG"] = str(folder / "runs.jsonl")
    return updates


def main(argv: Sequence[str] | None = None) -> int:
    """Launch: parse, prepare and report, listen, then run the kernel until it is shut down."""
    logging.basicConfig(level=logging.INFO, format="[%(levelname)1.1s %(asctime)s %(name)s] "
                        "%(message)s")  # fmt: skip
    try:
        launch = parse_launch(sys.argv[1:] if argv is None else argv, os.environ)
        os.environ.update(remote_environment(launch, os.environ))
        os.chdir(kernel_folder())  # not the remote user's home: nothing of the user's is shown
        connection_file, comm = _prepare(launch)
    except (RemoteLaunchError, OSError) as exc:
        print(f"sandbox-kernel remote launcher: {exc}", file=sys.stderr)
        return 2
    start_listener(comm)
    from sandbox_kernel.kernel.app import SandboxKernelApp

    app = SandboxKernelApp.instance()
    try:
        app.initialize(["-f", str(connection_file)])  # type: ignore[no-untyped-call]
    finally:  # read once: the key leaves no file behind, whatever ends the kernel later
        connection_file.unlink(missing_ok=True)
        connection_file.parent.rmdir()
    app.start()  # type: ignore[no-untyped-call]
    return 0


if __name__ == "__main__":
    sys.exit(main())

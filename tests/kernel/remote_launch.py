"""The gateway's side of Enterprise Gateway's remote-process protocol, for tests of our launcher
(sandbox_kernel/kernel/remote.py) without a gateway: an RSA key pair, a response socket that
takes one payload and decrypts it as Enterprise Gateway does (RSA PKCS#1 v1.5 for the AES key,
AES-ECB with PKCS#7 padding for the connection info), and the launcher started in a process
of its own on this machine.
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import padding, serialization
from cryptography.hazmat.primitives.asymmetric import padding as asymmetric
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from jupyter_client import BlockingKernelClient, KernelManager

from tests.kernel.conftest import STARTUP_TIMEOUT_SECONDS, RunningKernel, kernel_env


@dataclass
class ResponseListener:
    """The gateway's response address and key pair (1024-bit RSA, as Enterprise Gateway's)."""

    key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=1024)
    )
    server: socket.socket = field(default_factory=socket.socket)

    def __post_init__(self) -> None:
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(1)
        self.server.settimeout(120)

    @property
    def address(self) -> str:
        host, port = self.server.getsockname()
        return f"{host}:{port}"

    @property
    def public_key(self) -> str:
        der = self.key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return base64.b64encode(der).decode()

    def receive(self) -> dict[str, Any]:
        """One launcher's payload, decrypted: its connection info."""
        conn, _ = self.server.accept()
        with conn:
            data = b""
            while chunk := conn.recv(4096):
                data += chunk
        payload = json.loads(base64.b64decode(data))
        assert payload["version"] == 1, payload
        aes_key = self.key.decrypt(base64.b64decode(payload["key"]), asymmetric.PKCS1v15())
        decryptor = Cipher(algorithms.AES(aes_key), modes.ECB()).decryptor()
        padded = decryptor.update(base64.b64decode(payload["conn_info"])) + decryptor.finalize()
        unpadder = padding.PKCS7(128).unpadder()
        info: dict[str, Any] = json.loads(unpadder.update(padded) + unpadder.finalize())
        return info

    def close(self) -> None:
        self.server.close()


def launch_locally(
    listener: ResponseListener, root: Path, *extra: str
) -> tuple[subprocess.Popen[bytes], Path]:
    """Our launcher as the distributed proxy starts it, here, with its output in a log file."""
    log = root / f"launcher-{uuid.uuid4().hex[:8]}.log"
    command = [
        sys.executable, "-m", "sandbox_kernel.kernel.remote",
        "--RemoteProcessProxy.kernel-id", str(uuid.uuid4()),
        "--RemoteProcessProxy.response-address", listener.address,
        "--RemoteProcessProxy.public-key", listener.public_key,
        "--RemoteProcessProxy.port-range", "0..0",
        "--ip", "127.0.0.1", *extra,
    ]  # fmt: skip
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, env=kernel_env(root), cwd=root
        )
    return process, log


def send_request(port: int, data: bytes) -> None:
    """What the gateway sends to the communication port: bytes, then end of stream."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)


class LaunchedKernel(RunningKernel):
    """A kernel our launcher started, reached with the connection info it reported."""

    process: subprocess.Popen[bytes]
    info: dict[str, object]
    log: Path

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    @property
    def comm_port(self) -> int:
        return int(self.info["comm_port"])  # type: ignore[call-overload]

    def request(self, data: bytes) -> None:
        """Send `data` to the kernel's communication port, as the gateway does."""
        send_request(self.comm_port, data)

    def stop(self) -> None:
        self.shutdown()
        self.process.kill()
        self.process.wait()


def start_launched(root: Path) -> LaunchedKernel:
    listener = ResponseListener()
    try:
        process, log = launch_locally(listener, root)
        info = listener.receive()
    finally:
        listener.close()
    client = BlockingKernelClient()
    client.load_connection_info(info)
    client.start_channels()
    client.wait_for_ready(timeout=STARTUP_TIMEOUT_SECONDS)
    kernel = LaunchedKernel(KernelManager(), client, root)
    kernel.process, kernel.info, kernel.log = process, info, log
    return kernel

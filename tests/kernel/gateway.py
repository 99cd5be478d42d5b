"""Jupyter Kernel Gateway as agent servers and remote frontends use it: `jupyter
kernelgateway` in a process of its own on 127.0.0.1 with a token, kernels created and
interrupted over its REST API, cells run over its WebSocket in the Jupyter protocol's JSON
form (websocket-client, the client jupyter_server itself depends on).
"""

from __future__ import annotations

import json
import socket as pysocket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import websocket

from tests.kernel.conftest import CELL_TIMEOUT_SECONDS, Execution, Output, kernel_env
from tests.processes import stop, wait_until_up

TOKEN = "gateway-token-0123456789abcdef"


@dataclass
class Gateway:
    """A running `jupyter kernelgateway`."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path
    token: str = TOKEN

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def api(self, method: str, path: str, **options: Any) -> httpx.Response:
        return httpx.request(
            method, f"{self.url}{path}", headers=self.headers, timeout=120, **options
        )

    def start_kernel(self, name: str, env: dict[str, str] | None = None) -> str:
        body: dict[str, Any] = {"name": name, **({"env": env} if env else {})}
        answer = self.api("POST", "/api/kernels", json=body)
        assert answer.status_code == 201, answer.text
        kernel_id: str = answer.json()["id"]
        return kernel_id

    def connect(self, kernel_id: str) -> GatewayKernel:
        ws_url = self.url.replace("http://", "ws://") + f"/api/kernels/{kernel_id}/channels"
        socket = websocket.create_connection(
            ws_url,
            header=[f"Authorization: token {self.token}"],
            timeout=CELL_TIMEOUT_SECONDS,
            # A message is written as header then payload: without TCP_NODELAY every cell
            # waits out the gateway's delayed ACK (40 ms), whatever the kernel.
            sockopt=[(pysocket.IPPROTO_TCP, pysocket.TCP_NODELAY, 1)],
        )
        return GatewayKernel(kernel_id, socket)

    def stop(self) -> None:
        stop(self.process)


def start_gateway(root: Path, port: int) -> Gateway:
    """`jupyter kernelgateway` on 127.0.0.1:`port`; its kernels live in `root` (their
    workspace, policy and run log: tests/kernel/conftest.py's kernel_env)."""
    command = [
        str(Path(sys.executable).parent / "jupyter"), "kernelgateway",
        "--KernelGatewayApp.ip=127.0.0.1", f"--KernelGatewayApp.port={port}",
        f"--KernelGatewayApp.auth_token={TOKEN}",
        "--KernelGatewayApp.port_retries=0",
        "--JupyterWebsocketPersonality.list_kernels=True",  # jupyter server lists them
    ]  # fmt: skip
    return serve_gateway(command, root, port, kernel_env(root), "the gateway")


def serve_gateway(
    command: list[str], root: Path, port: int, env: dict[str, str], what: str
) -> Gateway:
    """Start a gateway's `command` in `root` (its log: `root`/gateway.log) and wait until its
    REST API answers on 127.0.0.1:`port` with our token."""
    log = root / "gateway.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, env=env, cwd=root
        )
    gateway = Gateway(f"http://127.0.0.1:{port}", process, log)
    wait_until_up(
        lambda: gateway.api("GET", "/api/kernelspecs").status_code == 200, process, log, what
    )
    return gateway


@dataclass
class GatewayKernel:
    """One WebSocket to one kernel of the gateway."""

    kernel_id: str
    socket: websocket.WebSocket
    session: str = field(default_factory=lambda: uuid.uuid4().hex)

    def send(self, msg_type: str, content: dict[str, Any], channel: str = "shell") -> str:
        msg_id = uuid.uuid4().hex
        header = {
            "msg_id": msg_id,
            "msg_type": msg_type,
            "session": self.session,
            "username": "test",
            "version": "5.3",
            "date": datetime.now(UTC).isoformat(),
        }
        message = {"header": header, "parent_header": {}, "metadata": {}, "content": content,
                   "channel": channel, "buffers": []}  # fmt: skip
        self.socket.send(json.dumps(message))
        return msg_id

    def submit(self, code: str) -> Execution:
        content = {"code": code, "silent": False, "store_history": True,
                   "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}  # fmt: skip
        return Execution(self.send("execute_request", content), time.monotonic())

    def collect(self, execution: Execution, timeout: float = CELL_TIMEOUT_SECONDS) -> Execution:
        """Read messages until the execution's reply and its idle status have both come."""
        idle = False
        deadline = time.monotonic() + timeout
        while not (idle and execution.reply):
            assert time.monotonic() < deadline, f"no reply within {timeout} s"
            message = json.loads(self.socket.recv())
            if message.get("parent_header", {}).get("msg_id") != execution.msg_id:
                continue
            kind, content = message["msg_type"], message["content"]
            if kind == "execute_reply":
                execution.reply, execution.replied_at = content, time.monotonic()
            elif kind == "status":
                idle = idle or content["execution_state"] == "idle"
            elif kind != "execute_input":
                execution.outputs.append(Output(kind, content, time.monotonic()))
        return execution

    def execute(self, code: str, timeout: float = CELL_TIMEOUT_SECONDS) -> Execution:
        return self.collect(self.submit(code), timeout)

    def close(self) -> None:
        self.socket.close()

"""Notebooks run by nbclient and papermill on a gateway's kernels, through jupyter_server's own
gateway client (the classes `jupyter server --gateway-url` uses).

jupyter_server's `GatewayKernelManager` is written for the server's kernel manager, which
passes the kernel's name to `start_kernel` and authenticates the WebSocket itself. Used by
nbclient directly it starts the gateway's default kernel instead of the one asked for, and its
client opens the kernel's WebSocket without the token, which a token-protected gateway refuses
(401). `GatewayNotebookKernelManager` fixes both and changes nothing else. The gateway is named as
jupyter_server's gateway client reads it, from JUPYTER_GATEWAY_URL and
JUPYTER_GATEWAY_AUTH_TOKEN (or `GatewayClient.instance().url = ...`); then

    papermill.execute_notebook("in.ipynb", "out.ipynb", kernel_name="sandbox-python",
        kernel_manager_class="sandbox_kernel.kernel.gateway_client.GatewayNotebookKernelManager")
    nbclient.NotebookClient(nb, kernel_name="sandbox-python",
        kernel_manager_class=GatewayNotebookKernelManager).execute()

(The `jupyter execute` and `papermill` commands cannot take a kernel manager class: nbclient's
command does not pass its configuration on, papermill's has no such option.)

Must not import: wasmtime. Needs jupyter_server and websocket-client (JupyterLab brings both).
"""

from __future__ import annotations

from threading import Thread
from typing import Any

import websocket
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_server.gateway.gateway_client import GatewayClient
from jupyter_server.gateway.managers import GatewayKernelClient, GatewayKernelManager
from jupyter_server.utils import url_escape, url_path_join
from traitlets import DottedObjectName, Type

__all__ = ["GatewayNotebookKernelClient", "GatewayNotebookKernelManager"]


class GatewayNotebookKernelClient(GatewayKernelClient):
    """jupyter_server's gateway client, whose WebSocket carries the gateway's auth header.

    The same steps as `GatewayKernelClient.start_channels` (jupyter_server 2.x), with the
    headers of the gateway's REST requests on the WebSocket's opening request too."""

    async def start_channels(  # type: ignore[override]  # async, as jupyter_server's is
        self, shell: bool = True, iopub: bool = True, stdin: bool = True, hb: bool = True,
        control: bool = True,
    ) -> None:  # fmt: skip
        gateway = GatewayClient.instance()
        url = url_path_join(
            gateway.ws_url or "", gateway.kernels_endpoint, url_escape(self.kernel_id), "channels"
        )
        headers = gateway.load_connection_args().get("headers", {})  # type: ignore[no-untyped-call]
        self.channel_socket = websocket.create_connection(
            url,
            timeout=gateway.KERNEL_LAUNCH_TIMEOUT,
            enable_multithread=True,
            sslopt={"ca_certs": gateway.ca_certs, "certfile": gateway.client_cert,
                    "keyfile": gateway.client_key},
            header=[f"{key}: {value}" for key, value in headers.items()],
        )  # fmt: skip
        AsyncKernelClient.start_channels(
            self, shell=shell, iopub=iopub, stdin=stdin, hb=hb, control=control
        )
        self.response_router = Thread(target=self._route_responses)
        self.response_router.start()


class GatewayNotebookKernelManager(GatewayKernelManager):
    """jupyter_server's gateway kernel manager that starts the kernel it was made for."""

    client_class = DottedObjectName(
        "sandbox_kernel.kernel.gateway_client.GatewayNotebookKernelClient"
    )
    client_factory = Type(klass=GatewayNotebookKernelClient)

    async def start_kernel(self, **kwargs: Any) -> None:  # type: ignore[override]
        kwargs.setdefault("kernel_name", self.kernel_name)
        await super().start_kernel(**kwargs)

"""sandbox-python served by Jupyter Kernel Gateway, reached as remote clients reach it: a
kernel created over REST, cells over the WebSocket (streamed output, rich output through the
output firewall), interrupt and restart over REST, two clients at once, a client that leaves
mid-cell. ipykernel's `python3`, through the same gateway, runs the same cells to compare.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kernel.conftest import KERNEL_NAME, install_kernel_spec
from tests.kernel.gateway import TOKEN, Gateway, start_gateway
from tests.processes import free_port, stop, wait_until_up

pytestmark = pytest.mark.slow

STREAMED = "import time\nfor i in range(3):\n    print('line', i, flush=True)\n    time.sleep(0.5)"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    install_kernel_spec()
    found = start_gateway(tmp_path_factory.mktemp("gateway"), free_port())
    try:
        yield found
    finally:
        found.stop()


@pytest.mark.parametrize("name", [KERNEL_NAME, "python3"])
def test_cells_over_the_websocket_as_on_ipykernel(gateway: Gateway, name: str) -> None:
    kernel = gateway.connect(gateway.start_kernel(name))
    try:
        hello = kernel.execute("x = 20\nprint('hello')\nx + 22")
        assert hello.status == "ok", hello.describe()
        assert hello.stream() == "hello\n" and hello.result() == "42"
        streamed = kernel.execute(STREAMED)
        lines = [out for out in streamed.of_type("stream")]
        assert "".join(o.content["text"] for o in lines) == "line 0\nline 1\nline 2\n"
        assert lines[0].at < streamed.replied_at - 0.5, "output came only with the reply"
        failed = kernel.execute("1 / 0")
        assert failed.status == "error" and failed.reply["ename"] == "ZeroDivisionError"
    finally:
        kernel.close()
        gateway.api("DELETE", f"/api/kernels/{kernel.kernel_id}")


def test_rich_output_passes_the_firewall(gateway: Gateway) -> None:
    kernel = gateway.connect(gateway.start_kernel(KERNEL_NAME))
    try:
        shown = kernel.execute(
            "display({'text/html': '<b>bold</b><img src=x onerror=alert(1)>',"
            " 'application/javascript': 'alert(2)'}, raw=True)"
        )
        (data,) = [out.content["data"] for out in shown.of_type("display_data")]
        assert "application/javascript" not in data
        assert "<b>bold</b>" in data["text/html"] and "onerror" not in data["text/html"]
        assert "the output firewall removed" in shown.stream("stderr")
    finally:
        kernel.close()
        gateway.api("DELETE", f"/api/kernels/{kernel.kernel_id}")


def test_interrupt_and_restart_over_rest(gateway: Gateway) -> None:
    kernel_id = gateway.start_kernel(KERNEL_NAME)
    kernel = gateway.connect(kernel_id)
    try:
        assert kernel.execute("kept = 7").status == "ok"
        running = kernel.submit("while True:\n    pass")
        time.sleep(1.0)
        assert gateway.api("POST", f"/api/kernels/{kernel_id}/interrupt").status_code == 204
        stopped = kernel.collect(running, timeout=30)
        assert stopped.status == "error" and stopped.reply["ename"] == "KeyboardInterrupt"
        assert kernel.execute("kept").result() == "7"  # the session survived the interrupt
        restarted = gateway.api("POST", f"/api/kernels/{kernel_id}/restart")
        assert restarted.status_code == 200, restarted.text
    finally:
        kernel.close()
    kernel = gateway.connect(kernel_id)
    try:
        after = kernel.execute("kept")
        assert after.status == "error" and after.reply["ename"] == "NameError"
        assert kernel.execute("1 + 1").result() == "2"
    finally:
        kernel.close()
        gateway.api("DELETE", f"/api/kernels/{kernel_id}")


def test_two_clients_at_once(gateway: Gateway) -> None:
    kernels = [gateway.connect(gateway.start_kernel(KERNEL_NAME)) for _ in range(2)]
    results: dict[int, str] = {}

    def run(index: int) -> None:
        code = f"import time\ntime.sleep(1)\nsum(range({index + 1} * 10))"
        results[index] = kernels[index].execute(code).result()

    try:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert results == {0: "45", 1: "190"}
        assert time.monotonic() - started < 10
    finally:
        for kernel in kernels:
            kernel.close()
            gateway.api("DELETE", f"/api/kernels/{kernel.kernel_id}")


def test_a_client_that_leaves_mid_cell(gateway: Gateway) -> None:
    """The cell runs on without its client; the next client finds its result and the kernel."""
    kernel_id = gateway.start_kernel(KERNEL_NAME)
    leaving = gateway.connect(kernel_id)
    leaving.submit("import time\ntime.sleep(2)\nfinished = 'yes'")
    time.sleep(0.5)
    leaving.close()
    kernel = gateway.connect(kernel_id)
    try:
        deadline = time.monotonic() + 30
        while (found := kernel.execute("globals().get('finished')")).result() != "'yes'":
            assert time.monotonic() < deadline, found.describe()
            time.sleep(0.5)
        listed = gateway.api("GET", f"/api/kernels/{kernel_id}").json()
        assert listed["execution_state"] == "idle"
    finally:
        kernel.close()
        gateway.api("DELETE", f"/api/kernels/{kernel_id}")


def test_jupyter_server_with_gateway_url_runs_cells_on_the_gateway(
    gateway: Gateway, tmp_path: Path
) -> None:
    """`jupyter server --gateway-url`: the server holds no kernel of its own; a client of the
    server (REST and WebSocket, as JupyterLab uses them) runs cells on the gateway's."""
    port, token = free_port(), "server-token-0123456789abcdef"
    log = tmp_path / "server.log"
    with log.open("wb") as output:
        server = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "jupyter"), "server", "--no-browser",
                "--ip=127.0.0.1", f"--port={port}", f"--IdentityProvider.token={token}",
                f"--gateway-url={gateway.url}", f"--GatewayClient.auth_token={TOKEN}",
                f"--ServerApp.root_dir={tmp_path}",
                *(["--allow-root"] if os.geteuid() == 0 else []),
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )  # fmt: skip
    front = Gateway(f"http://127.0.0.1:{port}", server, log, token=token)
    try:
        wait_until_up(
            lambda: front.api("GET", "/api/status").status_code == 200, server, log,
            "jupyter server",
        )  # fmt: skip
        kernel_id = front.start_kernel(KERNEL_NAME)
        on_gateway = [k["id"] for k in gateway.api("GET", "/api/kernels").json()]
        assert kernel_id in on_gateway, "the kernel should run on the gateway"
        kernel = front.connect(kernel_id)
        try:
            cell = kernel.execute("import sys\nprint(sys.platform)\n6 * 7")
            assert cell.stream() == "wasi\n" and cell.result() == "42", cell.describe()
        finally:
            kernel.close()
            front.api("DELETE", f"/api/kernels/{kernel_id}")
    finally:
        stop(server)


_NOTEBOOK_ON_THE_GATEWAY = """
import sys, nbclient, nbformat, papermill
manager = sys.argv[1]
nb = nbformat.v4.new_notebook()
nb.cells = [nbformat.v4.new_code_cell("import sys\\nprint(sys.platform)"),
            nbformat.v4.new_code_cell("6 * 7")]
nbformat.write(nb, "in.ipynb")
out = papermill.execute_notebook("in.ipynb", "out.ipynb", kernel_name="sandbox-python",
                                 kernel_manager_class=manager, progress_bar=False)
print("papermill", [c.outputs[0].get("text") or c.outputs[0]["data"]["text/plain"]
                    for c in out.cells])
nb = nbformat.read("in.ipynb", as_version=4)
nbclient.NotebookClient(nb, kernel_name="sandbox-python", kernel_manager_class=manager).execute()
print("nbclient", [c.outputs[0].get("text") or c.outputs[0]["data"]["text/plain"]
                   for c in nb.cells])
"""


def _notebook_on_the_gateway(gateway: Gateway, root: Path, manager: str) -> str:
    script = root / "run.py"
    script.write_text(_NOTEBOOK_ON_THE_GATEWAY)
    env = {**os.environ, "JUPYTER_GATEWAY_URL": gateway.url,
           "JUPYTER_GATEWAY_AUTH_TOKEN": gateway.token}  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(script), manager], capture_output=True, text=True, cwd=root,
        env=env, timeout=300,
    )  # fmt: skip
    return done.stdout + done.stderr


def test_papermill_and_nbclient_run_a_notebook_on_the_gateway(
    gateway: Gateway, tmp_path: Path
) -> None:
    """Through jupyter_server's gateway client, as `jupyter server --gateway-url` reaches the
    gateway, with our manager (kernel/gateway_client.py); jupyter_server's own manager, used
    by nbclient, opens the WebSocket without the token and is refused."""
    started = gateway.log.read_text().count("Kernel started")
    output = _notebook_on_the_gateway(
        gateway, tmp_path, "sandbox_kernel.kernel.gateway_client.GatewayNotebookKernelManager"
    )
    assert "papermill ['wasi\\n', '42']" in output, output
    assert "nbclient ['wasi\\n', '42']" in output, output
    assert gateway.log.read_text().count("Kernel started") == started + 2, "on the gateway"
    upstream = _notebook_on_the_gateway(
        gateway, tmp_path, "jupyter_server.gateway.managers.GatewayKernelManager"
    )
    assert "papermill ['wasi" not in upstream and "401" in upstream, upstream

"""ipywidgets through the kernel, message for message against ipykernel: the same cells and the
same frontend comm messages on sandbox-python and on ipykernel (the baseline's ipywidgets and
ipympl are the guest's versions), comparing what a frontend sees: message types in order,
comm targets, models and their state keys, and the values that come back.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kernel.conftest import Execution, RunningKernel, start_ipykernel, start_kernel


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, RunningKernel]]:
    root = tmp_path_factory.mktemp("widgets")
    running = {
        "sandbox": start_kernel(root / "sandbox"),
        "ipykernel": start_ipykernel(root / "ipykernel"),
    }
    yield running
    for kernel in running.values():
        kernel.shutdown()


def comm_send(
    kernel: RunningKernel,
    msg_type: str,
    content: dict[str, Any],
    buffers: list[bytes] = (),  # type: ignore[assignment]
) -> Execution:
    """A frontend's comm message, and the iopub messages it caused (until idle)."""
    kc = kernel.kc
    msg = kc.session.send(kc.shell_channel.socket, msg_type, content, buffers=list(buffers))
    return kernel.collect(Execution(msg["header"]["msg_id"], time.monotonic(), {"status": "comm"}))


def update(comm_id: str, **state: Any) -> dict[str, Any]:
    return {"comm_id": comm_id, "data": {"method": "update", "state": state, "buffer_paths": []}}


def opened(execution: Execution) -> dict[str, dict[str, Any]]:
    """The comms a cell opened: comm_id -> state."""
    return {
        out.content["comm_id"]: out.content["data"]["state"]
        for out in execution.of_type("comm_open")
        if out.content.get("target_name") == "jupyter.widget"
    }


def seen(execution: Execution) -> list[Any]:
    """What a frontend sees, without ids: each message's type and what identifies it."""
    shown: list[Any] = []
    for out in execution.outputs:
        content = out.content
        if out.msg_type == "comm_open":
            state = content["data"]["state"]
            shown.append(("comm_open", content["target_name"], state["_model_name"], sorted(state)))
        elif out.msg_type == "comm_msg":
            data = content["data"]
            shown.append(("comm_msg", data.get("method"), sorted(data.get("state", {}))))
        elif out.msg_type in ("display_data", "execute_result"):
            shown.append((out.msg_type, sorted(content["data"])))
        elif out.msg_type == "stream":
            shown.append(("stream", content["name"], content["text"]))
        else:
            shown.append((out.msg_type,))
    return shown


def both(kernels: dict[str, RunningKernel], code: str) -> dict[str, Execution]:
    return {name: kernel.run_ok(code) for name, kernel in kernels.items()}


def the_model(execution: Execution, name: str) -> str:
    ids = [cid for cid, state in opened(execution).items() if state["_model_name"] == name]
    assert len(ids) == 1, execution.describe()
    return ids[0]


def test_a_slider_opens_and_moves_as_on_ipykernel(kernels: dict[str, RunningKernel]) -> None:
    both(kernels, "import ipywidgets as w")
    made = both(kernels, "s = w.IntSlider(value=3, description='n')\ns")
    assert seen(made["sandbox"]) == seen(made["ipykernel"])
    views = {n: e.of_type("execute_result")[0].content["data"] for n, e in made.items()}
    view = views["sandbox"]["application/vnd.jupyter.widget-view+json"]
    assert view["model_id"] == the_model(made["sandbox"], "IntSliderModel")
    for name, kernel in kernels.items():
        slider = the_model(made[name], "IntSliderModel")
        moved = comm_send(kernel, "comm_msg", update(slider, value=9))
        assert [out.msg_type for out in moved.outputs] in ([], ["comm_msg"]), moved.describe()
        assert kernel.run_ok("s.value").result() == "9"
    infos = {
        name: kernel.reply(kernel.kc.comm_info(target_name="jupyter.widget"))
        for name, kernel in kernels.items()
    }
    assert all(info["status"] == "ok" for info in infos.values())
    assert len(infos["sandbox"]["comms"]) == len(infos["ipykernel"]["comms"])


def test_an_output_widget_captures_as_on_ipykernel(kernels: dict[str, RunningKernel]) -> None:
    both(kernels, "out = w.Output()\ndisplay(out)")
    captured = both(kernels, "with out:\n    print('inside')\nprint('outside')")
    assert seen(captured["sandbox"]) == seen(captured["ipykernel"])
    for execution in captured.values():
        states = [o.content["data"]["state"] for o in execution.of_type("comm_msg")]
        assert states[0] == {"msg_id": execution.msg_id} and states[-1] == {"msg_id": ""}


def test_interact_runs_its_function_on_a_move(kernels: dict[str, RunningKernel]) -> None:
    made = both(kernels, "f = w.interact(lambda x: print('got', x * 2), x=5)")
    assert seen(made["sandbox"]) == seen(made["ipykernel"])
    for name, kernel in kernels.items():
        slider = the_model(made[name], "IntSliderModel")
        moved = comm_send(kernel, "comm_msg", update(slider, value=7))
        assert "got 14" in moved.stream(), (name, moved.describe())
        # The function's output goes to interact's Output widget: the move's own message id.
        captures = [o.content["data"]["state"] for o in moved.of_type("comm_msg")]
        assert {"msg_id": moved.msg_id} in captures, (name, moved.describe())


def test_a_handler_error_does_not_break_the_session(kernels: dict[str, RunningKernel]) -> None:
    sandbox = kernels["sandbox"]
    made = sandbox.run_ok("b = w.IntText()\nb.observe(lambda change: 1 / 0, 'value')\nb")
    box = the_model(made, "IntTextModel")
    comm_send(sandbox, "comm_msg", update(box, value=1))
    assert sandbox.run_ok("b.value").result() == "1"
    assert sandbox.run_ok("6 * 7").result() == "42"


def test_tqdm_notebook_draws_a_bar_widget(kernels: dict[str, RunningKernel]) -> None:
    ran = kernels["sandbox"].run_ok(
        "from tqdm.auto import tqdm\nfor i in tqdm(range(3)):\n    pass"
    )
    models = {state["_model_name"] for state in opened(ran).values()}
    assert {"FloatProgressModel", "HTMLModel", "HBoxModel"} <= models, ran.describe()
    assert "TqdmMonitorWarning" not in ran.stream("stderr")


def test_the_same_cells_in_a_fresh_folder(tmp_path: Path) -> None:
    """A comm_info_request before any widget: an empty answer, not an error."""
    kernel = start_kernel(tmp_path / "fresh")
    try:
        info = kernel.reply(kernel.kc.comm_info())
        assert info == {"status": "ok", "comms": {}}
    finally:
        kernel.shutdown()


def test_the_guest_names_the_hosts_ipykernel(kernels: dict[str, RunningKernel]) -> None:
    """The guest's `ipykernel` names the version the kernel runs on the host (shell.py)."""
    import ipykernel

    shown = kernels["sandbox"].run_ok("import ipykernel\nipykernel.version_info").result()
    assert shown == repr(tuple(ipykernel.version_info[:3]))


def test_an_ipympl_figure_opens_the_same_models(kernels: dict[str, RunningKernel]) -> None:
    """%matplotlib widget: ipympl's canvas and toolbar models, as on ipykernel (the guest's
    matplotlib lacks its WebAgg core, which the guest library restores: package-modules.txt)."""
    drawn = both(
        kernels,
        "%matplotlib widget\nimport matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
        "ax.plot([1, 3, 2]);",
    )
    models = {
        name: sorted(state["_model_name"] for state in opened(execution).values())
        for name, execution in drawn.items()
    }
    assert models["sandbox"] == models["ipykernel"]
    assert "MPLCanvasModel" in models["sandbox"], models
    both(kernels, "%matplotlib inline")


def test_matplotlib_notebook_draws_with_ipympl(kernels: dict[str, RunningKernel]) -> None:
    """%matplotlib notebook (the classic Notebook's JavaScript, which JupyterLab does not run)
    gives ipympl's interactive figure, and says so."""
    sandbox = kernels["sandbox"]
    drawn = sandbox.run_ok("%matplotlib notebook\nfig, ax = plt.subplots()\nax.plot([2, 1]);")
    models = {state["_model_name"] for state in opened(drawn).values()}
    assert "MPLCanvasModel" in models, drawn.describe()
    assert "ipympl" in drawn.stream("stderr")
    sandbox.run_ok("%matplotlib inline")


def test_styled_media_and_linked_widgets_pass_as_on_ipykernel(
    kernels: dict[str, RunningKernel],
) -> None:
    """What the widget firewall looks at, used as ipywidgets means it: styles and layouts
    with colours, grids and var(), an image from bytes and one from a data: URL, a
    description shown as HTML, a jslink between two numbers, an AppLayout: the same
    messages as on ipykernel, nothing removed, the values as sent."""
    code = (
        "import ipywidgets as w\n"
        "png = bytes.fromhex('89504e470d0a1a0a')\n"
        "items = [\n"
        "    w.HTML('<b>b</b>', style={'background': 'lightyellow', 'text_color': 'var(--x)'}),\n"
        "    w.Label('$x^2$', style={'font_family': '\"Helvetica Neue\", Arial'}),\n"
        "    w.Button(description='go', icon='check', style={'button_color': '#ff0000'}),\n"
        "    w.Image(value=png, format='png', width=20),\n"
        "    w.Image(value=b'data:image/png;base64,iVBORw0KGgo=', format='url'),\n"
        "    w.Checkbox(description='<i>html</i>', description_allow_html=True),\n"
        "    w.Box(layout=w.Layout(width='calc(100% - 10px)', border_top='1px solid red')),\n"
        "]\n"
        "a, b = w.IntSlider(), w.IntText()\n"
        "link = w.jslink((a, 'value'), (b, 'value'))\n"
        "app = w.AppLayout(header=w.Button(), center=w.VBox(items + [a, b]), footer=w.Button())\n"
        "app"
    )
    made = both(kernels, code)
    shown = {  # an earlier test's ipympl figure may send a frame of its own meanwhile
        name: [x for x in seen(execution) if x[:2] != ("comm_msg", "custom")]
        for name, execution in made.items()
    }
    assert shown["sandbox"] == shown["ipykernel"]
    assert "[sandbox]" not in made["sandbox"].stream("stderr"), made["sandbox"].describe()
    states = {
        name: sorted(
            json.dumps({k: v for k, v in s.items() if "IPY_MODEL_" not in repr(v)}, sort_keys=True)
            for s in opened(execution).values()
        )
        for name, execution in made.items()
    }  # model ids differ between the kernels: the fields that name one are left out
    assert states["sandbox"] == states["ipykernel"]
    sandbox_formats = [s.get("format") for s in opened(made["sandbox"]).values()]
    assert "url" in sandbox_formats and "png" in sandbox_formats

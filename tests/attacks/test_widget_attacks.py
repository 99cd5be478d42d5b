"""Attacks through widgets and comms, on a real kernel: HTML in a widget's value or description,
a model that loads its own code (anywidget's _esm) or names a view module by URL, a comm
target nobody vouches for, a flood of comm messages from the guest, a 100 MB buffer, a storm
of frontend messages while a cell runs, and a handler that never returns. Each must leave no
script in what reaches the frontend, tell the user what was dropped, keep the kernel's
memory bounded and the session working.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kernel.conftest import Execution, RunningKernel, start_kernel
from tests.kernel.test_widgets import comm_send, opened, update

SCRIPT = '<img src=x onerror="window.top.__pwned=1"><script>window.top.__pwned=1</script>'
NOTE = "[sandbox] the output firewall removed"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningKernel]:
    running = start_kernel(
        tmp_path_factory.mktemp("widget-attacks"),
        policy="[policy]\ntimeout_seconds = 8\nfuel_budget = 200_000_000_000\n",
    )
    running.run_ok("import ipywidgets as w, traitlets")
    yield running
    running.shutdown()


def _comms(execution: Execution) -> str:
    """Every comm message the page got, as text (the note and the inert text/plain repr
    may name what was removed)."""
    return repr([out.content for out in execution.outputs if out.msg_type.startswith("comm_")])


def test_html_in_a_widget_is_sanitized(kernel: RunningKernel) -> None:
    made = kernel.run_ok(f"w.HTML({SCRIPT!r})")
    states = opened(made)
    html = next(s for s in states.values() if s["_model_name"] == "HTMLModel")
    assert "onerror" not in html["value"] and "<script" not in html["value"]
    assert "<img" in html["value"]  # the image itself stays
    assert "onerror" not in _comms(made)


def test_a_description_shown_as_html_is_sanitized_whenever_it_becomes_html(
    kernel: RunningKernel,
) -> None:
    made = kernel.run_ok(f"c = w.Checkbox(description={SCRIPT!r})\nc")
    plain = next(s for s in opened(made).values() if s["_model_name"] == "CheckboxModel")
    assert plain["description"] == SCRIPT  # shown as text: left as the user wrote it
    switched = kernel.run_ok("c.description_allow_html = True")
    states = [o.content["data"]["state"] for o in switched.of_type("comm_msg")]
    assert states and all("onerror" not in str(s) for s in states), switched.describe()
    assert any("description" in s for s in states)  # the sanitized text came with the switch
    direct = kernel.run_ok(f"w.Checkbox(description={SCRIPT!r}, description_allow_html=True)")
    assert "onerror" not in _comms(direct)


@pytest.mark.parametrize(
    ("code", "named"),
    [
        (
            "class Evil(w.DOMWidget):\n"
            "    _esm = traitlets.Unicode('export default {render(){window.top.__pwned=1}}')"
            ".tag(sync=True)\n"
            "evil = Evil()\nevil",
            "_esm",
        ),
        (
            "class Far(w.DOMWidget):\n"
            "    _view_module = traitlets.Unicode('https://127.0.0.1:9/evil.js').tag(sync=True)\n"
            "    _model_module = traitlets.Unicode('https://127.0.0.1:9/evil.js').tag(sync=True)\n"
            "far = Far()\nfar",
            "127.0.0.1",
        ),
        (
            "import comm\nraw = comm.create_comm(target_name='bokeh', data={'code': 'alert(1)'})",
            "bokeh",
        ),
    ],
    ids=["anywidget-esm", "view-module-url", "unknown-target"],
)
def test_code_for_the_page_is_refused_with_a_note(
    kernel: RunningKernel, code: str, named: str
) -> None:
    made = kernel.run_ok(code)
    assert not made.of_type("comm_open") or all(
        o.content.get("target_name") == "jupyter.widget"
        and o.content["data"]["state"]["_model_module"].startswith("@jupyter-widgets/")
        for o in made.of_type("comm_open")
    ), made.describe()
    comms = [o.content for o in made.outputs if o.msg_type.startswith("comm_")]
    assert "__pwned" not in repr(comms) and "alert" not in repr(comms)
    assert NOTE in made.stream("stderr") and named in made.stream("stderr"), made.describe()
    # Later messages of a refused comm are dropped quietly.
    if "evil" in code:
        again = kernel.run_ok("evil.send({'x': 1})")
        assert not again.of_type("comm_msg")


def test_a_flood_of_comm_messages_ends_with_a_clear_error(kernel: RunningKernel) -> None:
    flood = kernel.run(
        "import comm\nc = comm.create_comm(target_name='jupyter.widget.control')\n"
        "for i in range(100_000):\n    c.send({'i': i})"
    )
    assert flood.status == "error", flood.describe()
    assert "too many host requests" in flood.error_text()
    assert len(flood.of_type("comm_msg")) <= 1_000
    assert kernel.run_ok("6 * 7").result() == "42"


def test_a_100_mb_buffer_is_dropped_with_a_note(kernel: RunningKernel) -> None:
    big = kernel.run_ok(
        "import comm\nc = comm.create_comm(target_name='jupyter.widget.control')\n"
        "c.send({'method': 'custom'}, buffers=[bytes(100_000_000)])\ndel c"
    )
    assert not [o for o in big.of_type("comm_msg") if o.content["data"].get("method") == "custom"]
    assert "over the cap" in big.stream("stderr"), big.describe()
    rss_kib = int(Path(f"/proc/{kernel.pid}/status").read_text().split("VmRSS:")[1].split()[0])
    assert rss_kib < 2_000_000, rss_kib  # the kernel holds no copy of what it dropped
    assert kernel.run_ok("6 * 7").result() == "42"


def test_a_storm_of_frontend_messages_during_a_cell_is_handled_after_it(
    kernel: RunningKernel,
) -> None:
    made = kernel.run_ok(
        "n = w.IntText()\nseen = []\nn.observe(lambda ch: seen.append(ch.new), 'value')\nn"
    )
    box = next(cid for cid, s in opened(made).items() if s["_model_name"] == "IntTextModel")
    running = kernel.send("import time\ntime.sleep(2)\nlen(seen)")
    kc = kernel.kc
    for i in range(1, 301):
        kc.session.send(kc.shell_channel.socket, "comm_msg", update(box, value=i))
    during = kernel.collect(running)
    assert during.result() == "0"  # handled after the cell, as a sync cell on ipykernel
    # In the order they came, before the next cell (ipykernel 7 sends no status for a comm
    # message that arrives while a cell runs: there is no idle to wait for).
    assert kernel.run_ok("len(seen), seen[-1], seen == sorted(seen)").result() == "(300, 300, True)"


def test_a_handler_that_never_returns_is_stopped_and_the_session_kept(
    kernel: RunningKernel,
) -> None:
    made = kernel.run_ok(
        "kept = 'still here'\nh = w.IntText()\n"
        "def forever(change):\n    while True:\n        pass\n"
        "h.observe(forever, 'value')\nh"
    )
    box = next(cid for cid, s in opened(made).items() if s["_model_name"] == "IntTextModel")
    started = time.monotonic()
    stuck: Any = comm_send(kernel, "comm_msg", update(box, value=1))
    assert time.monotonic() - started < 120, stuck.describe()  # the policy's 8 s, and a margin
    assert kernel.run_ok("kept").result() == "'still here'"
    assert kernel.run_ok("6 * 7").result() == "42"


# -- issue 47: the view decides what is rendered; no fetch from any field -------------------

BEACON = "http://127.0.0.1:9/beacon"


@pytest.mark.parametrize(
    "code",
    [
        f"w.Label(value={SCRIPT!r}, _view_name='HTMLView')",
        f"w.Textarea(value={SCRIPT!r}, _view_name='HTMLMathView')",
        f"w.Text(value={SCRIPT!r}, _view_module='@jupyter-widgets/controls', "
        "_view_name='HTMLView')",
        f"w.Button(description={SCRIPT!r}, _view_name='HTMLView')",
        "w.DOMWidget(_view_module='@jupyter-widgets/controls', _view_name='HTMLView')",
    ],
    ids=["label-as-html", "textarea-as-htmlmath", "text-as-html", "button-as-html", "dom-as-html"],
)
def test_a_model_shown_through_another_view_is_refused(kernel: RunningKernel, code: str) -> None:
    made = kernel.run_ok(code)
    assert "onerror" not in _comms(made), made.describe()
    assert not [s for s in opened(made).values() if s.get("_view_name") == "HTMLView"]
    assert NOTE in made.stream("stderr") and "not a view its package defines" in made.stream(
        "stderr"
    ), made.describe()


def test_an_update_cannot_switch_a_models_view(kernel: RunningKernel) -> None:
    kernel.run_ok(f"lab = w.Label(value={SCRIPT!r})\nlab")
    switched = kernel.run_ok("lab._view_name = 'HTMLView'")
    assert not switched.of_type("comm_msg"), switched.describe()
    assert "changes a widget's _view_name" in switched.stream("stderr"), switched.describe()


def test_a_link_cannot_copy_text_into_markup_in_the_page(kernel: RunningKernel) -> None:
    made = kernel.run_ok(
        f"src = w.Text(value={SCRIPT!r})\ndst = w.HTML()\nlinked = w.jslink((src, 'value'), "
        "(dst, 'value'))\nw.VBox([src, dst])"
    )
    link = next(s for s in opened(made).values() if s["_model_name"] == "LinkModel")
    assert link["target"] is None, link
    assert "widget link's target" in made.stream("stderr"), made.describe()
    plain = kernel.run_ok("a, b = w.IntSlider(), w.IntText()\nw.jslink((a, 'value'), (b, 'value'))")
    link = next(s for s in opened(plain).values() if s["_model_name"] == "LinkModel")
    assert link["target"][1] == "value" and link["source"][1] == "value", plain.describe()


@pytest.mark.parametrize(
    "code",
    [
        f"w.HTML('x', style={{'background': 'url({BEACON})'}})",
        f"w.Label('x', style={{'background': \"url('{BEACON}')\"}})",
        f"w.HTMLMath('x', style={{'background': 'image-set(\"{BEACON}\" 1x)'}})",
        # A raw update, past the Color trait's own check.
        "b = w.Button(description='x')\ndisplay(b)\nb.style._send({'method': 'update', "
        f"'state': {{'button_color': 'red; background: url({BEACON})'}}, 'buffer_paths': []}})",
        f"w.Box(layout=w.Layout(width='calc(1px + 1px)', border_top=r'1px u\\72l({BEACON})'))",
        f"w.Image(value={BEACON!r}.encode(), format='url')",
        f"w.Video(value={BEACON!r}.encode(), format='url')",
        f"w.Audio(value={BEACON!r}.encode(), format='url')",
        f"im = w.Image(value=b'data:image/png;base64,iVBORw0KGgo=', format='url')\n"
        f"display(im)\nim.value = {BEACON!r}.encode()",
    ],
    ids=[
        "html-style",
        "label-style",
        "htmlmath-style",
        "button-style",
        "layout",
        "image-url",
        "video-url",
        "audio-url",
        "image-url-later",
    ],
)
def test_no_widget_field_makes_the_page_fetch(kernel: RunningKernel, code: str) -> None:
    made = kernel.run_ok(code)
    comms = [o for o in made.outputs if o.msg_type.startswith("comm_")]
    assert comms, made.describe()
    page: dict[str, dict[str, Any]] = {}  # each model's state as the page merges it
    for out in comms:
        state = out.content.get("data", {}).get("state", {})
        assert "127.0.0.1:9" not in json_text(state), made.describe()
        page.setdefault(out.content["comm_id"], {}).update(state)
    # Every source here is the beacon's address: the page must never read it as a URL.
    assert all(state.get("format") != "url" for state in page.values()), page
    assert NOTE in made.stream("stderr"), made.describe()


def test_typeset_text_loses_mathjax_links_and_styles(kernel: RunningKernel) -> None:
    """A description and a Label's value are typeset by MathJax: no \\href, \\style."""
    made = kernel.run_ok(
        f"w.Checkbox(description=r'$\\href{{{BEACON}}}{{x}}$')\n"
        f"w.Label(r'$\\style{{background:url({BEACON})}}{{x}}$')"
    )
    text = _comms(made)
    assert "\\\\href" not in text and "\\\\style" not in text, text
    assert "\\\\sandboxremoved" in text and NOTE in made.stream("stderr"), made.describe()


def json_text(value: Any) -> str:
    import json

    return json.dumps(value, default=str)


@pytest.mark.parametrize(
    "version",
    ["^0.11.0/../../evil@1/x.js?", "https://evil.example/x.js#", "2.0.0 || @evil/x", "1.0.0:x"],
)
def test_a_module_version_that_is_not_a_specifier_is_refused(
    kernel: RunningKernel, version: str
) -> None:
    made = kernel.run_ok(
        f"w.IntSlider(_model_module_version={version!r})\n"
        f"w.IntSlider(_view_module_version={version!r})"
    )
    assert version not in _comms(made), made.describe()
    assert "not a version specifier" in made.stream("stderr"), made.describe()
    fine = kernel.run_ok("w.IntSlider(_model_module_version='^2.0.0')")
    assert "IntSliderModel" in _comms(fine) and NOTE not in fine.stream("stderr")


def test_a_figure_takes_only_ipympls_own_messages(kernel: RunningKernel) -> None:
    """ipympl's page calls `handle_<type>` for a canvas message and downloads a "save"'s
    buffer as `<label>.<format>`: only its types and matplotlib's formats pass."""
    kernel.run_ok(
        "%matplotlib widget\nimport json, matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
        "ax.plot([1, 2]);"
    )
    odd = kernel.run_ok(
        "fig.canvas.send({'data': json.dumps({'type': 'save', 'format': 'html'})}, "
        "buffers=[b'<script>window.top.__pwned=1</script>'])\n"
        "fig.canvas.send({'data': json.dumps({'type': 'constructor'})})"
    )
    sent = repr([o.content for o in odd.of_type("comm_msg")])  # a "draw" may come on its own
    assert "save" not in sent and "constructor" not in sent, odd.describe()
    assert "figure download as 'html'" in odd.stream("stderr"), odd.describe()
    assert "figure message of type 'constructor'" in odd.stream("stderr"), odd.describe()
    saved = kernel.run_ok("fig.canvas.download()")
    assert [o for o in saved.of_type("comm_msg") if o.content["data"].get("method") == "custom"]
    assert NOTE not in saved.stream("stderr"), saved.describe()
    kernel.run_ok("plt.close('all')\n%matplotlib inline")


# The outside review's findings (see docs/outputs.md's widget rules).

_FORGED_STATES = (
    "{'method': 'update_states', 'states': {img.model_id: {"
    "'model_module': '@jupyter-widgets/controls', 'model_name': 'ImageModel', "
    "'model_module_version': '2.0.0', 'state': {'_view_module': '@jupyter-widgets/controls', "
    "'_view_name': 'ImageView'}}}, 'buffer_paths': [[img.model_id, 'state', 'value']]}, "
    "buffers=[b'data:image/png;base64,AAAA']"
)


def _page_formats(execution: Execution) -> list[Any]:
    return [
        o.content["data"].get("state", {}).get("format")
        for o in execution.of_type("comm_msg")
        if o.content["data"].get("method") == "update"
    ]


def test_a_guest_opened_control_comm_cannot_change_what_the_firewall_knows(
    kernel: RunningKernel,
) -> None:
    """A guest's own jupyter.widget.control comm reaches no page target, so its
    update_states is applied by nobody: it must not make the firewall believe an Image's
    source is a data: URL (a later format='url' would make the page fetch the beacon)."""
    kernel.run_ok(f"img = w.Image(value={BEACON!r}.encode(), format='png')\ndisplay(img)")
    forged = kernel.run_ok(
        "import comm\nctl = comm.create_comm(target_name='jupyter.widget.control', data={}, "
        f"metadata={{'version': '2.1.0'}})\nctl.send({_FORGED_STATES})"
    )
    assert not forged.of_type("comm_open") and not forged.of_type("comm_msg"), forged.describe()
    assert "control comm opened by the guest" in forged.stream("stderr"), forged.describe()
    switched = kernel.run_ok("img.format = 'url'")
    assert "url" not in _page_formats(switched), switched.describe()
    assert "other than a data: URL" in switched.stream("stderr"), switched.describe()


def test_the_pages_control_comm_passes_only_the_states_it_asked_for(
    kernel: RunningKernel,
) -> None:
    """On a control comm the page opened, the guest's update_states passes once per
    request_states, and never makes the firewall's record of a model less strict."""
    kernel.run_ok(f"img = w.Image(value={BEACON!r}.encode(), format='png')\ndisplay(img)")
    control = {"comm_id": "page-control", "target_name": "jupyter.widget.control", "data": {}}
    kc = kernel.kc  # the page's open, with the control protocol's version, as JupyterLab's
    sent = kc.session.send(
        kc.shell_channel.socket, "comm_open", control, metadata={"version": "1.0.0"}
    )
    kernel.collect(Execution(sent["header"]["msg_id"], time.monotonic(), {"status": "comm"}))
    asked = comm_send(
        kernel, "comm_msg", {"comm_id": "page-control", "data": {"method": "request_states"}}
    )
    answers = [o for o in asked.of_type("comm_msg") if o.content["comm_id"] == "page-control"]
    assert answers and answers[0].content["data"]["method"] == "update_states", asked.describe()
    assert "ImageModel" in repr(answers[0].content), asked.describe()
    unasked = kernel.run_ok(f"w.Widget._control_comm.send({_FORGED_STATES})")
    assert not unasked.of_type("comm_msg"), unasked.describe()
    assert "states the page did not ask for" in unasked.stream("stderr"), unasked.describe()
    switched = kernel.run_ok("img.format = 'url'")
    assert "url" not in _page_formats(switched), switched.describe()


@pytest.mark.parametrize("switch", ["1", "'yes'", "[0]"])
def test_a_truthy_html_switch_is_html_to_the_firewall_too(
    kernel: RunningKernel, switch: str
) -> None:
    """The page writes a description as HTML when description_allow_html is truthy (as
    JavaScript reads it), not only when it is `true`: a raw comm sends 1 or 'yes'."""
    made = kernel.run_ok(
        "import comm\nraw = comm.create_comm(target_name='jupyter.widget', data={'state': {"
        "'_model_module': '@jupyter-widgets/controls', '_model_name': 'ButtonModel', "
        "'_view_module': '@jupyter-widgets/controls', '_view_name': 'ButtonView', "
        f"'description': {SCRIPT!r}, 'description_allow_html': {switch}}}, 'buffer_paths': []}})"
    )
    state = next(iter(opened(made).values()))
    assert "onerror" not in state["description"] and "<script" not in state["description"]
    assert state["description_allow_html"] is True, state
    assert NOTE in made.stream("stderr"), made.describe()


def test_mathjax_mmltoken_and_tooltips_are_removed(kernel: RunningKernel) -> None:
    """\\mmlToken sets any MathML attribute (href, class, id): a sibling of \\href. JupyterLab
    typesets LaTeX, markdown and HTML outputs and a widget's description and Label alike."""
    latex = f'$\\mmlToken{{mi}}[href="{BEACON}"]{{X}} \\mathtip{{a}}{{b}} \\toggle{{a}}{{b}}$'
    made = kernel.run_ok(
        f"from IPython.display import HTML, Latex, Markdown\nw.Label({latex!r})\n"
        f"w.Checkbox(description={latex!r})\ndisplay(Latex({latex!r}))\n"
        f"display(Markdown({latex!r}))\ndisplay(HTML('<p>' + {latex!r} + '</p>'))"
    )
    text = _comms(made) + repr([o.content for o in made.of_type("display_data")])
    for command in ("mmlToken", "mathtip", "toggle"):
        assert f"\\\\{command}{{" not in text, text  # (the notes name it)
    assert "\\\\sandboxremoved" in text and "\\mmlToken command" in made.stream("stderr")


@pytest.mark.parametrize(
    "code",
    [
        "raw = comm.create_comm(target_name='jupyter.widget', data={'state': {"
        "'_model_module': ['@jupyter-widgets/controls'], '_model_name': 'HTMLModel'}})",
        "raw = comm.create_comm(target_name='jupyter.widget', data={'state': {"
        "'_model_module': '@jupyter-widgets/controls', '_model_name': {'x': 1}, "
        "'_view_module': '@jupyter-widgets/controls', '_view_name': ['HTMLView']}})",
        "b = w.Button()\ndisplay(b)\nb._send({'method': 'update', 'state': "
        "{'_view_module': ['@jupyter-widgets/controls']}, 'buffer_paths': []})",
        "%matplotlib widget\nimport json, matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
        "fig.canvas.send({'data': json.dumps({'type': ['save']})})\n"
        "fig.canvas.send({'data': json.dumps({'type': 'save', 'format': ['png']})})\n"
        "plt.close('all')\n%matplotlib inline",
    ],
    ids=["list-module", "dict-name", "list-update", "figure-lists"],
)
def test_odd_typed_guest_values_are_refused_with_a_note(kernel: RunningKernel, code: str) -> None:
    """A list where a name belongs is refused with a note, never a TypeError in the cell."""
    made = kernel.run_ok(f"import comm\n{code}")
    assert "on_comm failed" not in made.describe() and NOTE in made.stream("stderr")
    assert "could not read" not in made.stream("stderr"), made.describe()

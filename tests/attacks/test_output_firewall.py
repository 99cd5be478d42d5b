"""Attacks on the user's browser through the kernel's outputs, at the protocol level.

Every probe (xss_probes.py) runs in one real kernel through jupyter_client; every message it
produces is parsed with html5lib and must be inert (inert.py), the user must see a note that
something was removed, and the next cell must work. The same holds for the shell replies that
carry guest data: user_expressions, inspect_reply and complete_reply.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.attacks.inert import assert_inert_bundle
from tests.attacks.xss_probes import PAYLOAD, PROBES, Probe
from tests.kernel.conftest import Execution, RunningKernel, start_kernel

NOTE = "[sandbox] the output firewall removed"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningKernel]:
    running = start_kernel(tmp_path_factory.mktemp("firewall"))
    yield running
    running.shutdown()


def rich_outputs(execution: Execution) -> list[dict[str, object]]:
    kinds = ("display_data", "execute_result", "update_display_data")
    return [out.content for out in execution.outputs if out.msg_type in kinds]


def notes(execution: Execution) -> str:
    """What the user is told was removed: on stderr, or (removed from the HTML alone) in a
    line under that HTML."""
    pages = [str(content["data"].get("text/html", "")) for content in rich_outputs(execution)]  # type: ignore[attr-defined]
    return execution.stream("stderr") + html.unescape("\n".join(pages))


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_probe_leaves_the_kernel_inert(kernel: RunningKernel, probe: Probe) -> None:
    execution = kernel.run(probe.code)
    assert execution.status == "ok", execution.describe()
    for content in rich_outputs(execution):
        assert_inert_bundle(content["data"], probe.id)  # type: ignore[arg-type]
        assert "embed_options" not in json.dumps(content["metadata"])
    assert NOTE in notes(execution), execution.describe()
    assert kernel.run_ok("1 + 1").result() == "2"


def test_the_note_names_what_was_removed(kernel: RunningKernel) -> None:
    execution = kernel.run_ok("display({'text/html': '<b>bold</b><script>x()</script>'}, raw=True)")
    (content,) = rich_outputs(execution)
    page = content["data"]["text/html"]  # type: ignore[index]
    assert page.startswith('<b>bold</b><div class="sandbox-kernel-note"><small>'), page
    assert_inert_bundle(content["data"], "note")  # type: ignore[arg-type]
    note = notes(execution)
    assert "<script> element in text/html" in note
    assert "trust_outputs" in note
    assert execution.stream("stderr") == "", "the HTML says it: not on stderr as well"


def test_a_removal_outside_the_html_is_noted_on_stderr(kernel: RunningKernel) -> None:
    execution = kernel.run_ok(
        "display({'text/html': '<b>bold</b><script>x()</script>', "
        "'application/javascript': 'y()'}, raw=True)"
    )
    (content,) = rich_outputs(execution)
    assert content["data"] == {"text/html": "<b>bold</b>"}
    stderr = execution.stream("stderr")
    assert "<script> element in text/html" in stderr and "application/javascript" in stderr


def test_a_bundle_with_nothing_left_is_not_sent_but_named(kernel: RunningKernel) -> None:
    execution = kernel.run_ok(f"display({{'application/javascript': {PAYLOAD!r}}}, raw=True)")
    assert rich_outputs(execution) == []
    assert "application/javascript (not shown by this sandbox" in execution.stream("stderr")


def test_user_expressions_pass_the_firewall(kernel: RunningKernel) -> None:
    kernel.run_ok(
        "class EvilExpr:\n"
        "    def _repr_html_(self):\n        return '<img src=x onerror=alert(1)>shown'\n"
        "    def __repr__(self):\n        return 'EvilExpr()'\n"
        "evil_expr = EvilExpr()"
    )
    execution = kernel.run_ok("pass", user_expressions={"e": "evil_expr", "n": "6 * 7"})
    expressions = execution.reply["user_expressions"]
    assert expressions["n"]["data"]["text/plain"] == "42"
    evil = expressions["e"]
    assert evil["status"] == "ok"
    assert_inert_bundle(evil["data"], "user_expressions")
    assert evil["data"]["text/html"] == "<img>shown"
    assert NOTE in evil["data"]["text/plain"]


def test_inspect_reply_passes_the_firewall(kernel: RunningKernel) -> None:
    kernel.run_ok(
        "def evil_doc():\n    '''<script>alert(1)</script><img src=x onerror=alert(1)>'''\n"
    )
    code = "evil_doc"
    reply = kernel.reply(kernel.kc.inspect(code, len(code)))
    assert reply["status"] == "ok" and reply["found"], reply
    assert_inert_bundle(reply["data"], "inspect")
    assert "evil_doc" in reply["data"]["text/plain"]


def test_complete_reply_is_capped(kernel: RunningKernel) -> None:
    kernel.run_ok(
        "class Many:\n"
        "    def __dir__(self):\n"
        "        return ['m' + str(i) + 'x' * 5000 for i in range(5000)]\n"
        "many = Many()"
    )
    code = "many.m"
    reply = kernel.reply(kernel.kc.complete(code, len(code)))
    assert reply["status"] == "ok"
    assert len(reply["matches"]) <= 2_000
    assert all(len(match) <= 1_000 for match in reply["matches"])
    assert kernel.run_ok("2 + 2").result() == "4"


def test_ordinary_rich_output_is_untouched(kernel: RunningKernel) -> None:
    """A DataFrame, a Styler, a figure (PNG and SVG), markdown and LaTeX pass without a note."""
    execution = kernel.run_ok(
        "import pandas as pd, io\n"
        "import matplotlib.pyplot as plt\n"
        "df = pd.DataFrame({'a': [1, 2, 3], 'b': ['x', 'y', 'z']})\n"
        "display(df)\n"
        "display(df.style.highlight_max(subset=['a']))\n"
        "fig, ax = plt.subplots(); ax.plot([1, 3, 2]); ax.set_title('t')\n"
        "svg = io.StringIO(); fig.savefig(svg, format='svg')\n"
        "display({'image/svg+xml': svg.getvalue()}, raw=True)\n"
        "display({'text/markdown': '# Title\\n**bold** and $x^2$'}, raw=True)\n"
        "display({'text/latex': '$\\\\frac{1}{2}$'}, raw=True)"
    )
    assert execution.stream("stderr") == "", execution.describe()
    outputs = rich_outputs(execution)
    mimes = [sorted(content["data"]) for content in outputs]  # type: ignore[call-overload]
    assert ["text/html", "text/plain"] in mimes
    assert ["image/svg+xml"] in mimes
    assert ["text/markdown"] in mimes
    assert ["text/latex"] in mimes
    assert any("image/png" in m for m in mimes)
    table = outputs[0]["data"]["text/html"]  # type: ignore[index]
    assert '<table border="1" class="dataframe">' in table and "<style" in table
    styler = outputs[1]["data"]["text/html"]  # type: ignore[index]
    assert "background-color: yellow" in styler
    svg = outputs[2]["data"]["image/svg+xml"]  # type: ignore[index]
    assert svg.lstrip().startswith("<svg") and 'xmlns="http://www.w3.org/2000/svg"' in svg


def test_scikit_learns_estimator_diagram_keeps_its_fold_controls(kernel: RunningKernel) -> None:
    """Each step of the diagram unfolds (its parameters) through a checkbox and its label, in
    HTML alone; the copy buttons, which need script, go, and the note says so."""
    execution = kernel.run_ok(
        "from sklearn.pipeline import make_pipeline\n"
        "from sklearn.preprocessing import StandardScaler\n"
        "from sklearn.linear_model import LinearRegression\n"
        "make_pipeline(StandardScaler(), LinearRegression())"
    )
    (content,) = rich_outputs(execution)
    page = content["data"]["text/html"]  # type: ignore[index]
    assert_inert_bundle(content["data"], "scikit-learn")  # type: ignore[arg-type]
    boxes = re.findall(r'<input class="sk-toggleable__control[^"]*" id="([^"]+)"', page)
    labels = re.findall(r'<label for="([^"]+)" class="sk-toggleable__label', page)
    assert len(boxes) == 3 and labels == boxes, page[:2000]  # the pipeline and its two steps
    assert all(box.startswith("sbx-") for box in boxes)
    assert "<script> element" in notes(execution)
    assert execution.stream("stderr") == "", "an estimator's display is noted under it"


def test_an_oversized_output_is_dropped_with_a_note(kernel: RunningKernel) -> None:
    execution = kernel.run_ok("'x' * 12_000_000")
    assert rich_outputs(execution) == []
    assert "over the cap of 10,000,000" in execution.stream("stderr")
    assert kernel.run_ok("len('still here')").result() == "10"


def test_the_run_log_records_what_was_removed(kernel: RunningKernel) -> None:
    kernel.run_ok("display({'text/html': '<script>x()</script>kept'}, raw=True)")
    last = json.loads(kernel.run_log.read_text().splitlines()[-1])
    assert last["outputs_removed"] == ["<script> element in text/html"]


@pytest.fixture
def trusting_kernel(tmp_path: Path) -> Iterator[RunningKernel]:
    running = start_kernel(tmp_path / "trusting", policy="[policy]\ntrust_outputs = true\n")
    yield running
    running.shutdown()


def test_trust_outputs_passes_bundles_unchanged(trusting_kernel: RunningKernel) -> None:
    bundle = {"application/javascript": "x()", "text/html": "<script>y()</script>"}
    execution = trusting_kernel.run_ok(f"display({bundle!r}, raw=True)")
    (content,) = rich_outputs(execution)
    assert content["data"] == bundle
    assert execution.stream("stderr") == ""


def test_the_guarded_spec_never_trusts_outputs(tmp_path: Path) -> None:
    running = start_kernel(
        tmp_path / "guarded",
        extra_env={"SANDBOX_KERNEL_GUARDED": "1"},
        policy="[policy]\ntrust_outputs = true\n",
    )
    try:
        execution = running.run_ok("display({'text/html': '<script>y()</script>ok'}, raw=True)")
        (content,) = rich_outputs(execution)
        page = content["data"]["text/html"]  # type: ignore[index]
        assert page.startswith("ok<div") and "<script" not in page, page
        assert "trust_outputs: False" in running.run_ok("%policy").stream()
    finally:
        running.shutdown()

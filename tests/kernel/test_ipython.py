"""IPython inside the guest, as a notebook user meets it, and measured against ipykernel.

`COMPARED` runs each cell on sandbox-python and on ipykernel (the python3 kernel of this
interpreter) in the same test and compares what a user sees: the reply's status and error
name, the kinds of output, and their text where it is deterministic. Cells that need the
data packages the host venv does not have (numpy, pandas, matplotlib) are tested on the
sandbox alone below.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.kernel.conftest import (
    CELL_TIMEOUT_SECONDS,
    Execution,
    RunningKernel,
    start_ipykernel,
    without_written_files_note,
)

NO_PROCESSES = "the sandbox runs no processes"


@dataclass(frozen=True)
class Cell:
    code: str
    text: bool = True  # compare the text of streams and results (False: only their kinds)


COMPARED = [
    Cell("x = 41\nx + 1"),
    Cell("type(3)"),
    Cell("_"),
    Cell("_2"),
    Cell("_i1"),
    Cell("Out[1]"),
    Cell("len(In) > 3"),
    Cell("%time y = sum(range(1000))", text=False),
    Cell("%timeit -n1 -r1 sum(range(10))", text=False),
    Cell("%%time\nz = 3", text=False),
    Cell("import asyncio\nawait asyncio.sleep(0.01)\n'awaited'"),
    Cell("async def f():\n    return 7\nawait f()"),
    Cell("%who_ls"),
    Cell("%xmode Plain"),
    Cell("1/0"),
    Cell("%xmode Context"),
    Cell("%config InteractiveShell.ast_node_interactivity = 'last_expr'"),
    Cell("%%writefile compat_hello.py\nprint('hello from a file')"),
    Cell("%run compat_hello.py"),
    Cell("%load_ext autoreload"),
    Cell("%autoreload 2"),
    Cell("%env COMPAT_VAR=1"),
    Cell("import os\nos.environ['COMPAT_VAR']"),
    Cell("from IPython.display import display, HTML, Markdown, Latex, JSON"),
    Cell("display(HTML('<b>b</b>'))"),
    Cell("display(Markdown('*m*'), Latex(r'$x^2$'))"),
    Cell("JSON({'a': 1})", text=False),
    Cell("from IPython.display import clear_output\nprint('gone')\nclear_output()"),
    Cell("h = display('first', display_id=True)\nh.update('second')", text=False),
    Cell("def f(x):\n    return x * 2\nf(21)"),
    Cell("[i * i for i in range(5)]"),
    Cell("quiet = 5\nquiet;"),  # a trailing semicolon hides the result
    Cell("{'a': list(range(30))}"),
    Cell("print('a'); print('b')"),
    Cell("import sys\nprint('err', file=sys.stderr)"),
    Cell("raise ValueError('bad value')"),
    Cell("undefined_name"),
    Cell("def broken(:"),  # the message names the cell's file: the same hash on both
    Cell("%history -n -l 1", text=False),
    Cell("%nosuchmagic"),  # a UsageError: one line on stderr, no error output
    Cell("%%nosuchcellmagic\nx = 1"),
    Cell("get_ipython().__class__.__mro__[-2].__name__"),
    # The result comes before the figure the inline backend shows once the cell has run.
    Cell("import matplotlib.pyplot as plt\nplt.plot([1, 2])", text=False),
    Cell("plt.figure(figsize=(2, 2)); print('drawn'); 'the result'", text=False),
]


def _summary(execution: Execution, text: bool) -> tuple[object, ...]:
    """What a user sees of an execution, in a form two kernels can be compared by. Stream
    messages in a row on one stream count as one, as a notebook joins them (ipykernel on a
    busy machine may send `print`'s text and its newline apart)."""
    reply = execution.reply
    outputs = [
        o
        for o in execution.outputs
        if o.msg_type not in ("status", "execute_input")
        and not (o.msg_type == "stream" and not without_written_files_note(o.content["text"]))
    ]
    kinds: list[str] = []
    seen: list[str] = []
    previous = None
    for output in outputs:
        stream = output.content["name"] if output.msg_type == "stream" else None
        joined = stream is not None and stream == previous
        previous = stream
        if joined:
            if text:
                seen[-1] += without_written_files_note(output.content["text"])
            continue
        kinds.append(output.msg_type)
        if text:
            if output.msg_type == "stream":
                shown = without_written_files_note(output.content["text"])
                seen.append(f"{output.content['name']}:{shown}")
            elif output.msg_type in ("execute_result", "display_data"):
                seen.append(str(output.content["data"].get("text/plain", "")))
            elif output.msg_type == "error":
                seen.append(f"{output.content['ename']}: {output.content['evalue']}")
            else:
                seen.append("")
    return reply["status"], reply.get("ename"), kinds, seen


@pytest.fixture(scope="module")
def ipykernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningKernel]:
    """ipykernel itself, in a folder of its own, as the baseline."""
    running = start_ipykernel(tmp_path_factory.mktemp("ipykernel"), kernel_name="python3")
    yield running
    running.shutdown()


def test_cells_behave_as_on_ipykernel(
    fresh_kernel: RunningKernel, ipykernel: RunningKernel
) -> None:
    differences = []
    for cell in COMPARED:
        ours = _summary(fresh_kernel.run(cell.code, timeout=CELL_TIMEOUT_SECONDS), cell.text)
        theirs = _summary(ipykernel.run(cell.code, timeout=CELL_TIMEOUT_SECONDS), cell.text)
        if ours != theirs:
            differences.append(f"{cell.code!r}:\n  sandbox:   {ours}\n  ipykernel: {theirs}")
    matched = len(COMPARED) - len(differences)
    print(f"matched {matched} of {len(COMPARED)} cells ({matched / len(COMPARED):.0%})")
    assert not differences, "\n".join(differences)


USAGE_ERRORS = ["%nosuchmagic", "%%nosuchcellmagic\nx = 1", "%timeit -n"]


def test_a_magics_usage_error_is_answered_as_ipykernel_answers_it(
    fresh_kernel: RunningKernel, ipykernel: RunningKernel
) -> None:
    """A UsageError (an unknown magic, a magic's bad argument) is one line on stderr and an
    error reply with no traceback, and no error output: on both kernels, the reply's error
    fields and the outputs are the same."""
    for code in USAGE_ERRORS:
        seen = []
        for kernel in (fresh_kernel, ipykernel):
            execution = kernel.run(code, timeout=CELL_TIMEOUT_SECONDS)
            reply = execution.reply
            outputs = [
                (o.msg_type, o.content.get("name"), o.content.get("text"))
                for o in execution.outputs
                if o.msg_type not in ("status", "execute_input")
            ]
            fields = {key: reply.get(key) for key in ("status", "ename", "evalue", "traceback")}
            seen.append((fields, outputs))
        ours, theirs = seen
        assert ours == theirs, f"{code!r}:\n  sandbox:   {ours}\n  ipykernel: {theirs}"
        assert ours[0]["ename"] == "UsageError" and ours[0]["traceback"] == [], ours


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FRAME_HEADER = re.compile(
    r"^(Cell In\[\d+\], line \d+|File .*|During handling of the above exception.*)$", re.MULTILINE
)


def _frames(execution: Execution) -> list[str]:
    """The frames an error output shows (their headers, numbers masked) and its exception."""
    [error] = execution.of_type("error")
    text = _ANSI.sub("", "\n".join(error.content["traceback"]))
    headers = [re.sub(r"\d+", "N", header) for header in _FRAME_HEADER.findall(text)]
    return [*headers, error.content["ename"]]


@pytest.mark.parametrize(
    "code",
    [
        "while True:\n    pass",
        "import time\ntime.sleep(60)",
        "import time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    raise ValueError",
    ],
)
def test_an_interrupt_shows_the_users_line_as_on_ipykernel(
    kernel: RunningKernel, ipykernel: RunningKernel, code: str
) -> None:
    """The traceback of an interrupted cell shows the cell's frames only: the sandbox's own
    (its loop check, its time.sleep) are cut, as a built-in's would be."""
    shown = []
    for running in (kernel, ipykernel):
        running.run_ok("pass")  # the session has started: the interrupt finds the cell running
        started = running.send(code)
        time.sleep(1)
        running.km.interrupt_kernel()
        execution = running.collect(started, timeout=CELL_TIMEOUT_SECONDS)
        assert execution.status == "error", execution.describe()
        shown.append(_frames(execution))
    assert shown[0] == shown[1]
    assert not any("sandbox" in line for line in shown[0])


# Errors whose output is compared byte for byte, colours included.
TRACEBACKS = [
    "1/0",
    "def f():\n    return 1/0\nf()",
    "def broken(:",
    "  x = 1",
    "raise ValueError('bad value')",
    "undefined_name",
    "import warnings\nwarnings.warn('careful')",
    "import inspect\ndef g():\n    pass\nprint(inspect.getfile(g))",
    "%xmode Plain",
    "1/0",
    "%xmode Minimal",
    "1/0",
    "%xmode Verbose",
    "a = 5\n1/0",
    "%xmode Context",
]
_CELL_NUMBER = re.compile(r"In\[\d+\]")
_CELLS_FOLDER = re.compile(r"\S*/ipykernel_\d+/")  # the temporary folder and process id


def _exact(execution: Execution) -> list[str]:
    """An execution's streams and errors to the byte, cell numbers and process id masked.
    Stream messages in a row on one stream count as one (ipykernel on a busy machine may send
    one print's text in two)."""
    shown = []
    previous = None
    for output in execution.outputs:
        stream = output.content["name"] if output.msg_type == "stream" else None
        if stream is not None and stream == previous:
            shown[-1] += output.content["text"]
        elif stream is not None:
            shown.append(output.content["text"])
        previous = stream
        if output.msg_type == "error":
            content = output.content
            shown.extend([content["ename"], content["evalue"], *content["traceback"]])
    return [_CELLS_FOLDER.sub("<cells>/", _CELL_NUMBER.sub("In[N]", s)) for s in shown]


def test_tracebacks_are_ipykernels_to_the_byte(
    fresh_kernel: RunningKernel, ipykernel: RunningKernel
) -> None:
    """The same colours (IPython's default theme, as ipykernel leaves it), and the cells'
    files named by the same hash of their text: a SyntaxError's message and a warning's
    location are ipykernel's too."""
    for code in TRACEBACKS:
        ours = _exact(fresh_kernel.run(code, timeout=CELL_TIMEOUT_SECONDS))
        theirs = _exact(ipykernel.run(code, timeout=CELL_TIMEOUT_SECONDS))
        assert ours == theirs, code


# -- what only the sandbox shows ---------------------------------------------------------


@pytest.mark.parametrize("code", ["%sx ls", "%%bash\necho hi", "%%script sh\necho hi"])
def test_processes_are_a_clear_error(kernel: RunningKernel, code: str) -> None:
    execution = kernel.run(code)
    assert execution.status == "error", execution.describe()
    assert execution.reply["ename"] == "NoProcessesError"
    assert NO_PROCESSES in execution.reply["evalue"]
    assert kernel.run_ok("'still here'").result() == "'still here'"


def test_pip_of_an_image_package_is_already_satisfied(kernel: RunningKernel) -> None:
    """%pip is served through the door (tests/kernel/test_pip.py): a package the image has
    needs no index at all."""
    execution = kernel.run_ok("%pip install six")
    assert "Requirement already satisfied: six in the sandbox image" in execution.stream()


def test_history_reads_this_session(kernel: RunningKernel) -> None:
    """IPython's history of the running session: %history by range, by search and by tail,
    %recall as a set_next_input payload."""
    first = kernel.run_ok("hist_alpha = 1")
    kernel.run_ok("hist_beta = hist_alpha + 1")
    number = first.reply["execution_count"]
    shown = kernel.run_ok(f"%history -n {number}-{number + 1}").stream()
    assert f"{number}: hist_alpha = 1" in shown and "hist_beta = hist_alpha + 1" in shown
    assert "hist_alpha = 1" in kernel.run_ok("%history -g hist_alpha").stream()
    assert "hist_beta = hist_alpha + 1" in kernel.run_ok("%history -l 3").stream()
    [recalled] = kernel.run_ok(f"%recall {number}").reply["payload"]
    assert recalled["text"] == "hist_alpha = 1"


def test_working_folder_is_the_notebooks(kernel: RunningKernel) -> None:
    """The notebook's folder, as an overlay: a relative write lands in its layer."""
    assert kernel.run_ok("%pwd").result() == "'/notebook'"
    kernel.run_ok("%%writefile relative.txt\nfrom a cell")
    layer = kernel.root / ".sandbox-kernel" / "layer"
    assert (layer / "relative.txt").read_text() == "from a cell\n"
    assert not (kernel.root / "relative.txt").exists()
    assert kernel.run_ok("open('relative.txt').read()").result() == "'from a cell\\n'"


def test_load_fills_the_next_cell_as_on_ipykernel(
    kernel: RunningKernel, ipykernel: RunningKernel
) -> None:
    payloads = []
    for running in (kernel, ipykernel):
        running.run_ok("%%writefile snippet.py\nprint('loaded')")
        payloads.append(running.run_ok("%load snippet.py").reply["payload"])
    assert payloads[0] == payloads[1]
    assert payloads[0][0]["source"] == "set_next_input" and payloads[0][0]["replace"] is True


def test_help_is_a_page_payload(kernel: RunningKernel) -> None:
    execution = kernel.run_ok("len?")
    [page] = execution.reply["payload"]
    assert page["source"] == "page"
    assert "Return the number of items" in re.sub(r"\x1b\[[0-9;]*m", "", page["data"]["text/plain"])


def test_matplotlib_inline_shows_a_png(kernel: RunningKernel) -> None:
    execution = kernel.run_ok(
        "%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"
    )
    [figure] = execution.of_type("display_data")
    assert figure.content["data"]["image/png"]
    assert "non-interactive" not in execution.stream("stderr")


def test_update_display_keeps_its_id(kernel: RunningKernel) -> None:
    execution = kernel.run_ok(
        "from IPython.display import HTML\n"
        "h = display(HTML('<i>one</i>'), display_id='progress')\n"
        "h.update(HTML('<i>two</i><script>alert(1)</script>'))"
    )
    shown = execution.of_type("display_data")
    updated = execution.of_type("update_display_data")
    assert [o.content["transient"] for o in shown] == [{"display_id": "progress"}]
    assert [o.content["transient"] for o in updated] == [{"display_id": "progress"}]
    assert "<script" not in updated[0].content["data"]["text/html"]  # through the firewall


def test_names_ipython_gives(kernel: RunningKernel) -> None:
    kernel.run_ok("21 * 2")
    assert kernel.run_ok("_").result() == "42"
    # ipykernel's name: libraries (pandas' in_ipython_frontend) tell a notebook by it.
    assert kernel.run_ok("get_ipython().__class__.__name__").result() == "'ZMQInteractiveShell'"
    assert kernel.run_ok("'numpy' in dir()").result() == "False"  # warm imports bind nothing


def test_data_cells(kernel: RunningKernel) -> None:
    frame = kernel.run_ok("import pandas as pd\npd.DataFrame({'a': [1, 2]})")
    assert "<table" in frame.result("text/html")
    total = kernel.run_ok("import numpy as np\nnp.arange(100_000).sum()")
    assert total.result() == "np.int64(4999950000)"  # as on Linux (guest/numpy64.py)


def test_package_data_the_image_left_out(kernel: RunningKernel) -> None:
    """scikit-learn's sample images, restored from its wheel (host/guest_library.py)."""
    done = kernel.run_ok(
        "from sklearn.datasets import load_sample_image, load_sample_images\n"
        "china = load_sample_image('china.jpg')\n"
        "china.shape, str(china.dtype), len(load_sample_images().images)"
    )
    assert done.result() == "((427, 640, 3), 'uint8', 2)"


def test_workspace_files(kernel: RunningKernel, tmp_path: Path) -> None:
    kernel.run_ok("%%writefile data.csv\na,b\n1,2")
    assert kernel.run_ok("import pandas as pd\npd.read_csv('data.csv').b.sum()").result()

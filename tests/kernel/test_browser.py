"""The output firewall in a real browser: JupyterLab on 127.0.0.1 with a token, Debian's
Chromium driven by Playwright (never a downloaded browser), notebooks on `sandbox-python`.

A notebook of every probe (tests/attacks/xss_probes.py) runs top to bottom; then no script may have
run (`window.__pwned`), no terminal may exist (GET /api/terminals), a DataFrame must show as a table
and plots as images, and the user must see the firewall's notes. The notebook is saved and the page
reloaded (JupyterLab signs a saved notebook as trusted and renders it again): still nothing runs. A
control notebook beside it, on a kernel spec installed with a policy that sets `trust_outputs =
true` (`sandbox-kernel install --policy`), proves the probes do run when the firewall is off, so the
checks above can fail. Screenshots of failures are kept in the test's temporary folder.

A machine without the browser FAILS here with the reason: bin/test's set-up installs it.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import nbformat
import pytest

from tests.attacks.xss_probes import PROBES
from tests.browser import chromium, screenshot_on_failure
from tests.kernel.conftest import KERNEL_NAME, install_kernel_spec
from tests.local_http import LocalHTTPServer
from tests.processes import free_port, stop, wait_until_up

pytestmark = pytest.mark.slow

RUN_TIMEOUT_SECONDS = 180.0
NOTE = "[sandbox] the output firewall removed"
ORDINARY_CELLS = [
    "import pandas as pd\npd.DataFrame({'a': [1, 2, 3], 'b': ['x', 'y', 'z']})",
    "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]); plt.title('plot');",
    "import io\nfig, ax = plt.subplots(); ax.plot([3, 1, 2]); buffer = io.StringIO()\n"
    "fig.savefig(buffer, format='svg'); plt.close(fig)\n"
    "display({'image/svg+xml': buffer.getvalue()}, raw=True)",
    # IPython in the guest, as JupyterLab shows it: a magic, a display updated by its id.
    "%time total = sum(range(10))",
    "handle = display('shown-first', display_id=True)\nhandle.update('updated-by-id')",
    # pandas' Styler: its CSS names its cells by id, which the firewall renames and scopes.
    "pd.DataFrame({'a': [1, 3, 2]}).style.highlight_max(color='yellow')",
    # scikit-learn's estimator diagram: its steps unfold through a checkbox and its label.
    "from sklearn.linear_model import LinearRegression\nLinearRegression()",
]
# An output that would restyle the page or clobber a global it reads (CVE-2024-43805's shape),
# with no script: the checks below look at the page itself.
PAGE_SHAPER = (
    "display({'text/html': \"<a id='MathJax' name='MathJax'>shaper-anchor</a>"
    "<img name='getElementById' src='data:image/png;base64,iVBORw0KGgo='>"
    "<style>.jp-Notebook { display: none !important } "
    "body::after { content: 'Session expired: re-enter your password' } "
    '.jp-Cell { visibility: hidden !important }</style>"}, raw=True)'
)


BUMP = "window.top.__pwned=(window.top.__pwned||0)+1"
WIDGET_CELLS = [
    "import ipywidgets as w\nslider = w.IntSlider(value=0, min=0, max=10, description='speed')\n"
    "slider",
    "def show(x):\n    print('square', x * x)\nw.interact(show, x=(0, 10))",
    "out = w.Output()\nout",
    "with out:\n    print('captured by the Output widget')",
    "from tqdm.auto import tqdm\nimport time\nfor i in tqdm(range(20)):\n    time.sleep(0.1)",
    # Sliders driving a matplotlib plot through interact (the inline backend, in its Output).
    "import matplotlib.pyplot as plt\n"
    "def draw(n):\n    plt.plot(range(n), [i * i for i in range(n)])\n    plt.title(f'n={n}')\n"
    "    plt.show()\n"
    "w.interact(draw, n=(2, 20))",
    "%matplotlib widget\nimport matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
    "ax.plot([1, 3, 2]);",
    "%matplotlib inline",  # interact's plot above is drawn inline again when its slider moves
    # Attacks: HTML in a widget, a description shown as HTML, a model with its own code.
    f"w.HTML('<img src=x onerror=\"{BUMP}\">')",
    f"w.Checkbox(description='<img src=x onerror=\"{BUMP}\">', description_allow_html=True)",
    "import traitlets\nclass Evil(w.DOMWidget):\n"
    f"    _esm = traitlets.Unicode('export default {{render() {{ {BUMP} }} }}').tag(sync=True)\n"
    "Evil()",
]


@dataclass
class Lab:
    url: str
    token: str
    root: Path

    def api(self, path: str) -> Any:
        request = urllib.request.Request(
            f"{self.url}{path}", headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())


def _notebook(path: Path, cells: list[str], kernel: str = KERNEL_NAME) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    book.metadata["kernelspec"] = {"name": kernel, "display_name": kernel, "language": "python"}
    nbformat.write(book, path)


def _trusting_spec(root: Path) -> tuple[str, Path]:
    """A kernel spec of its own whose policy trusts outputs (`sandbox-kernel install --policy`,
    the way a user gives notebooks a policy), under a prefix of the test's; (name, its
    JUPYTER_PATH folder)."""
    (root / "trusting.toml").write_text("[policy]\ntrust_outputs = true\n")
    name = f"{KERNEL_NAME}-trusting"
    prefix = root / ".prefix"
    script = Path(sys.executable).with_name("sandbox-kernel")
    done = subprocess.run(
        [str(script), "install", "--prefix", str(prefix), "--name", name,
         "--policy", str(root / "trusting.toml")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return name, prefix / "share" / "jupyter"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    install_kernel_spec()
    root = tmp_path_factory.mktemp("lab")
    cells = [p.code for p in PROBES] + ORDINARY_CELLS + [PAGE_SHAPER]
    _notebook(root / "probes" / "probes.ipynb", cells)
    _notebook(root / "widgets" / "widgets.ipynb", WIDGET_CELLS)
    control = [p.code for p in PROBES if p.id in ("img-onerror", "repr-html")]
    trusting, specs = _trusting_spec(root)
    _notebook(root / "trusted" / "control.ipynb", control, trusting)
    token, port = secrets.token_hex(16), free_port()
    env = {**os.environ, "SANDBOX_KERNEL_RUN_LOG": str(root / "runs.jsonl")}
    env["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(specs), env.get("JUPYTER_PATH")]))
    env.pop("SANDBOX_KERNEL_POLICY", None)
    log = (root / "server.log").open("wb")
    server = subprocess.Popen(
        [
            sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
            f"--port={port}", f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
            "--ServerApp.disable_check_xsrf=False",
            "--ServerApp.log_level=WARN", "--LabApp.extension_manager=readonly",
            f"--LabApp.workspaces_dir={root / '.lab-workspaces'}",
            f"--LabApp.user_settings_dir={root / '.lab-settings'}",
            *(["--allow-root"] if os.geteuid() == 0 else []),
        ],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )  # fmt: skip
    found = Lab(f"http://127.0.0.1:{port}", token, root)
    wait_until_up(lambda: bool(found.api("/api/status")), server, root / "server.log", "JupyterLab")
    try:
        yield found
    finally:
        stop(server)
        log.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


def open_notebook(page: Any, lab: Lab, path: str) -> None:
    """Open `path` alone (?reset: no tab restored from an earlier page) and wait for its kernel."""
    page.goto(f"{lab.url}/lab/tree/{path}?reset&token={lab.token}")
    page.wait_for_function(
        "path => { const panel = window.jupyterapp?.shell.currentWidget;"
        " return panel?.context?.path === path"
        " && panel.sessionContext?.session?.kernel?.status === 'idle'; }",
        arg=path,
        timeout=RUN_TIMEOUT_SECONDS * 1000,
    )


def run_all(page: Any) -> None:
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function(
        """() => {
            const panel = window.jupyterapp.shell.currentWidget;
            const kernel = panel?.sessionContext?.session?.kernel;
            return kernel?.status === 'idle' && panel.content.widgets.every(
                cell => cell.model.type !== 'code' || cell.model.executionCount !== null);
        }""",
        timeout=RUN_TIMEOUT_SECONDS * 1000,
    )
    page.wait_for_timeout(2000)  # an image's onerror, a meta refresh: they come a little later


def click_survivors(page: Any) -> None:
    """Click what a probe hoped the user would click (if anything of it is left)."""
    for name in ("jsurl", "entity", "go", "linker"):  # ids keep their name after a prefix
        for element in page.locator(f".jp-OutputArea-output [id$='{name}']").all():
            element.click(timeout=2000)
    page.wait_for_timeout(1000)


def pwned(page: Any) -> int:
    return int(page.evaluate("window.top.__pwned || 0"))


def test_no_probe_runs_script_in_jupyterlab(lab: Lab, browser: Any, tmp_path: Path) -> None:
    page = browser.new_page()
    with screenshot_on_failure(page, tmp_path, "probes"):
        open_notebook(page, lab, "probes/probes.ipynb")
        run_all(page)
        click_survivors(page)
        assert pwned(page) == 0, "a probe's script ran in the page"
        assert lab.api("/api/terminals") == [], "a terminal was opened on the host"
        outputs = page.locator(".jp-OutputArea-output")
        assert outputs.locator("table.dataframe").count() == 1, "the DataFrame is not a table"
        png = outputs.locator("img[src^='data:image/png']")
        assert png.count() >= 1, "the plot is not shown as an image"
        svg = outputs.locator("img[src^='data:image/svg+xml']")
        assert svg.count() == 2, "the SVG figure is not shown"  # the figure, the svg-mime probe
        width = svg.last.evaluate("img => img.decode().then(() => img.naturalWidth)")
        assert width > 0, "the sanitized SVG no longer renders"
        assert page.get_by_text(NOTE).count() >= len(PROBES) - 3, "the notes are not shown"
        assert outputs.get_by_text("Wall time").count() == 1, "%time printed nothing"
        assert outputs.get_by_text("updated-by-id").count() == 1, "update_display not applied"
        assert outputs.get_by_text("shown-first").count() == 0, "the old display stayed"
        _page_keeps_its_shape(page)
        parameters = outputs.locator("div.sk-toggleable__content").first
        unfolded = parameters.is_visible()  # a lone estimator starts unfolded
        outputs.locator("label.sk-toggleable__label").first.click()
        assert parameters.is_visible() != unfolded, "scikit-learn's diagram does not fold"

        # Saved, the notebook is signed as trusted; reopened, its outputs render again.
        page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
        page.wait_for_timeout(1500)
        page.reload()
        page.wait_for_selector(".jp-OutputArea-output table.dataframe", timeout=60_000)
        page.wait_for_timeout(2000)
        click_survivors(page)
        assert pwned(page) == 0, "a saved output ran script when the notebook was reopened"
        assert lab.api("/api/terminals") == [], "a terminal was opened on the host"
    page.close()


def _page_keeps_its_shape(page: Any) -> None:
    """The shaper's output is there, its CSS reached nothing outside it, no global was
    clobbered, and the Styler's own CSS still colours its cell."""
    assert page.locator(".jp-OutputArea-output").get_by_text("shaper-anchor").count() == 1
    looks = page.evaluate(
        """() => ({
            notebook: getComputedStyle(document.querySelector('.jp-Notebook')).display,
            cell: getComputedStyle(document.querySelector('.jp-Cell')).visibility,
            after: getComputedStyle(document.body, '::after').content,
            mathjax: window.MathJax instanceof Element,
            named: document.getElementsByName('MathJax').length,
            lookup: typeof document.getElementById,
            yellow: [...document.querySelectorAll('.jp-OutputArea-output td')].some(
                td => getComputedStyle(td).backgroundColor === 'rgb(255, 255, 0)'),
        })"""
    )
    assert looks["notebook"] != "none" and looks["cell"] != "hidden", looks
    assert looks["after"] in ("none", "normal"), looks
    assert not looks["mathjax"] and looks["named"] == 0, looks
    assert looks["lookup"] == "function", looks
    assert looks["yellow"], f"the Styler's CSS no longer reaches its own cells: {looks}"


def test_the_control_runs_script_when_outputs_are_trusted(
    lab: Lab, browser: Any, tmp_path: Path
) -> None:
    """trust_outputs = true: the same probes DO run (the browser checks can fail), and this
    is what the switch gives up: the page's credentials, a terminal on the host."""
    page = browser.new_page()
    with screenshot_on_failure(page, tmp_path, "control"):
        open_notebook(page, lab, "trusted/control.ipynb")
        run_all(page)
        assert pwned(page) >= 1, (
            "the control's script did not run: the browser checks prove nothing"
        )
        deadline = time.monotonic() + 10
        while not lab.api("/api/terminals") and time.monotonic() < deadline:
            time.sleep(0.2)
        terminals = lab.api("/api/terminals")
        assert terminals, "the control's script could not open a terminal"
    for terminal in terminals:
        request = urllib.request.Request(
            f"{lab.url}/api/terminals/{terminal['name']}",
            method="DELETE",
            headers={"Authorization": f"token {lab.token}"},
        )
        urllib.request.urlopen(request, timeout=10).close()
    page.close()


def test_widgets_work_as_on_ipykernel_and_run_no_script(
    lab: Lab, browser: Any, tmp_path: Path
) -> None:
    """Issue 34's notebook: a slider moved in the page moves the guest's value; interact runs
    its function again; an Output widget captures; tqdm's bar changes while its cell runs;
    an ipympl figure is a canvas. And no widget runs script."""
    page = browser.new_page()
    with screenshot_on_failure(page, tmp_path, "widgets"):
        open_notebook(page, lab, "widgets/widgets.ipynb")
        page.evaluate(
            """() => {
                window.__bars = new Set();
                setInterval(() => {
                    for (const el of document.querySelectorAll('.widget-html-content'))
                        if (el.textContent.includes('/20')) window.__bars.add(el.textContent);
                }, 50);
            }"""
        )
        run_all(page)
        sliders = page.locator(".jp-OutputArea-output .widget-slider .noUi-handle")
        assert sliders.count() >= 2, "the sliders are not shown"
        sliders.nth(0).focus()
        for _ in range(3):
            page.keyboard.press("ArrowRight")
        page.wait_for_timeout(1000)
        assert _kernel_says(page, "print(slider.value)") == "3\n", "the slider's move was lost"
        sliders.nth(1).focus()
        for _ in range(2):
            page.keyboard.press("ArrowRight")
        page.get_by_text("square 49").wait_for(timeout=30_000)  # interact ran show(7)
        plots = page.locator(".widget-output img[src^='data:image/png']")
        assert plots.count() >= 1, "interact's plot is not shown"
        before = plots.last.get_attribute("src")
        sliders.nth(2).focus()
        page.keyboard.press("ArrowRight")
        page.wait_for_function(
            "before => { const imgs = document.querySelectorAll("
            "\".widget-output img[src^='data:image/png']\");"
            " return imgs.length && imgs[imgs.length - 1].src !== before; }",
            arg=before,
            timeout=30_000,
        )  # the plot was drawn again for the new n
        output = page.locator(".widget-output").get_by_text("captured by the Output widget")
        assert output.count() == 1, "the Output widget captured nothing"
        bars = page.evaluate("window.__bars.size")
        assert bars >= 3, f"tqdm's bar changed {bars} times while its cell ran"
        assert page.locator(".jupyter-matplotlib canvas").count() >= 1, "no ipympl canvas"
        page.wait_for_timeout(2000)
        assert pwned(page) == 0, "a widget ran script in the page"
        assert lab.api("/api/terminals") == [], "a terminal was opened on the host"
        assert page.get_by_text(NOTE).count() >= 1, "the widget firewall's note is not shown"
        page.screenshot(path=str(tmp_path / "widgets.png"), full_page=True)

        # Reopened, the page opens its own control comm and asks for every model's state:
        # the guest's answer passes (the widgets come back), and still nothing runs.
        page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
        page.wait_for_timeout(1500)
        page.reload()
        page.locator(".jp-OutputArea-output .widget-slider .noUi-handle").first.wait_for(
            timeout=60_000
        )
        page.wait_for_timeout(2000)
        assert pwned(page) == 0, "a restored widget ran script in the page"
    page.close()


def _kernel_says(page: Any, code: str) -> str:
    """What `code` prints, run by the page's own kernel connection."""
    return str(
        page.evaluate(
            """async code => {
                const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
                const future = kernel.requestExecute({code});
                let text = '';
                future.onIOPub = msg => {
                    if (msg.header.msg_type === 'stream') text += msg.content.text; };
                await future.done;
                return text;
            }""",
            code,
        )
    )


# -- issue 47: a widget's view, and fetches from widget fields -------------------------------


class _Beacons(BaseHTTPRequestHandler):
    """Records every request that reaches it: a page that fetches from here leaked."""

    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.seen.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def _widget_leak_cells(base: str) -> list[str]:
    """Script through a view the model's package never pairs with it, and a fetch from every
    kind of URL- or CSS-valued widget field, each beacon at a path of its own."""
    onerror = f'<img src=x onerror="{BUMP}">'
    return [
        "import ipywidgets as w",
        f"w.Label(value={onerror!r}, _view_name='HTMLView')",
        f"w.Textarea(value={onerror!r}, _view_name='HTMLMathView')",
        f"t = w.Text(value={onerror!r})\nh = w.HTML('linked')\n"
        "link = w.jslink((t, 'value'), (h, 'value'))\nw.VBox([t, h])",
        # A description made HTML by a truthy value that is not `true` (the page's own
        # sanitizer keeps an <img src=http:...>).
        f"c = w.Checkbox(description='tick')\ndisplay(c)\nc._send({{'method': 'update', "
        f"'state': {{'description': \"<img src='{base}/truthy-switch'>\", "
        "'description_allow_html': 1}, 'buffer_paths': []})",
        # A control comm of the guest's own, telling the firewall (not the page) that the
        # Image's bytes are a data: URL; the next cell asks the page to read them as a URL.
        f"img = w.Image(value=b'{base}/forged-control', format='png')\ndisplay(img)\n"
        "import comm\nctl = comm.create_comm(target_name='jupyter.widget.control', data={}, "
        "metadata={'version': '2.1.0'})\nctl.send({'method': 'update_states', 'states': "
        "{img.model_id: {'model_module': '@jupyter-widgets/controls', 'model_name': "
        "'ImageModel', 'model_module_version': '2.0.0', 'state': {'_view_module': "
        "'@jupyter-widgets/controls', '_view_name': 'ImageView'}}}, 'buffer_paths': "
        "[[img.model_id, 'state', 'value']]}, buffers=[b'data:image/png;base64,AAAA'])",
        "img.format = 'url'",
        f"w.HTML('styled html', style={{'background': 'url({base}/html-style)'}})",
        f"w.Label('styled label', style={{'background': \"url('{base}/label-style')\"}})",
        f"w.HTMLMath('styled math', style={{'background': 'url({base}/htmlmath-style)'}})",
        f"w.Image(value=b'{base}/image', format='url')",
        f"w.Video(value=b'{base}/video', format='url', autoplay=False)",
        f"w.Audio(value=b'{base}/audio', format='url', autoplay=False)",
    ]


@pytest.fixture
def beacons() -> Iterator[tuple[str, list[str]]]:
    _Beacons.seen = []
    server = LocalHTTPServer(_Beacons)
    server.start()
    try:
        yield server.base, _Beacons.seen
    finally:
        server.stop()


def _run_widget_leaks(
    lab: Lab,
    browser: Any,
    folder: Path,
    kernel: str,
    base: str,
    expect: frozenset[str] = frozenset(),
) -> tuple[int, list[str]]:
    """The leak cells in a notebook of their own on `kernel`: (script runs, requests the page
    made to `base`), once the widgets are drawn and a moment has passed (or, at most 30 s,
    until the paths in `expect` were requested)."""
    name = f"leaks-{kernel}/leaks.ipynb"
    _notebook(lab.root / name, _widget_leak_cells(base), kernel)
    page = browser.new_page(viewport={"width": 1280, "height": 4000})  # every cell in view
    requested: list[str] = []
    page.on("request", lambda r: requested.append(r.url) if r.url.startswith(base) else None)
    with screenshot_on_failure(page, folder, f"leaks-{kernel}"):
        open_notebook(page, lab, name)
        run_all(page)
        page.locator(".jp-OutputArea-output").get_by_text("styled math").wait_for(timeout=30_000)
        page.locator(".jp-OutputArea-output audio").wait_for(state="attached", timeout=30_000)
        page.wait_for_timeout(3000)  # media and backgrounds load a little later
        deadline = time.monotonic() + 30
        while expect - {u.removeprefix(base) for u in requested} and time.monotonic() < deadline:
            page.wait_for_timeout(250)
        runs = pwned(page)
    page.close()
    return runs, requested


def test_widgets_run_no_script_and_fetch_nothing(
    lab: Lab, browser: Any, tmp_path: Path, beacons: tuple[str, list[str]]
) -> None:
    """Issue 47: a Label or Textarea shown through HTMLView/HTMLMathView, a link that copies
    a Text's value into an HTML widget, url() in HTML/Label/HTMLMath styles and media with
    format='url' (each pointing at a local HTTP server), a description made HTML by
    description_allow_html=1, an Image made 'url' after a guest's own control comm claimed
    its bytes were a data: URL: no script runs and no request leaves the page for that
    server."""
    base, seen = beacons
    runs, requested = _run_widget_leaks(lab, browser, tmp_path, KERNEL_NAME, base)
    fetched = sorted({url.removeprefix(base) for url in requested} | set(seen))
    assert (runs, fetched) == (0, []), f"script ran {runs} times; the page fetched {fetched}"


def test_the_widget_leaks_run_when_outputs_are_trusted(
    lab: Lab, browser: Any, tmp_path: Path, beacons: tuple[str, list[str]]
) -> None:
    """The same cells on the trusting spec DO run script and fetch: the checks above can
    fail."""
    base, seen = beacons
    expect = frozenset({"/html-style", "/image"})
    trusting = f"{KERNEL_NAME}-trusting"
    runs, requested = _run_widget_leaks(lab, browser, tmp_path, trusting, base, expect)
    assert runs >= 1, "the control's widgets ran no script: the check above proves nothing"
    fetched = {url.removeprefix(base) for url in requested} | set(seen)
    assert expect <= fetched, f"the control fetched only {fetched}"

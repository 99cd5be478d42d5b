"""The agent server's page in Debian's Chromium (Playwright): the link `sandbox-kernel serve`
prints, a question per golden query of each example dataset, a refused Python request, a
timeout, and a result whose values, column names and output are HTML: shown as text, never
run. Screenshots of failures are kept in the test's temporary folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import chromium, screenshot_on_failure
from tests.runner.serving import GOLDEN, QUESTIONS, TOKEN, Server, Serving, expected

pytestmark = pytest.mark.slow

HOSTILE = (
    "print('<img src=x onerror=\"window.__pwned=1\">')\n"
    "result_columns = ['<svg onload=\"window.__pwned=2\">', 'b']\n"
    "result_rows = [['<script>window.__pwned=3</script>', '<b>bold</b>']]"
)


@pytest.fixture(scope="module")
def server(servers: Serving) -> Server:
    return servers.start("--timeout", "3")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


def _open(browser: Any, server: Server) -> Any:
    page = browser.new_page()
    page.goto(f"{server.url}/?token={TOKEN}")  # the printed link; it sets the cookie
    assert page.url == f"{server.url}/", "the token should leave the address bar"
    page.wait_for_selector("body[data-state=idle]")
    return page


def _ask(page: Any, dataset: str, message: str) -> None:
    page.select_option("#dataset", dataset)
    page.fill("#message", message)
    page.click("#send")
    page.wait_for_selector("body[data-state=idle]", timeout=60_000)
    page.wait_for_selector("#statuses li[data-event=done]")


def _table(page: Any) -> tuple[list[str], list[list[str]]]:
    columns = page.locator("#result th").all_inner_texts()
    rows = [row.locator("td").all_inner_texts() for row in page.locator("#result tbody tr").all()]
    return columns, rows


def _details(page: Any) -> dict[str, str]:
    terms = page.locator("#details dt").all_inner_texts()
    return dict(zip(terms, page.locator("#details dd").all_inner_texts(), strict=True))


def _cells(values: list[list[Any]]) -> list[list[str]]:
    """Values as the page writes them (JavaScript's String(): 273.0 is "273")."""
    return [[_js(v) for v in row] for row in values]


def _js(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@pytest.mark.parametrize("question", list(QUESTIONS))
def test_a_golden_query_per_dataset(
    browser: Any, server: Server, tmp_path: Path, question: str
) -> None:
    golden = QUESTIONS[question]
    page = _open(browser, server)
    with screenshot_on_failure(page, tmp_path, golden):
        _ask(page, golden.split(".")[0], question)
        statuses = page.locator("#statuses li").all_inner_texts()
        assert [s.split(" ")[0] for s in statuses] == [
            "planning", "validating", "executing", "result", "done"
        ]  # fmt: skip
        table = expected(golden)
        columns, rows = _table(page)
        assert columns == table["columns"]
        assert rows == _cells(table["rows"])
        details = _details(page)
        kind = "sql" if golden.endswith(".sql") else "python"
        assert details["query_type"] == kind
        code = details["SQL" if kind == "sql" else "Python code"]
        assert code.strip() == (GOLDEN / golden).read_text().strip()
        assert details["planned by"] == "model scripted:model.json"
        check = "AST policy check" if kind == "python" else "SQL statement check"
        assert details["guard"] == f"allowed ({check})"
        assert "total" in details["timings"] and details["limits hit"] == "none"
    page.close()


def test_a_refused_python_request_says_why(browser: Any, servers: Serving, tmp_path: Path) -> None:
    sql_only = servers.start(python=False, name="page-sql-only")
    page = _open(browser, sql_only)
    with screenshot_on_failure(page, tmp_path, "refused"):
        _ask(page, "retail", "PYTHON: result = len(orders)")
        error = page.inner_text("#error")
        assert error.startswith("PYTHON_EXECUTION_DISABLED: Python execution is disabled")
        assert "ENABLE_PYTHON_EXECUTION=1" in error
        assert page.locator("#result th").count() == 0
    page.close()


def test_a_timeout_is_shown(browser: Any, server: Server, tmp_path: Path) -> None:
    page = _open(browser, server)
    with screenshot_on_failure(page, tmp_path, "timeout"):
        _ask(page, "retail", "Please run forever")
        assert page.inner_text("#error").startswith("RUNNER_TIMEOUT: the query took longer")
        assert _details(page)["limits hit"] == "timeout"
    page.close()


def test_html_from_a_run_is_shown_as_text_and_never_runs(
    browser: Any, server: Server, tmp_path: Path
) -> None:
    page = _open(browser, server)
    with screenshot_on_failure(page, tmp_path, "hostile"):
        _ask(page, "retail", f"PYTHON: {HOSTILE}")
        page.wait_for_timeout(500)  # time for an injected handler to fire, were there one
        assert page.evaluate("window.__pwned") is None
        assert page.locator("#result img, #result svg, #result script, #result b").count() == 0
        assert page.locator("#stdout img").count() == 0
        columns, rows = _table(page)
        assert columns == ['<svg onload="window.__pwned=2">', "b"]
        assert rows == [["<script>window.__pwned=3</script>", "<b>bold</b>"]]
        assert page.inner_text("#stdout").rstrip("\n") == '<img src=x onerror="window.__pwned=1">'
        assert "window.__pwned" in _details(page)["Python code"]
    page.close()


def test_a_chart_is_shown_as_an_image(browser: Any, server: Server, tmp_path: Path) -> None:
    page = _open(browser, server)
    with screenshot_on_failure(page, tmp_path, "chart"):
        _ask(
            page,
            "retail",
            "PYTHON: import matplotlib.pyplot as plt\n"
            "orders.groupby('customer_id').size().plot.bar()\nresult = 'charted'",
        )
        figure = page.locator("#figure")
        assert figure.is_visible(), "the chart is not shown"
        assert figure.get_attribute("src").startswith("data:image/png;base64,")
        width = figure.evaluate("img => img.decode().then(() => img.naturalWidth)")
        assert width > 0, "the chart does not render"
        assert page.evaluate("window.__pwned") is None
    page.close()


def test_a_server_that_dies_mid_answer_is_said_so(
    browser: Any, servers: Serving, tmp_path: Path
) -> None:
    """A replica killed while it answers: the page says the answer was cut (it showed
    nothing before: a stream that ended without its done event looked like an empty answer)."""
    doomed = servers.start("--timeout", "60", name="page-doomed")
    page = _open(browser, doomed)
    with screenshot_on_failure(page, tmp_path, "died"):
        page.select_option("#dataset", "retail")
        page.fill("#message", "PYTHON: while True:\n    pass")
        page.click("#send")
        page.wait_for_selector("#statuses li[data-event=executing]", timeout=60_000)
        doomed.process.kill()
        page.wait_for_selector("body[data-state=idle]", timeout=60_000)
        error = page.inner_text("#error")
        assert error.startswith(("the server stopped before", "the connection failed")), error
        assert page.locator("#result th").count() == 0
    page.close()

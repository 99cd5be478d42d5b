"""In JupyterLab (Chromium): a cell that writes a file beside the notebook shows the one
`[sandbox]` line saying where it went and how to keep it; a cell that writes nothing shows
none; `%files --keep` puts it beside the notebook, where JupyterLab lists it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.browser import screenshot_on_failure
from tests.kernel.test_browser import (  # noqa: F401  (pytest's fixtures: lab, browser)
    Lab,
    _notebook,
    browser,
    lab,
    open_notebook,
    run_all,
)

CELLS = ["x = 1", "open('results.csv', 'w').write('a,b\\n1,2\\n')", "%files --keep results.csv"]


def _cell_outputs(page: Any) -> list[str]:
    """The text of each code cell's outputs, in order."""
    texts: list[str] = page.evaluate(
        """() => window.jupyterapp.shell.currentWidget.content.widgets
            .filter(cell => cell.model.type === 'code')
            .map(cell => cell.node.querySelector('.jp-OutputArea')?.innerText ?? '')"""
    )
    return texts


def test_jupyterlab_shows_where_a_cells_file_went(
    lab: Lab,  # noqa: F811  (the fixture imported above)
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    _notebook(lab.root / "files" / "analysis.ipynb", CELLS)
    page = browser.new_page()
    try:
        with screenshot_on_failure(page, tmp_path, "files-line"):
            open_notebook(page, lab, "files/analysis.ipynb")
            run_all(page)
            quiet, wrote, kept = _cell_outputs(page)
            assert "[sandbox]" not in quiet
            assert "[sandbox] this cell wrote results.csv" in wrote
            assert ".sandbox-kernel/layer/" in wrote and "%files --keep NAME" in wrote
            assert "kept results.csv" in kept
            listed = {item["name"] for item in lab.api("/api/contents/files")["content"]}
            assert "results.csv" in listed
    finally:
        page.close()

"""The Benchmarks page's figures, drawn from the bench scripts' saved results.

    ```{bench-results} bench_kernel
    ```

reads bench/results/bench_kernel.json (bench/record.py writes it) and puts on the page, for
each figure: a table (the baseline's value, ours, the ratio, the goal), a chart of the
ratios with the 1.0x line, and the machine, date and command that produced it. A name with
no results file is an error, so a page never shows a figure nobody measured.

The chart is an inline SVG drawn here (bars and a few labels): no plotting library is needed
to build the docs.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
BAR_WIDTH, ROW_HEIGHT, LABEL_WIDTH = 360, 22, 260


def _number(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _table(figure: dict[str, Any]) -> nodes.table:
    unit = figure["unit"]
    header = ["", f"{figure['baseline']} ({unit})", f"{figure['subject']} ({unit})", "ratio"]
    has_goal = any(row.get("goal") is not None for row in figure["rows"])
    if has_goal:
        header.append("goal")
    table = nodes.table(classes=["bench-table"])
    group = nodes.tgroup(cols=len(header))
    table += group
    for _ in header:
        group += nodes.colspec(colwidth=1)
    head = nodes.thead()
    group += head
    head += _row(header)
    body = nodes.tbody()
    group += body
    for row in figure["rows"]:
        ratio = row["subject"] / row["baseline"]
        cells = [row["label"], _number(row["baseline"]), _number(row["subject"]), f"{ratio:.2f}x"]
        if has_goal:
            cells.append(f"{row['goal']:.2f}x" if row.get("goal") is not None else "")
        body += _row(cells)
    return table


def _row(cells: list[str]) -> nodes.row:
    row = nodes.row()
    for text in cells:
        entry = nodes.entry()
        entry += nodes.paragraph(text=text)
        row += entry
    return row


def _chart(figure: dict[str, Any]) -> str:
    """Horizontal bars of each row's ratio, with a line at 1.0x (the baseline)."""
    rows = figure["rows"]
    ratios = [row["subject"] / row["baseline"] for row in rows]
    top = max([1.0, *ratios]) * 1.1
    height = ROW_HEIGHT * len(rows) + 24
    width = LABEL_WIDTH + BAR_WIDTH + 60
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="{html.escape(figure["title"])}: ratios" class="bench-chart">'
    ]
    for i, (row, ratio) in enumerate(zip(rows, ratios, strict=True)):
        y = 4 + i * ROW_HEIGHT
        good = ratio >= 1 if figure.get("higher_is_better") else ratio <= 1
        colour = "#3b7dd8" if good else "#d8843b"
        length = BAR_WIDTH * ratio / top
        label = html.escape(row["label"])
        parts.append(
            f'<text x="{LABEL_WIDTH - 6}" y="{y + 14}" text-anchor="end" '
            f'font-size="12">{label}</text>'
            f'<rect x="{LABEL_WIDTH}" y="{y + 3}" width="{length:.1f}" height="{ROW_HEIGHT - 8}" '
            f'fill="{colour}"/>'
            f'<text x="{LABEL_WIDTH + length + 4:.1f}" y="{y + 14}" font-size="12">'
            f"{ratio:.2f}x</text>"
        )
    one = LABEL_WIDTH + BAR_WIDTH / top
    bottom = height - 16
    parts.append(
        f'<line x1="{one:.1f}" y1="0" x2="{one:.1f}" y2="{bottom}" stroke="#444" '
        f'stroke-dasharray="3,3"/><text x="{one:.1f}" y="{height - 4}" text-anchor="middle" '
        f'font-size="11">1.0x = {html.escape(figure["baseline"])}</text></svg>'
    )
    return "".join(parts)


class BenchResults(SphinxDirective):
    """```{bench-results} NAME``` : the figures of bench/results/NAME.json."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        path = RESULTS / f"{name}.json"
        if not path.is_file():
            raise self.error(f"no results for {name}: run python bench/{name}.py")
        self.env.note_dependency(str(path))
        result = json.loads(path.read_text())
        machine = result["machine"]
        made = nodes.paragraph()
        made += nodes.emphasis(
            text=(
                f"Measured {result['date']} on {machine['cpu']} ({machine['cores']} cores, "
                f"{machine['memory_gib']} GiB, {machine['system']}, host Python "
                f"{machine['python']}) with "
            )
        )
        made += nodes.literal(text=result["command"])
        out: list[nodes.Node] = [made]
        for figure in result["figures"]:
            section = nodes.rubric(text=figure["title"])
            out.append(section)
            if figure.get("note"):
                out.append(nodes.paragraph(text=figure["note"]))
            out.append(_table(figure))
            out.append(nodes.raw("", _chart(figure), format="html"))
        return out


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("bench-results", BenchResults)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

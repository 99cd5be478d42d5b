"""The house's shape, held by CI: the import contracts in pyproject.toml ([tool.importlinter],
one per "Must not import" rule) are kept, and no module of sandbox_kernel is part of an import
circle (type-only imports included: a circle of annotations is still two rooms that need each
other). Packages' own __init__ modules are left out: they hand names on.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_are_kept() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_no_module_is_part_of_an_import_circle() -> None:
    graph = grimp.build_graph("sandbox_kernel")
    packages = {m for m in graph.modules if graph.find_children(m)}
    circles = set()
    for module in sorted(graph.modules - packages):
        for imported in graph.find_modules_directly_imported_by(module) - packages:
            chain = graph.find_shortest_chain(imported, module)
            if chain is not None and not packages.intersection(chain):
                circles.add(" -> ".join((module, *chain)))
    assert not circles, "\n".join(sorted(circles))

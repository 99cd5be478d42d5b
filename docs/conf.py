"""Sphinx configuration: the pages are Markdown (MyST), built by bin/docs with warnings as errors."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))  # bench_figures: the Benchmarks page

project = "sandbox-kernel"
author = "the sandbox-kernel developers"
copyright = "2026, the sandbox-kernel developers"  # noqa: A001 - Sphinx's name
extensions = ["myst_parser", "bench_figures"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_ext"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
html_theme = "pydata_sphinx_theme"
html_title = "sandbox-kernel"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
suppress_warnings: list[str] = []

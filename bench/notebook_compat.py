"""Notebooks written for ipykernel, cell by cell on sandbox-python and on ipykernel with the
guest's package versions (the `sandbox-baseline` kernel, requirements-baseline.txt), and the
fraction of the cells that run on ipykernel that also run here.

    .venv/bin/python bench/notebook_compat.py FOLDER [--match GLOB] [--json FILE]

Each notebook runs in a copy of its folder (so its relative data paths work: the sandbox
kernel mounts the folder read-only at /notebook, SANDBOX_KERNEL_NOTEBOOK_FOLDER), a fresh
kernel of each kind per notebook, cells in order whatever the earlier ones did, as a user
running "Run All" without stopping would. A cell counts as running when its reply is "ok".
Cells that fail on ipykernel are left out; sandbox failures are sorted by cause, and those
that need what the sandbox never grants (the network, processes, threads) are counted apart,
as the issue's target says.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.manager import start_new_kernel

CELL_TIMEOUT_SECONDS = 900.0
STARTUP_SECONDS = 180.0
# Failures that need what the sandbox never grants: excluded from the target, counted.
NEVER_GRANTED = {
    "NoProcessesError": "processes",
    "URLError": "network",
    "HTTPError": "network",
    "ConnectionError": "network",
    "gaierror": "network",
}


@dataclass
class CellRun:
    notebook: str
    index: int
    source: str
    baseline: str  # "ok" or "EName: value"
    sandbox: str
    seconds_baseline: float
    seconds_sandbox: float


def _run(kc: Any, code: str) -> tuple[str, float]:
    """The cell's outcome, "ok" or "EName: evalue", and its seconds."""
    began = time.monotonic()
    try:
        reply = kc.execute_interactive(
            code, timeout=CELL_TIMEOUT_SECONDS, output_hook=lambda msg: None, allow_stdin=False
        )
    except TimeoutError:
        return "Timeout: no reply", time.monotonic() - began
    content = reply["content"]
    took = time.monotonic() - began
    if content["status"] == "ok":
        return "ok", took
    return f"{content.get('ename')}: {str(content.get('evalue'))[:300]}", took


def _kernel(name: str, folder: Path, scratch: Path) -> tuple[Any, Any]:
    env = dict(os.environ)
    if name == "sandbox-python":
        (scratch / "policy.toml").write_text("# the notebook defaults\n")
        env.update(
            SANDBOX_KERNEL_WORKSPACE=str(scratch / "workspace"),
            SANDBOX_KERNEL_POLICY=str(scratch / "policy.toml"),
            SANDBOX_KERNEL_RUN_LOG=str(scratch / "runs.jsonl"),
            SANDBOX_KERNEL_NOTEBOOK_FOLDER="read-only",
        )
    return start_new_kernel(
        kernel_name=name, startup_timeout=STARTUP_SECONDS, cwd=str(folder), env=env
    )


def run_notebook(path: Path) -> list[CellRun]:
    cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    runs: list[CellRun] = []
    with tempfile.TemporaryDirectory(prefix="notebook-compat-") as temp:
        folder = Path(temp) / "notebook"
        shutil.copytree(path.parent, folder, ignore=shutil.ignore_patterns("*.ipynb"))
        outcomes: dict[str, list[tuple[str, float]]] = {}
        for name in ("sandbox-baseline", "sandbox-python"):
            scratch = Path(temp) / name
            scratch.mkdir()
            km, kc = _kernel(name, folder, scratch)
            try:
                outcomes[name] = [_run(kc, cell.source) for cell in cells]
            finally:
                kc.stop_channels()
                km.shutdown_kernel(now=True)
        for index, cell in enumerate(cells):
            (base, base_s), (ours, ours_s) = (
                outcomes["sandbox-baseline"][index],
                outcomes["sandbox-python"][index],
            )
            runs.append(CellRun(path.name, index, cell.source, base, ours, base_s, ours_s))
    return runs


def _cause(outcome: str) -> str:
    name = outcome.split(":", 1)[0]
    return NEVER_GRANTED.get(name, name)


def report(runs: list[CellRun]) -> dict[str, Any]:
    counted = [r for r in runs if r.baseline == "ok"]
    failing = [r for r in counted if r.sandbox != "ok"]
    excluded = [r for r in failing if _cause(r.sandbox) in ("processes", "network", "threads")]
    target = len(counted) - len(excluded)
    passed = len(counted) - len(failing)
    return {
        "notebooks": len({r.notebook for r in runs}),
        "cells": len(runs),
        "ok_on_ipykernel": len(counted),
        "ok_on_both": passed,
        "fraction": passed / len(counted) if counted else 1.0,
        "excluded_network_processes_threads": len(excluded),
        "fraction_of_target": passed / target if target else 1.0,
        "failures_by_cause": dict(Counter(_cause(r.sandbox) for r in failing).most_common()),
        "seconds_ipykernel": round(sum(r.seconds_baseline for r in runs), 1),
        "seconds_sandbox": round(sum(r.seconds_sandbox for r in runs), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--match", default="*.ipynb", help="notebook file names (a glob)")
    parser.add_argument("--json", type=Path, help="write every cell's outcome here")
    args = parser.parse_args()
    paths = sorted(p for p in args.folder.glob("*.ipynb") if fnmatch.fnmatch(p.name, args.match))
    runs: list[CellRun] = []
    for path in paths:
        found = run_notebook(path)
        runs += found
        bad = [r for r in found if r.baseline == "ok" and r.sandbox != "ok"]
        print(f"{path.name}: {len(found)} cells, {len(bad)} fail only here", flush=True)
        for r in bad:
            print(f"    [{r.index}] {r.sandbox[:160]!r}  <- {r.source[:80]!r}", flush=True)
    summary = report(runs)
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "cells": [asdict(r) for r in runs]}))
    sys.exit(0)


if __name__ == "__main__":
    main()

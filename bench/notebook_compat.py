"""Notebooks written for ipykernel, cell by cell on sandbox-python and on ipykernel with the
guest's package versions (the `sandbox-baseline` kernel, requirements-baseline.txt): the
share of the cells that run on ipykernel that also run here, the share of those whose text
output is the same, and the time each kernel took.

    .venv/bin/python bench/notebook_compat.py FOLDER [--match GLOB] [--json FILE] [--policy FILE]

Each notebook runs on each kernel in a copy of its folder of its own (so its relative data
paths work, and what one kernel writes the other never sees), sandbox-python in its default
mode (the notebook's folder as a copy-on-write overlay), a fresh kernel of each kind per
notebook, cells in order whatever the earlier ones did, as a user running "Run All" without
stopping would. A cell counts as running when its reply is "ok". Cells that fail on ipykernel
are left out; sandbox failures are sorted by cause, and those that need what the sandbox
never grants (the network, processes, threads) are counted apart, as the issue's target says.

Text output: the cell's streams, its text/plain results and displays, as a user reads them;
memory addresses, %timeit's and %time's figures, tqdm's rates, process ids and library paths
are masked before comparing, and cells whose text differs between two runs of ipykernel
itself (unseeded random numbers, clocks) are left out of the comparison: ipykernel runs each
notebook twice. Time: each cell's reply, both kernels on the same machine one after the
other; whole-notebook ratio and the median and 90th percentile of per-cell ratios (cells over
10 ms on ipykernel that ran on both). The ratio again without the %timeit cells, whose
length is IPython's time budget more than the kernel's speed (in one course 5 such cells were
70% of ipykernel's time), and split into light cells (under 50 ms on ipykernel) and heavy
ones.

To re-read a saved run: `notebook_compat.py --report FILE.json`.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import statistics
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
    text_baseline: str = ""
    text_sandbox: str = ""
    steady: bool = True  # ipykernel printed the same text in a second run (no randomness)


# What differs between two runs of one kernel: masked before text is compared.
_MASKS = (
    (re.compile(r"0x[0-9a-fA-F]{6,}"), "0x?"),
    (re.compile(r"[\d.]+ [nµμmu]?s ± [\d.]+ [nµμmu]?s per loop.*"), "<timeit>"),
    (re.compile(r"ipykernel_\d+"), "ipykernel_?"),  # a warning's cell file: the process id
    # Where a library is installed (a warning's file): the environment's, not the kernel's.
    (re.compile(r"\S*/(site-packages|python3\d+\.zip)/"), "<lib>/"),
    (re.compile(r"^Time: +\d\d:\d\d:\d\d", re.M), "Time: <clock>"),  # statsmodels' summary
    (re.compile(r"(CPU times|Wall time):.*"), r"\1: <time>"),
    (re.compile(r"\d+(\.\d+)?(it/s|s/it)"), "<rate>"),
    (re.compile(r"\[\d\d:\d\d<\d\d:\d\d"), "[<eta>"),
)


def _masked(text: str) -> str:
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text


def _run(kc: Any, code: str) -> tuple[str, float, str]:
    """The cell's outcome ("ok" or "EName: evalue"), its seconds, and its text output."""
    texts: list[str] = []

    def hear(msg: dict[str, Any]) -> None:
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            texts.append(content["text"])
        elif kind in ("execute_result", "display_data"):
            texts.append(content["data"].get("text/plain", "") + "\n")

    began = time.monotonic()
    try:
        reply = kc.execute_interactive(
            code, timeout=CELL_TIMEOUT_SECONDS, output_hook=hear, allow_stdin=False
        )
    except TimeoutError:
        return "Timeout: no reply", time.monotonic() - began, ""
    content = reply["content"]
    took = time.monotonic() - began
    text = _masked("".join(texts))
    if content["status"] == "ok":
        return "ok", took, text
    return f"{content.get('ename')}: {str(content.get('evalue'))[:300]}", took, text


DEFAULT_POLICY = "# the notebook defaults\n"  # sandbox-python's policy file (else --policy)


def _kernel(name: str, folder: Path, scratch: Path, policy: str) -> tuple[Any, Any]:
    env = dict(os.environ)
    if name == "sandbox-python":
        (scratch / "policy.toml").write_text(policy)
        env.update(
            SANDBOX_KERNEL_WORKSPACE=str(scratch / "workspace"),
            SANDBOX_KERNEL_POLICY=str(scratch / "policy.toml"),
            SANDBOX_KERNEL_RUN_LOG=str(scratch / "runs.jsonl"),
        )
    return start_new_kernel(
        kernel_name=name, startup_timeout=STARTUP_SECONDS, cwd=str(folder), env=env
    )


def run_notebook(path: Path, policy: str = DEFAULT_POLICY) -> list[CellRun]:
    cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    runs: list[CellRun] = []
    with tempfile.TemporaryDirectory(prefix="notebook-compat-") as temp:
        outcomes: dict[str, list[tuple[str, float, str]]] = {}
        for run in ("sandbox-baseline", "sandbox-python", "again"):
            name = "sandbox-baseline" if run == "again" else run
            folder = Path(temp) / f"{run}-notebook"  # a copy each: writes never cross
            shutil.copytree(path.parent, folder, ignore=shutil.ignore_patterns("*.ipynb"))
            scratch = Path(temp) / run
            scratch.mkdir()
            km, kc = _kernel(name, folder, scratch, policy)
            try:
                outcomes[run] = [_run(kc, cell.source) for cell in cells]
            finally:
                kc.stop_channels()
                km.shutdown_kernel(now=True)
        for index, cell in enumerate(cells):
            (base, base_s, base_text), (ours, ours_s, our_text) = (
                outcomes["sandbox-baseline"][index],
                outcomes["sandbox-python"][index],
            )
            steady = outcomes["again"][index][2] == base_text  # ipykernel prints it twice alike
            runs.append(
                CellRun(
                    path.name, index, cell.source, base, ours, base_s, ours_s, base_text, our_text,
                    steady,
                )
            )  # fmt: skip
    return runs


def _differs(run: CellRun) -> bool:
    return run.text_baseline != run.text_sandbox


def _cause(outcome: str) -> str:
    name = outcome.split(":", 1)[0]
    return NEVER_GRANTED.get(name, name)


_TIMEIT = re.compile(r"^\s*%%?timeit\b|[;=(]\s*%timeit\b", re.MULTILINE)
LIGHT_SECONDS = 0.05  # a cell under this on ipykernel: the per-cell turn is most of its time


def _self_timed(run: CellRun) -> bool:
    """A %timeit cell runs its statement as many times as fills IPython's time budget (0.2 s
    a run, 7 runs, loops in powers of ten): its length says little about the kernel's speed,
    and a few such cells weigh as much as the whole rest of a notebook."""
    return bool(_TIMEIT.search(run.source))


def _ratio(runs: list[CellRun]) -> float | None:
    base = sum(r.seconds_baseline for r in runs)
    return round(sum(r.seconds_sandbox for r in runs) / base, 3) if base else None


def _seconds(runs: list[CellRun]) -> dict[str, Any]:
    return {
        "cells": len(runs),
        "seconds_ipykernel": round(sum(r.seconds_baseline for r in runs), 1),
        "seconds_sandbox": round(sum(r.seconds_sandbox for r in runs), 1),
        "ratio": _ratio(runs),
    }


def report(runs: list[CellRun]) -> dict[str, Any]:
    counted = [r for r in runs if r.baseline == "ok"]
    failing = [r for r in counted if r.sandbox != "ok"]
    excluded = [r for r in failing if _cause(r.sandbox) in ("processes", "network", "threads")]
    target = len(counted) - len(excluded)
    passed = len(counted) - len(failing)
    both = [r for r in counted if r.sandbox == "ok" and r.steady]
    same_text = [r for r in both if not _differs(r)]
    # Per-cell ratios of cells that ran on both: a cell that fails (a data file missing from
    # the clone, an error the course shows on purpose) times the kernels' tracebacks, which
    # ipykernel formats in 10-150 ms and the guest in 3-5 ms.
    timed = [
        r
        for r in runs
        if r.seconds_baseline >= 0.01 and r.seconds_sandbox > 0 and r.baseline == r.sandbox == "ok"
    ]
    ratios = sorted(r.seconds_sandbox / r.seconds_baseline for r in timed)
    base_total = sum(r.seconds_baseline for r in runs)
    untimed = [r for r in runs if not _self_timed(r)]
    ran = [r for r in untimed if r.baseline == r.sandbox == "ok"]
    return {
        "notebooks": len({r.notebook for r in runs}),
        "cells": len(runs),
        "ok_on_ipykernel": len(counted),
        "ok_on_both": passed,
        "fraction": passed / len(counted) if counted else 1.0,
        "excluded_network_processes_threads": len(excluded),
        "fraction_of_target": passed / target if target else 1.0,
        "failures_by_cause": dict(Counter(_cause(r.sandbox) for r in failing).most_common()),
        "unsteady_on_ipykernel": len([r for r in counted if not r.steady]),
        "same_text": len(same_text),
        "fraction_same_text": len(same_text) / len(both) if both else 1.0,
        "seconds_ipykernel": round(base_total, 1),
        "seconds_sandbox": round(sum(r.seconds_sandbox for r in runs), 1),
        "time_ratio": round(sum(r.seconds_sandbox for r in runs) / base_total, 3)
        if base_total
        else None,
        "cells_in_cell_ratios": len(ratios),
        "cell_ratio_median": round(statistics.median(ratios), 3) if ratios else None,
        "cell_ratio_p90": round(ratios[int(0.9 * (len(ratios) - 1))], 3) if ratios else None,
        # The same time without the %timeit cells, and split by weight on ipykernel.
        "time_ratio_without_timeit": _ratio(untimed),
        "timeit_cells": _seconds([r for r in runs if _self_timed(r)]),
        "light_cells": _seconds([r for r in untimed if r.seconds_baseline < LIGHT_SECONDS]),
        "heavy_cells": _seconds([r for r in untimed if r.seconds_baseline >= LIGHT_SECONDS]),
        # Like for like: the cells without %timeit that ran on both kernels (a cell that fails
        # on one times its traceback, or a file missing from the clone).
        "ran_on_both": _seconds(ran),
        "ran_on_both_light": _seconds([r for r in ran if r.seconds_baseline < LIGHT_SECONDS]),
        "ran_on_both_heavy": _seconds([r for r in ran if r.seconds_baseline >= LIGHT_SECONDS]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, nargs="?", help="the notebooks' folder")
    parser.add_argument("--match", default="*.ipynb", help="notebook file names (a glob)")
    parser.add_argument("--json", type=Path, help="write every cell's outcome here")
    parser.add_argument("--report", type=Path, help="summarize a run --json saved; run nothing")
    parser.add_argument(
        "--policy", type=Path, help="sandbox-python's policy file (e.g. meter_fuel = false)"
    )
    args = parser.parse_args()
    policy = args.policy.read_text() if args.policy else DEFAULT_POLICY
    if args.report:
        saved = json.loads(args.report.read_text())["cells"]
        print(json.dumps(report([CellRun(**cell) for cell in saved]), indent=2))
        return
    if args.folder is None:
        parser.error("a folder of notebooks, or --report FILE.json, is needed")
    paths = sorted(p for p in args.folder.glob("*.ipynb") if fnmatch.fnmatch(p.name, args.match))
    runs: list[CellRun] = []
    for path in paths:
        found = run_notebook(path, policy)
        runs += found
        bad = [r for r in found if r.baseline == "ok" and r.sandbox != "ok"]
        differ = [r for r in found if r.baseline == r.sandbox == "ok" and r.steady and _differs(r)]
        print(
            f"{path.name}: {len(found)} cells, {len(bad)} fail only here, "
            f"{len(differ)} print other text",
            flush=True,
        )
        for r in bad:
            print(f"    [{r.index}] {r.sandbox[:160]!r}  <- {r.source[:80]!r}", flush=True)
        for r in differ:
            print(f"    [{r.index}] text differs  <- {r.source[:80]!r}", flush=True)
    summary = report(runs)
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "cells": [asdict(r) for r in runs]}))
    sys.exit(0)


if __name__ == "__main__":
    main()

"""What a benchmark measured, as data: the figures the docs' Benchmarks page is built from.

A bench script prints its table and saves the same numbers with `save()` to
bench/results/<bench>.json: each figure's rows (a label, the baseline's value and ours,
measured in the same run), the machine, the date and the command that made them. The docs
(docs/_ext/bench_figures.py) draw a table and a chart from each file; nothing on the page is
typed by hand. `--no-save` runs a bench without replacing its file.

    figure = Figure(title="Round trip", baseline="ipykernel", subject="sandbox-python",
                    unit="ms", rows=[Row(label="x = 1, median", baseline=0.9, subject=1.0)])
    save("bench_kernel", "The kernel as clients feel it", [figure])
"""

from __future__ import annotations

import datetime
import os
import platform
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["BenchResult", "Figure", "Machine", "Row", "save"]

RESULTS = Path(__file__).resolve().with_name("results")


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: str
    baseline: float = Field(gt=0)
    subject: float = Field(gt=0)
    goal: float | None = None  # the ratio we aim at or below, when there is one

    @property
    def ratio(self) -> float:
        return self.subject / self.baseline


class Figure(BaseModel):
    """One table: rows measured on the baseline and on ours, in one unit."""

    model_config = ConfigDict(extra="forbid")

    title: str
    baseline: str  # what the baseline column is ("ipykernel", "native CPython")
    subject: str  # what is measured against it
    unit: str  # "ms", "MiB", "chats/s"
    rows: list[Row]
    higher_is_better: bool = False  # throughput: a ratio above 1 is the good side
    note: str = ""  # one line on how to read it (what the samples are)


class Machine(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cpu: str
    cores: int
    memory_gib: float
    system: str
    python: str

    @classmethod
    def here(cls) -> Machine:
        cpu = platform.processor() or platform.machine()
        cpuinfo = Path("/proc/cpuinfo")
        if cpuinfo.exists():
            for line in cpuinfo.read_text().splitlines():
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return cls(
            cpu=cpu,
            cores=os.cpu_count() or 1,
            memory_gib=round(pages / 2**30, 1),
            system=f"{platform.system()} {platform.release()}",
            python=platform.python_version(),
        )


class BenchResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bench: str
    title: str
    command: str
    date: datetime.date
    machine: Machine
    figures: list[Figure]


def save(bench: str, title: str, figures: list[Figure]) -> Path | None:
    """Write bench/results/<bench>.json (unless the command line says --no-save)."""
    if "--no-save" in sys.argv:
        return None
    result = BenchResult(
        bench=bench,
        title=title,
        command=" ".join(["python", f"bench/{bench}.py", *arguments()]),
        date=datetime.date.today(),
        machine=Machine.here(),
        figures=figures,
    )
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{bench}.json"
    path.write_text(result.model_dump_json(indent=2) + "\n")
    print(f"saved {path.relative_to(RESULTS.parent.parent)}")
    return path


def arguments() -> list[str]:
    """The command line's arguments, without --no-save."""
    return [arg for arg in sys.argv[1:] if arg != "--no-save"]

"""A session's output as its callbacks hear it: whole lines by default, or, with
REPLConfig.stream_partial_lines (the kernel's), whatever has arrived, while the cell runs. The
real guest; the splitter itself on bytes cut anywhere, UTF-8 included."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sandbox_kernel.repl.lines import LineSplitter
from tests.repl.conftest import new_repl, repl_config

CELL = "import time\nfor i in range(3):\n    print(f'\\r{i}', end='')\n    time.sleep(0.3)\nprint()"


@pytest.mark.parametrize("partial", [False, True], ids=["lines", "partial"])
def test_output_reaches_the_callback_as_configured(workspace: Path, partial: bool) -> None:
    heard: list[tuple[float, str]] = []
    config = repl_config(
        workspace,
        stream_partial_lines=partial,
        on_stdout=lambda t: heard.append((time.monotonic(), t)),
    )
    repl = new_repl(config)
    try:
        done = repl.execute(CELL)
    finally:
        repl.destroy()
    assert done.ok and done.stdout == "\r0\r1\r2\n"
    assert "".join(text for _, text in heard) == "\r0\r1\r2\n"
    if partial:
        assert [text for _, text in heard] == ["\r0", "\r1", "\r2", "\n"]
        assert heard[-1][0] - heard[0][0] >= 0.5  # the first came while the cell ran
    else:
        assert [text for _, text in heard] == ["\r0\r1\r2\n"]


@pytest.mark.parametrize("partial", [False, True])
def test_a_character_cut_between_chunks_arrives_whole(partial: bool) -> None:
    heard: list[str] = []
    splitter = LineSplitter(heard.append, partial=partial)
    data = "héllo ✓\nwörld".encode()
    for i in range(len(data)):  # one byte at a time: every cut
        splitter.feed(data[i : i + 1])
    splitter.flush()
    assert "".join(heard) == "héllo ✓\nwörld"
    assert "\ufffd" not in "".join(heard)

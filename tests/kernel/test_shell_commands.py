"""`!cmd` lines as notebooks write them (`!cat data/ex1.csv`, `!head`, `!ls`, `!wc`, pipes,
`x = !ls`, `!!cmd`), compared with ipykernel running the real commands on the same files:
the sandbox's own commands (guest/commands.py) print what coreutils print. A command the
sandbox does not have says so on stderr, `_exit_code` is 127 as in `sh`, and the rest of the
cell runs, as on ipykernel.
"""

from __future__ import annotations

import pytest

from tests.kernel.conftest import RunningKernel, without_written_files_note

FILES = (
    "import os\n"
    "os.makedirs('data/sub', exist_ok=True)\n"
    "open('data/ex1.csv', 'w').write('a,b,c,d,message\\n1,2,3,4,hello\\n5,6,7,8,world\\n"
    "9,10,11,12,foo\\n')\n"
    "open('data/two.txt', 'w').write('x\\ny\\n')\n"
    "open('data/dups.txt', 'w').write('a\\na\\nb\\nc\\nc\\nc\\na\\n')\n"
    "open('data/sub/f.txt', 'w').write('')\n"
)
COMPARED = [
    "!cat data/ex1.csv",
    "!cat -n data/two.txt",
    "!head -n 2 data/ex1.csv",
    "!head -2 data/ex1.csv data/two.txt",
    "!tail -n 1 data/ex1.csv",
    "!tail -3 data/dups.txt",
    "!wc data/ex1.csv",
    "!wc -l data/ex1.csv data/two.txt",
    "!cat data/ex1.csv | wc",
    "!cat data/ex1.csv | wc -l",
    "!ls data",
    "!ls data/sub data",
    "!ls data/*.csv",
    "!echo hello   world",
    "!grep -n o data/ex1.csv",
    "!grep -c o data/ex1.csv",
    "!grep -i HELLO data/ex1.csv",
    "!grep -v o data/ex1.csv",
    "!sort -t, -k2 -n data/ex1.csv",
    "!sort -r data/two.txt",
    "!cut -d, -f1,5 data/ex1.csv",
    "!cut -c1-3 data/ex1.csv",
    "!uniq -c data/dups.txt",
    "!sort data/dups.txt | uniq",
    "!mkdir -p data/made/deeper && ls data",
    "!cp data/two.txt data/copy.txt && cat data/copy.txt",
    "!mv data/copy.txt data/moved.txt; ls data",
    "!rm data/moved.txt; touch data/new.txt; ls data",
    "!rm -r data/made; ls data",
    "name = 'data/ex1.csv'\n!head -n 1 {name}",
    "found = !ls data\nprint(found)",
    "!!cat data/two.txt",
    "!grep nothing-matches data/ex1.csv\nprint(_exit_code)",
]


@pytest.fixture(scope="module")
def both(kernel: RunningKernel, ipykernel: RunningKernel) -> tuple[RunningKernel, RunningKernel]:
    for each in (kernel, ipykernel):
        each.run_ok(FILES)
    return kernel, ipykernel


def _shown(kernel: RunningKernel, code: str) -> tuple[str, str, str]:
    execution = kernel.run_ok(code)
    result = execution.result() if execution.of_type("execute_result") else ""
    return execution.stream(), without_written_files_note(execution.stream("stderr")), result


def test_shell_lines_print_what_coreutils_print(
    both: tuple[RunningKernel, RunningKernel],
) -> None:
    ours, theirs = both
    differences = []
    for code in COMPARED:
        mine, real = _shown(ours, code), _shown(theirs, code)
        if mine != real:
            differences.append(f"{code!r}:\n  sandbox:   {mine!r}\n  ipykernel: {real!r}")
    assert not differences, "\n".join(differences)


def test_an_unknown_command_says_so_and_the_cell_goes_on(kernel: RunningKernel) -> None:
    execution = kernel.run_ok("!convert in.png out.jpg\nprint('after', _exit_code)")
    said, after = execution.stream().rsplit("\r\n", 1)  # on the "terminal", as ipykernel
    assert after == "after 127\n"
    assert said.startswith("sh: convert: not found (the sandbox runs no programs")


def test_shell_lines_stay_inside_the_workspace(kernel: RunningKernel) -> None:
    """The commands are Python in the guest: the host's files are as far as `open` goes."""
    execution = kernel.run_ok("!cat /etc/passwd\n!ls /\nprint(_exit_code)")
    assert "root:" not in execution.stream()
    assert "cat: /etc/passwd: No such file or directory" in execution.stream()


def test_a_long_listing_shows_modes_and_sizes_as_coreutils(
    both: tuple[RunningKernel, RunningKernel],
) -> None:
    """`!ls -l` and `!ls -lh`: the mode, links, size and name columns as GNU ls prints them
    (WASI has no permission bits: a file reads as a umask of 022 makes it, not "----------";
    -h sizes as 1.5K, 38K). The owner and the minute may differ: the guest has no users."""
    ours, theirs = both
    for code in ("!ls -l data/ex1.csv", "!ls -lh data/ex1.csv data/sub", "!ls -ld data/sub"):
        mine, real = (_columns(_shown(kernel, code)[0]) for kernel in (ours, theirs))
        assert mine == real, f"{code}:\n  sandbox:   {mine}\n  ipykernel: {real}"


def _columns(listing: str) -> list[tuple[str, ...]]:
    rows = [line.split() for line in listing.splitlines() if line and ":" in line]
    return [(row[0], row[1], row[4], row[-1]) for row in rows if len(row) >= 8]

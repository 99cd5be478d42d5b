"""`!python` runs a Python program inside the sandbox, as ipykernel runs it in a new process
(issue 48): a script written with %%writefile, `-c`, `-m`, their arguments, output, exit status
and uncaught errors; and `!pip show`, which is %pip's. Each cell runs on sandbox-python and on
the baseline (ipykernel with the guest's packages) in the same test; the working folder and
the interpreter's name are masked, the rest compared. After each, the session's variables are
still there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.kernel.conftest import (
    CELL_TIMEOUT_SECONDS,
    Execution,
    RunningKernel,
    start_ipykernel,
    start_kernel,
    without_written_files_note,
)

PROGRAM = """%%writefile compat_prog.py
import sys
print('argv', sys.argv, __name__)
print('to stderr', file=sys.stderr)
if len(sys.argv) > 2:
    sys.exit(int(sys.argv[2]))
"""
FAILING = """%%writefile compat_fail.py
def go():
    return {}['missing']

go()
"""

CELLS = [
    PROGRAM,
    "!python compat_prog.py a",
    "!python3 compat_prog.py a 3",
    "_exit_code",
    "!python compat_prog.py a 0 && echo chained",
    "!python -c \"import sys; print('c', sys.argv, __name__)\" x y",
    "!python -c \"raise SystemExit('bye')\"",
    "_exit_code",
    '!python -c "1/0"',
    "_exit_code",
    "!python -m compat_prog m 4",
    "_exit_code",
    FAILING,
    "!python compat_fail.py",
    "!python -m no_such_module_here",
    "!python no_such_file.py",
    'out = !python -c "print(1); print(2)"\nout',
    "!python -c \"print('piped')\" | grep pip",
    "!python -c \"import json; print(json.dumps({'a': 1}))\"",
    "import sys\n!{sys.executable} -c \"print('from sys.executable')\"",
    "!python compat_prog.py a 2>&1 | grep stderr",
    "!python compat_prog.py a 2>/dev/null",
    "!python compat_prog.py a 2> compat_err.txt\n!cat compat_err.txt",
    "!python compat_prog.py a > /dev/null",
    "!python compat_prog.py a > compat_out.txt 2>&1\n!cat compat_out.txt",
    "program_seen = 'globals' in dir()\nprogram_seen",
]


def _masked(execution: Execution, cwd: str) -> tuple[object, ...]:
    texts = []
    for output in execution.outputs:
        if output.msg_type == "stream":
            text = without_written_files_note(output.content["text"])
        elif output.msg_type in ("execute_result", "display_data"):
            text = str(output.content["data"].get("text/plain"))
        else:
            text = f"{output.msg_type}: {output.content.get('ename')}"
        text = text.replace(cwd + "/", "<cwd>/")
        text = re.sub(r"\S*/python[\d.]*(\.wasm)?:", "python:", text)
        # Where the guest's Python (3.15) and the baseline's (3.11) differ: which lines of a
        # traceback get ~~^^ markers.
        text = re.sub(r"(?m)^ *[~^]+ *\r\n", "", text)
        text = re.sub(r"(?m)^Location: .*$", "Location: <site-packages>", text)
        texts.append(text)
    return execution.status, "".join(texts)


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RunningKernel]]:
    ours = start_kernel(tmp_path_factory.mktemp("sandbox"))
    theirs = start_ipykernel(tmp_path_factory.mktemp("baseline"))
    yield [ours, theirs]
    ours.shutdown()
    theirs.shutdown()


def test_python_programs_as_on_ipykernel(kernels: list[RunningKernel]) -> None:
    folders = []
    for running in kernels:
        running.run_ok("survivor = 'made before'")
        folders.append(running.run_ok("import os\nos.getcwd()").result().strip("'"))
    differences = []
    for code in CELLS:
        seen = []
        for running, cwd in zip(kernels, folders, strict=True):
            seen.append(_masked(running.run(code, timeout=CELL_TIMEOUT_SECONDS), cwd))
            after = running.run("survivor, __name__", timeout=CELL_TIMEOUT_SECONDS)
            assert after.result() == "('made before', '__main__')", (code, after.describe())
        if seen[0] != seen[1]:
            differences.append(f"{code!r}:\n  sandbox:   {seen[0]}\n  ipykernel: {seen[1]}")
    assert not differences, "\n".join(differences)


def test_a_program_leaves_the_session_as_it_was(kernels: list[RunningKernel]) -> None:
    """sys.argv, sys.path, the streams and __main__ are the session's again after a program
    (and after one that failed); the program's names are not the notebook's."""
    ours = kernels[0]
    before = ours.run_ok("import sys\nstate = (list(sys.argv), list(sys.path))\nstate").result()
    ours.run_ok("!python -c \"import sys; sys.argv.append('x'); sys.path.append('/x'); y = 5\"")
    ours.run_ok('!python -c "import sys; sys.stdout = None; 1/0"')
    assert ours.run_ok("(list(sys.argv), list(sys.path))").result() == before
    assert ours.run_ok("'y' in dir()").result() == "False"
    assert ours.run_ok("print('still printing')").stream() == "still printing\n"


def test_pip_show_as_on_ipykernel(kernels: list[RunningKernel]) -> None:
    """`!pip show` is %pip's: the fields pip prints. Compared without pip's colours and line
    ends (a pseudo-terminal's on ipykernel), and without the lines that name the environment
    (where the package lies, which other installed packages require it)."""
    shown = []
    for running in kernels:
        execution = running.run_ok("!pip show no-such-package-here six")
        text = execution.stream() + execution.stream("stderr")
        text = re.sub(r"\x1b\[[0-9;]*m", "", text).replace("\r\n", "\n")
        shown.append(sorted(re.sub(r"(?m)^(Location|Required-by): .*\n", "", text).splitlines()))
    assert shown[0] == shown[1]
    assert (
        "Name: six" in shown[0]
        and "WARNING: Package(s) not found: no-such-package-here" in shown[0]
    )


def test_other_programs_keep_their_clear_error(kernels: list[RunningKernel]) -> None:
    for code in ("!gcc --version", "!pythonx -c 1", "!node -e 1"):
        execution = kernels[0].run_ok(code)
        assert "the sandbox runs no programs" in execution.stream(), code

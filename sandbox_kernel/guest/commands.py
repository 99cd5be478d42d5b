"""`!cmd` in the sandbox: the file and text commands notebooks use, in Python, over the guest's
own files (there are no processes to start).

Runs INSIDE the sandbox (module sandbox_kernel_commands, loaded with the shell). `run(line)`
runs a line as a POSIX shell would run these commands: words split and quoted as by `sh`,
wildcards expanded, pipelines (`|`), `;` and `&&` between commands, output redirected with
`>` and `>>`. It answers (stdout, stderr, exit status): the shell prints them, and `x = !cmd`
keeps stdout's lines. The commands are coreutils.py's; one it does not have says so on stderr
with status 127, as `sh` does, and the cell goes on.

`python` (and `python3`, `python3.N`, a path ending in one, such as `{sys.executable}`) runs a
Python program inside the sandbox, as a new interpreter would: a script (`python x.py a b`),
`-m module` or `-c code`, in a fresh `__main__` module with its own `sys.argv` and `sys.path[0]`,
its output and exit status as `sh` shows a program's (SystemExit's code; an uncaught exception's
traceback and status 1). It is the session's interpreter all the same: modules it imports stay
imported, and what it changes in them (or in os.environ, the working folder) stays changed.

A command of a package installed with %pip (a console script: `!pylint x.py` after
`%pip install pylint`) runs the same way, as its script would: its entry point called, what it
returns the exit status. The image's own (`ipython`, `isympy`: interactive) are not run.

Must import only the standard library and sandbox_kernel_coreutils; never imports
sandbox_kernel.
"""

from __future__ import annotations

import contextlib
import glob
import io
import os
import re
import runpy
import shlex
import sys
import traceback
import types
from typing import Any

from sandbox_kernel_coreutils import COMMANDS, ON_TERMINAL, NoMatch, Usage

__all__ = ["run"]

Result = tuple[str, str, int]  # stdout, stderr, exit status


def run(line: str, tty: bool = False) -> Result:
    """Run `line`; its stdout, stderr and the last command's exit status. With `tty`, output
    that reaches the terminal is laid out as on one (`ls` in columns), as `!cmd` in ipykernel
    runs on a pseudo-terminal."""
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError as exc:
        return "", f"sh: {exc}\n", 2
    out, err, status = [], [], 0
    for chain, joiner in _sequences(words):
        if joiner == "&&" and status != 0:
            continue
        o, e, status = _pipeline(chain, tty)
        out.append(o)
        err.append(e)
    return "".join(out), "".join(err), status


def _sequences(words: list[str]) -> list[tuple[list[str], str]]:
    """The line cut at `;` and `&&`: (words, what joined them to the one before)."""
    found, current, joiner = [], [], ";"
    for word in words:
        if word in (";", "&&"):
            found.append((current, joiner))
            current, joiner = [], word
        else:
            current.append(word)
    found.append((current, joiner))
    return [(chain, j) for chain, j in found if chain]


def _pipeline(words: list[str], tty: bool) -> Result:
    stages: list[list[str]] = [[]]
    for word in words:
        if word == "|":
            stages.append([])
        else:
            stages[-1].append(word)
    text: str | None = None
    errors: list[str] = []
    status = 0
    for index, stage in enumerate(stages):
        stage, err_target, err_append = _stderr_redirection(stage)
        stage, target, append = _redirection(stage)
        if not stage:
            return "", "sh: syntax error near '|'\n", 2
        on_tty = tty and target is None and index == len(stages) - 1
        merge = err_target == "&1"
        # A program's stdout and stderr are one stream on the terminal (unless stderr goes
        # elsewhere) and with 2>&1, in the order it wrote them.
        combine = merge or (on_tty and err_target is None)
        text, err, status = _command(stage, text, on_tty, combine)
        if merge:  # 2>&1: into stdout (a program's in the order written; a command's after)
            text, err = text + err, ""
        elif err_target is not None:
            _write(err_target, err, err_append)
            err = ""
        errors.append(err)
        if target is not None:
            _write(target, text, append)
            text = ""
    return text or "", "".join(errors), status


def _write(target: str, text: str, append: bool) -> None:
    if target != "/dev/null":  # the sandbox may have no /dev/null: nothing to write
        with open(target, "a" if append else "w", encoding="utf-8") as file:
            file.write(text)


def _stderr_redirection(words: list[str]) -> tuple[list[str], str | None, bool]:
    """`2>&1`, `2>FILE`, `2>>FILE` (split by the lexer as `2`, `>&` or `>`, the target):
    the words without it, the target ("&1" for stdout) and whether it appends."""
    for at in range(len(words) - 2):
        if words[at] != "2":
            continue
        mark, target = words[at + 1], words[at + 2]
        if (mark, target) == (">&", "1") or mark in (">", ">>"):
            rest = words[:at] + words[at + 3 :]
            return rest, "&1" if mark == ">&" else target, mark == ">>"
    return words, None, False


def _redirection(words: list[str]) -> tuple[list[str], str | None, bool]:
    for mark in (">>", ">"):
        if mark in words[:-1]:
            at = words.index(mark)
            return words[:at] + words[at + 2 :], words[at + 1], mark == ">>"
    return words, None, False


def _command(words: list[str], stdin: str | None, tty: bool, combine: bool = False) -> Result:
    name, args = words[0], _expand(words[1:])
    if _PYTHON.search(name):
        return python(args, stdin, combine)
    command = COMMANDS.get(name)
    entry = None if command is not None else _console_script(name)
    if entry is not None:
        return _run("-c", [name, *args], _script_source(entry), combine)
    if command is None:
        have = " ".join(sorted(COMMANDS))
        return (
            "",
            (
                f"sh: {name}: not found (the sandbox runs no programs; its own commands: {have}; "
                "or use Python)\n"
            ),
            127,
        )
    try:
        if name in ON_TERMINAL:
            return command(args, stdin, tty), "", 0
        return command(args, stdin), "", 0
    except NoMatch:
        return "", "", 1
    except Usage as exc:
        return "", f"{name}: {exc}\n", exc.status
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        return "", f"{name}{where}: {exc.strerror or exc}\n", 1


def _expand(args: list[str]) -> list[str]:
    """Wildcards expanded as `sh` does (a pattern that matches nothing stays as it is)."""
    expanded = []
    for arg in args:
        matches = sorted(glob.glob(arg)) if glob.has_magic(arg) else []
        expanded.extend(matches or [arg])
    return expanded


# -- python: a program run inside the sandbox's own interpreter ---------------------------------

_PYTHON = re.compile(r"(?:^|/)python(?:3(?:\.\d+)?)?(?:\.wasm)?$")  # sys.executable too
_FLAGS = frozenset("bBdEhiIOPqsSuvVWxX")  # options a program's run does not change here
_HELP = "usage: python [option] ... [-c cmd | -m mod | file | -] [arg] ...\n"


# Folders whose packages' commands `!NAME` runs: the session's %pip folder (the driver's).
PROGRAM_FOLDERS: tuple[str, ...] = ()


def _console_script(name: str) -> Any:
    """The entry point of the command `name` of a package in PROGRAM_FOLDERS, or None."""
    if not PROGRAM_FOLDERS or "/" in name:
        return None
    from importlib.metadata import distributions

    for dist in distributions(path=list(PROGRAM_FOLDERS)):
        for entry in dist.entry_points:
            if entry.group == "console_scripts" and entry.name == name and entry.attr:
                return entry
    return None


def _script_source(entry: Any) -> str:
    """What pip's script for a console entry point runs: the function's return value is the
    exit status."""
    head = entry.attr.split(".")[0]
    return f"import sys\nfrom {entry.module} import {head}\nsys.exit({entry.attr}())\n"


class _Output(io.TextIOBase):
    """A program's stdout or stderr: into `into` (one list for both on a terminal, as a
    pseudo-terminal merges them in the order they were written)."""

    def __init__(self, into: list[str], name: str) -> None:
        self.into, self.name = into, name

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.into.append(text)
        return len(text)

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def isatty(self) -> bool:
        return False


def python(args: list[str], stdin: str | None, tty: bool = False) -> Result:
    """`python [options] (-c code | -m module | script | -) [args]` inside the sandbox."""
    while args and args[0].startswith("-") and args[0] not in ("-", "-c", "-m"):
        option = args.pop(0)
        if option in ("-V", "--version"):
            version = sys.version.split()[0]
            return f"Python {version}\n", "", 0
        if option in ("-h", "--help"):
            return _HELP, "", 0
        if option.startswith("-W") or option.startswith("-X"):
            if option in ("-W", "-X") and args:
                args.pop(0)  # its value
            continue
        if not set(option[1:]) <= _FLAGS:
            return "", f"Unknown option: {option}\n{_HELP}", 2
    if not args or args[0] == "-":
        if stdin is None:
            return (
                "",
                (
                    "python: the sandbox has no terminal for an interactive interpreter: run a "
                    "script, python -c CODE or python -m MODULE\n"
                ),
                2,
            )
        return _run("-", ["-", *args[1:]], stdin, tty)
    if args[0] in ("-c", "-m"):
        if len(args) < 2:
            return "", f"Argument expected for the {args[0]} option\n{_HELP}", 2
        return _run(args[0], [args[0] if args[0] == "-c" else args[1], *args[2:]], args[1], tty)
    return _run("script", args, args[0], tty)


def _run(kind: str, argv: list[str], what: str, tty: bool) -> Result:
    """Run the program; its stdout, stderr and exit status. Every part of the interpreter it
    changes to run (sys.argv, sys.path[0], the streams, __main__) is put back after."""
    out: list[str] = []
    err: list[str] = out if tty else []
    saved = (sys.argv, list(sys.path), sys.stdout, sys.stderr, sys.modules.get("__main__"))
    sys.argv = list(argv)
    stderr = _Output(err, "<stderr>")  # the runner's own: the program may replace sys.stderr
    sys.stdout, sys.stderr = _Output(out, "<stdout>"), stderr
    status = 0
    try:
        if kind == "script":
            path = os.path.abspath(what)
            if not os.path.exists(path):
                raise _Refused(
                    f"python: can't open file {path!r}: [Errno 2] No such file or directory"
                )
            sys.path.insert(0, os.path.dirname(path))
            if os.path.isfile(path) and not path.endswith((".zip", ".pyz")):
                with open(path, encoding="utf-8") as file:  # argv[0] as typed, as Python
                    _run_code(file.read(), path)
            else:  # a folder or an archive with __main__.py
                runpy.run_path(path, run_name="__main__")
        elif kind == "-m":
            sys.path.insert(0, os.getcwd())
            if not _findable(what):
                raise _Refused(f"{sys.executable or 'python'}: No module named {what}", 1)
            runpy.run_module(what, run_name="__main__", alter_sys=True)
        else:  # -c CODE, or the program read from stdin
            sys.path.insert(0, "")
            _run_code(what, "<string>" if kind == "-c" else "<stdin>")
    except SystemExit as exc:
        status = _exit_status(exc, stderr)
    except KeyboardInterrupt:
        raise
    except _Refused as exc:
        stderr.write(f"{exc}\n")
        status = exc.status
    except BaseException as exc:  # the program's uncaught error: its traceback, status 1
        _print_traceback(exc, stderr)
        status = 1
    finally:
        sys.argv, sys.path[:], sys.stdout, sys.stderr, main = saved
        if main is not None:
            sys.modules["__main__"] = main
    return "".join(out), "".join(err) if not tty else "", status


class _Refused(Exception):
    """What python itself says before running anything (a missing script or module)."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def _findable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _run_code(source: str, name: str) -> None:
    """Run `source` as the program's __main__ (its file `name`, when it is one)."""
    module = types.ModuleType("__main__")
    module.__dict__["__builtins__"] = __builtins__
    if not name.startswith("<"):
        module.__file__ = name
    sys.modules["__main__"] = module
    exec(compile(source, name, "exec"), module.__dict__)


def _exit_status(exc: SystemExit, stderr: Any) -> int:
    """The status Python exits with for SystemExit(code): None 0, an int itself, anything
    else printed to stderr and 1."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(BaseException):  # a code whose str() fails: nothing printed
        stderr.write(f"{code}\n")
    return 1


def _print_traceback(exc: BaseException, stderr: Any) -> None:
    """As Python prints an uncaught exception, without the runner's own frames."""
    head = exc.__traceback__
    while head is not None and head.tb_frame.f_code.co_filename in _RUNNER_FILES:
        head = head.tb_next
    exc.__traceback__ = head
    try:
        traceback.print_exception(type(exc), exc, head, file=stderr)
    except BaseException:  # an exception that cannot be printed (its __str__ exits)
        stderr.write(f"{type(exc).__name__}: <exception str() failed>\n")


# The runner's own frames, left out of a program's traceback.
_RUNNER_FILES = frozenset({_run.__code__.co_filename, runpy.run_path.__code__.co_filename})

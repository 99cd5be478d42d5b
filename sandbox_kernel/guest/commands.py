"""`!cmd` in the sandbox: the file and text commands notebooks use, in Python, over the guest's
own files (there are no processes to start).

Runs INSIDE the sandbox (module sandbox_kernel_commands, loaded with the shell). `run(line)`
runs a line as a POSIX shell would run these commands: words split and quoted as by `sh`,
wildcards expanded, pipelines (`|`), `;` and `&&` between commands, output redirected with
`>` and `>>`. It answers (stdout, stderr, exit status): the shell prints them, and `x = !cmd`
keeps stdout's lines. The commands are coreutils.py's; one it does not have says so on stderr
with status 127, as `sh` does, and the cell goes on.

Must import only the standard library and sandbox_kernel_coreutils; never imports
sandbox_kernel.
"""

from __future__ import annotations

import glob
import shlex

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
        stage, target, append = _redirection(stage)
        if not stage:
            return "", "sh: syntax error near '|'\n", 2
        on_tty = tty and target is None and index == len(stages) - 1
        text, err, status = _command(stage, text, on_tty)
        errors.append(err)
        if target is not None:
            with open(target, "a" if append else "w", encoding="utf-8") as file:
                file.write(text)
            text = ""
    return text or "", "".join(errors), status


def _redirection(words: list[str]) -> tuple[list[str], str | None, bool]:
    for mark in (">>", ">"):
        if mark in words[:-1]:
            at = words.index(mark)
            return words[:at] + words[at + 2 :], words[at + 1], mark == ">>"
    return words, None, False


def _command(words: list[str], stdin: str | None, tty: bool) -> Result:
    name, args = words[0], _expand(words[1:])
    command = COMMANDS.get(name)
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

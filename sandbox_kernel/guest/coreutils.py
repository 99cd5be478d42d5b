"""The sandbox's own commands for `!cmd` (commands.py runs the line): the file and text
commands notebooks use, written in Python over the guest's files, printing what GNU coreutils
print, with their usual options.

    cat head tail wc ls pwd echo mkdir rm cp mv touch grep sort uniq cut

Each takes its arguments and its standard input (text, or None) and answers its standard
output; a complaint is a `Usage` (on stderr, status 1 or 2), grep finding nothing `NoMatch`.

Runs INSIDE the sandbox (module sandbox_kernel_coreutils, loaded before commands.py). Must
import only the standard library; never imports sandbox_kernel.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import stat
import time
from collections.abc import Callable

__all__ = ["COMMANDS", "ON_TERMINAL", "NoMatch", "Usage"]

_TERMINAL_COLUMNS = 80  # pexpect's pseudo-terminal, where ipykernel runs `!cmd`


class Usage(Exception):
    """A command's complaint (bad option, missing file): stderr, status 1 (2 for usage)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class NoMatch(Exception):
    """grep found nothing: status 1, nothing said."""


def _options(args: list[str], flags: str, valued: str = "") -> tuple[dict[str, str], list[str]]:
    """Short options (`-n 5`, `-n5`, `-rn`) and the operands; `--` ends the options."""
    found: dict[str, str] = {}
    operands: list[str] = []
    words = list(args)
    while words:
        word = words.pop(0)
        if word == "--":
            operands.extend(words)
            break
        if not word.startswith("-") or word == "-" or len(word) == 1:
            operands.append(word)
            continue
        letters = word[1:]
        while letters:
            letter, letters = letters[0], letters[1:]
            if letter in valued:
                value = letters or (words.pop(0) if words else None)
                if value is None:
                    raise Usage(f"option requires an argument -- '{letter}'", 2)
                found[letter] = value
                break
            if letter not in flags:
                raise Usage(f"invalid option -- '{letter}'", 2)
            found[letter] = ""
    return found, operands


def _read(name: str) -> str:
    if os.path.isdir(name):
        raise IsADirectoryError(21, "Is a directory", name)
    with open(name, encoding="utf-8", errors="replace", newline="") as file:
        return file.read()


def _inputs(operands: list[str], stdin: str | None) -> list[tuple[str, str]]:
    """(name, text) of each file operand, or of stdin (`-`, or no operand)."""
    if not operands:
        return [("-", stdin or "")]
    return [(name, stdin or "") if name == "-" else (name, _read(name)) for name in operands]


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _count(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise Usage(f"invalid number of {what}: '{value}'") from None


def _numeric_first(args: list[str]) -> list[str]:
    """`head -5` is `head -n 5`."""
    return [f"-n{a[1:]}" if re.fullmatch(r"-\d+", a) else a for a in args]


def _cat(args: list[str], stdin: str | None) -> str:
    options, operands = _options(args, "n")
    text = "".join(t for _, t in _inputs(operands, stdin))
    if "n" in options:
        text = "".join(f"{i:6d}\t{line}" for i, line in enumerate(_lines(text), 1))
    return text


def _head(args: list[str], stdin: str | None) -> str:
    return _ends(args, stdin, first=True)


def _tail(args: list[str], stdin: str | None) -> str:
    return _ends(args, stdin, first=False)


def _ends(args: list[str], stdin: str | None, first: bool) -> str:
    options, operands = _options(_numeric_first(args), "qv", "n")
    n = _count(options.get("n", "10").lstrip("+"), "lines")
    inputs = _inputs(operands, stdin)
    out = []
    for index, (name, text) in enumerate(inputs):
        if len(inputs) > 1:
            out.append(("\n" if index else "") + f"==> {name} <==\n")
        lines = _lines(text)
        out.extend(lines[:n] if first else lines[len(lines) - n :] if n else [])
    return "".join(out)


def _wc(args: list[str], stdin: str | None) -> str:
    options, operands = _options(args, "lwcm")
    wanted = [k for k in "lwc" if k in options or (k == "c" and "m" in options)] or ["l", "w", "c"]
    inputs = _inputs(operands, stdin)
    rows = []
    for name, text in inputs:
        counts = {"l": text.count("\n"), "w": len(text.split()), "c": len(text.encode())}
        rows.append(([counts[k] for k in wanted], "" if name == "-" else name))
    if len(rows) > 1:
        rows.append(([sum(r[0][i] for r in rows) for i in range(len(wanted))], "total"))
    # GNU wc's width: 1 for one count of one input; 7 when an input is not a file (its size
    # is not known ahead); else the digits of all the files' bytes together.
    if len(wanted) == 1 and len(inputs) == 1:
        width = 1
    elif any(name == "-" for name, _ in inputs):
        width = 7
    else:
        width = len(str(sum(len(text.encode()) for _, text in inputs)))
    return "".join(
        " ".join(f"{v:>{width}}" for v in values) + (f" {name}" if name else "") + "\n"
        for values, name in rows
    )


def _ls(args: list[str], stdin: str | None, tty: bool = False) -> str:
    options, operands = _options(args, "al1hRtrd")
    files, folders = [], []
    for name in operands or ["."]:
        if not os.path.lexists(name):
            raise Usage(f"cannot access '{name}': No such file or directory", 2)
        listed = os.path.isdir(name) and not os.path.islink(name) and "d" not in options
        (folders if listed else files).append(name)
    columns = tty and "1" not in options and "l" not in options
    out = [_listing(sorted(files), ".", options, whole=True, columns=columns)] if files else []
    for name in sorted(folders):
        entries = sorted(os.listdir(name))
        if "a" not in options:
            entries = [e for e in entries if not e.startswith(".")]
        else:
            entries = sorted([".", "..", *entries])
        heading = f"{name}:\n" if len(operands) > 1 or files else ""
        out.append(heading + _listing(entries, name, options, columns=columns))
    return "\n".join(out)


def _listing(
    names: list[str],
    folder: str,
    options: dict[str, str],
    whole: bool = False,
    columns: bool = False,
) -> str:
    if "t" in options:
        names.sort(key=lambda n: os.lstat(os.path.join(folder, n)).st_mtime, reverse=True)
    if "r" in options:
        names.reverse()
    if columns:
        return _in_columns(names)
    if "l" not in options:
        return "".join(f"{n}\n" for n in names)
    rows = []
    for name in names:
        info = os.lstat(name if whole else os.path.join(folder, name))
        stamp = time.strftime("%b %e %H:%M", time.localtime(info.st_mtime))
        size = _human(info.st_size) if "h" in options else str(info.st_size)
        rows.append((_mode(info.st_mode), info.st_nlink, size, stamp, name))
    size_width = max((len(r[2]) for r in rows), default=1)
    total = sum((os.lstat(os.path.join(folder, n)).st_blocks or 0) // 2 for n in names)
    body = "".join(
        f"{mode} {links} user user {size:>{size_width}} {stamp} {name}\n"
        for mode, links, size, stamp, name in rows
    )
    return body if whole else f"total {total}\n{body}"


def _mode(mode: int) -> str:
    """ls's mode column. WASI reports no permission bits: a file is shown as a umask of 022
    makes it (-rw-r--r--, drwxr-xr-x), not as "----------"."""
    if not mode & 0o777:
        mode |= 0o755 if stat.S_ISDIR(mode) else 0o644
    return stat.filemode(mode)


def _human(size: int) -> str:
    """ls -h's size: powers of 1024, rounded up, one decimal below 10 (1.5K, 38K, 2.0M)."""
    if size < 1024:
        return str(size)
    value = float(size)
    for unit in "KMGTPE":
        value /= 1024
        if value < 1024 or unit == "E":
            tenths = math.ceil(value * 10) / 10
            return f"{tenths:.1f}{unit}" if tenths < 10 else f"{math.ceil(value):d}{unit}"
    return str(size)


def _in_columns(names: list[str], line_length: int = _TERMINAL_COLUMNS) -> str:
    """GNU ls's columns on a terminal: filled top to bottom, as many as fit in the line (the
    last without its 2-space gap), padded as its indent() pads (tabs of 8)."""
    if not names:
        return ""
    count = len(names)
    rows, widths = count, [max(map(len, names))]
    for columns in range(min(count, line_length // 3), 0, -1):
        rows = -(-count // columns)
        groups = [names[c * rows : (c + 1) * rows] for c in range(-(-count // rows))]
        widths = [max(map(len, group)) + 2 for group in groups]
        if sum(widths) - 2 < line_length:
            break
    lines = []
    for row in range(rows):
        line, position = "", 0
        cells = [names[i] for i in range(row, count, rows)]
        for index, name in enumerate(cells):
            line += name
            if index == len(cells) - 1:
                break
            end, target = position + len(name), position + widths[index]
            while end < target:  # GNU ls's indent(): a tab where it stops short of `target`
                if target // 8 > (end + 1) // 8:
                    line, end = line + "\t", end + 8 - end % 8
                else:
                    line, end = line + " ", end + 1
            position = target
        lines.append(line + "\n")
    return "".join(lines)


def _pwd(args: list[str], stdin: str | None) -> str:
    return os.getcwd() + "\n"


def _echo(args: list[str], stdin: str | None) -> str:
    newline = "\n"
    if args[:1] == ["-n"]:
        args, newline = args[1:], ""
    return " ".join(args) + newline


def _mkdir(args: list[str], stdin: str | None) -> str:
    options, operands = _options(args, "pv")
    if not operands:
        raise Usage("missing operand", 1)
    for name in operands:
        if "p" in options:
            os.makedirs(name, exist_ok=True)
        else:
            os.mkdir(name)
    return ""


def _rm(args: list[str], stdin: str | None) -> str:
    options, operands = _options(args, "rRfv")
    for name in operands:
        if not os.path.lexists(name):
            if "f" not in options:
                raise Usage(f"cannot remove '{name}': No such file or directory")
            continue
        if os.path.isdir(name) and not os.path.islink(name):
            if not ("r" in options or "R" in options):
                raise Usage(f"cannot remove '{name}': Is a directory")
            shutil.rmtree(name)
        else:
            os.remove(name)
    return ""


def _cp(args: list[str], stdin: str | None) -> str:
    options, operands = _options(args, "rRfv")
    *sources, target = operands if len(operands) >= 2 else (None, None)
    if target is None:
        raise Usage("missing file operand")
    for source in sources:
        destination = target
        if os.path.isdir(target):
            destination = os.path.join(target, os.path.basename(source))
        if os.path.isdir(source):
            if not ("r" in options or "R" in options):
                raise Usage(f"-r not specified; omitting directory '{source}'")
            shutil.copytree(source, destination, symlinks=True)
        else:
            shutil.copy2(source, destination, follow_symlinks=False)
    return ""


def _mv(args: list[str], stdin: str | None) -> str:
    _, operands = _options(args, "fv")
    if len(operands) < 2:
        raise Usage("missing file operand")
    *sources, target = operands
    for source in sources:
        shutil.move(source, target)
    return ""


def _touch(args: list[str], stdin: str | None) -> str:
    _, operands = _options(args, "c")
    for name in operands:
        with open(name, "a"):
            os.utime(name)
    return ""


def _grep(args: list[str], stdin: str | None) -> str:
    options, operands = _options(args, "ivncilwxEFH", "e")
    pattern = options.get("e") or (operands.pop(0) if operands else None)
    if pattern is None:
        raise Usage("no pattern (usage: grep [OPTION]... PATTERN [FILE]...)", 2)
    if "F" in options:
        pattern = re.escape(pattern)
    if "w" in options:
        pattern = rf"\b(?:{pattern})\b"
    if "x" in options:
        pattern = rf"(?:{pattern})"
    matcher = re.compile(pattern, re.IGNORECASE if "i" in options else 0)
    inputs = _inputs(operands, stdin)
    out = []
    for name, text in inputs:
        prefix = f"{name}:" if len(inputs) > 1 or "H" in options else ""
        found = 0
        for number, line in enumerate(_lines(text), 1):
            body = line.rstrip("\n")
            hit = matcher.fullmatch(body) if "x" in options else matcher.search(body)
            if bool(hit) == ("v" in options):
                continue
            found += 1
            if "c" not in options and "l" not in options:
                number_part = f"{number}:" if "n" in options else ""
                out.append(f"{prefix}{number_part}{body}\n")
        if "c" in options:
            out.append(f"{prefix}{found}\n")
        elif "l" in options and found:
            out.append(f"{name}\n")
    if not out and "c" not in options:
        raise NoMatch
    return "".join(out)


def _sort(args: list[str], stdin: str | None) -> str:
    options, operands = _options(args, "rnuf", "tk")
    lines = [line.rstrip("\n") for _, t in _inputs(operands, stdin) for line in _lines(t)]

    def key(line: str) -> object:
        field = line
        if "k" in options:
            parts = line.split(options.get("t")) if "t" in options else line.split()
            index = _count(options["k"].split(",")[0].split(".")[0], "fields") - 1
            field = parts[index] if 0 <= index < len(parts) else ""
        if "n" in options:
            number = re.match(r"\s*-?\d+(?:\.\d+)?", field)
            return (float(number.group()) if number else 0.0, line)
        return field.lower() if "f" in options else field

    ordered = sorted(lines, key=key, reverse="r" in options)
    if "u" in options:
        ordered = list(dict.fromkeys(ordered))
    return "".join(f"{line}\n" for line in ordered)


def _uniq(args: list[str], stdin: str | None) -> str:
    options, operands = _options(args, "cdu")
    lines = [line.rstrip("\n") for _, t in _inputs(operands[:1], stdin) for line in _lines(t)]
    runs: list[list[object]] = []
    for line in lines:
        if runs and runs[-1][0] == line:
            runs[-1][1] = int(str(runs[-1][1])) + 1
        else:
            runs.append([line, 1])
    out = []
    for line, count in runs:
        if ("d" in options and count == 1) or ("u" in options and count != 1):
            continue
        out.append(f"{count:>7} {line}\n" if "c" in options else f"{line}\n")
    return "".join(out)


def _cut(args: list[str], stdin: str | None) -> str:
    options, operands = _options(args, "s", "dfc")
    if "f" not in options and "c" not in options:
        raise Usage("you must specify a list of bytes, characters, or fields", 1)
    spans = _spans(options.get("f") or options["c"])
    delimiter = options.get("d", "\t")
    out = []
    for _, text in _inputs(operands, stdin):
        for line in _lines(text):
            body = line.rstrip("\n")
            if "c" in options:
                out.append("".join(body[a:b] for a, b in _picked(spans, len(body))) + "\n")
                continue
            if delimiter not in body:
                if "s" not in options:
                    out.append(body + "\n")
                continue
            fields = body.split(delimiter)
            picked = [f for a, b in _picked(spans, len(fields)) for f in fields[a:b]]
            out.append(delimiter.join(picked) + "\n")
    return "".join(out)


def _spans(text: str) -> list[tuple[int, int | None]]:
    spans: list[tuple[int, int | None]] = []
    for part in text.split(","):
        first, dash, last = part.partition("-")
        try:
            start = int(first) if first else 1
            end = (int(last) if last else None) if dash else start
        except ValueError:
            raise Usage(f"invalid field value '{part}'") from None
        spans.append((start - 1, end))
    return spans


def _picked(spans: list[tuple[int, int | None]], length: int) -> list[tuple[int, int]]:
    chosen = sorted({i for a, b in spans for i in range(a, min(b or length, length))})
    return [(i, i + 1) for i in chosen]


ON_TERMINAL = frozenset({"ls"})  # commands that lay out their output for a terminal (tty=)
COMMANDS: dict[str, Callable[..., str]] = {
    "cat": _cat,
    "head": _head,
    "tail": _tail,
    "wc": _wc,
    "ls": _ls,
    "pwd": _pwd,
    "echo": _echo,
    "mkdir": _mkdir,
    "rm": _rm,
    "cp": _cp,
    "mv": _mv,
    "touch": _touch,
    "grep": _grep,
    "sort": _sort,
    "uniq": _uniq,
    "cut": _cut,
}

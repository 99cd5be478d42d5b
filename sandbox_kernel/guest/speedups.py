"""IPython made cheaper in WebAssembly: what its tracebacks and introspection work out again
and again (pygments' lexer and styles, coloured source lines, the module a file belongs to,
library sources, line counts), worked out once and kept, each bounded.

Runs INSIDE the sandbox (module sandbox_kernel_speedups, loaded with the shell); `apply(shell)`
is called once the shell exists. Each change keeps IPython's output as it is: the tests compare
every traceback in each of IPython's themes with IPython's own colouring.

Must import only the standard library at module level: IPython is there when `apply` runs.
"""

from __future__ import annotations

import errno
import inspect
import os
import re
import sys
from typing import Any

__all__ = ["apply"]

_MISSED_FILES = 256  # files without a module remembered at most (_module_lookups_once)
_HIGHLIGHTED_LINES = 1024  # source lines kept coloured (_highlighting_once), at most
_HIGHLIGHTED_CHARS = 400  # ... each at most this long; a longer one is coloured each time
_COLOURED_PIECES = 4096  # short token runs kept coloured, at most
_COLOURED_TOKENS = 4  # ... each of at most this many tokens


def apply(shell: Any) -> None:
    """Every speed-up, on a shell that has just been made."""
    _lexer_once()
    _styles_once()
    _format_once(shell.InteractiveTB)
    _highlighting_once()
    _module_lookups_once()
    _library_sources_once()
    _line_counts_by_stat()
    _plain_cells_as_they_are(shell.input_transformer_manager)


def _lexer_once() -> None:
    """Tracebacks as IPython formats them, without rebuilding pygments' Python lexer for each
    one. stack_data makes a new lexer class per traceback, and pygments compiles a new class's
    regular expressions again: a fifth of a traceback's 25-37 ms in the guest. Here the class
    is made once and each traceback's ranges are set on its instance; the output is the same."""
    import pygments
    import stack_data.core
    from pygments.lexers import get_lexer_by_name

    class RangesLexer(type(get_lexer_by_name("python3"))):  # type: ignore[misc]
        ranges: Any = ()

        def get_tokens(self, text: str, unfiltered: bool = False) -> Any:
            length = 0
            for ttype, value in super().get_tokens(text, unfiltered):
                if any(start <= length < end for start, end in self.ranges):
                    ttype = ttype.ExecutingNode
                length += len(value)
                yield ttype, value

    def pygmented_with_ranges(formatter: Any, code: str, ranges: Any) -> list[str]:
        lexer = RangesLexer(stripnl=False)
        lexer.ranges = ranges
        try:
            highlighted = pygments.highlight(code, lexer, formatter)
        except Exception:  # as stack_data: code without colours rather than no traceback
            highlighted = code
        return highlighted.splitlines()

    stack_data.core._pygmented_with_ranges = pygmented_with_ranges


def _styles_once() -> None:
    """Tracebacks without making their colours again each time: IPython's VerboseTB derives a
    pygments style class from its theme and builds a terminal formatter for it for every
    traceback (a third of an interrupt's traceback here). Both depend only on the theme and
    the highlight, so each is made once per pair; the output is the same."""
    import functools

    import IPython.core.ultratb as ultratb
    import stack_data

    stack_data.style_with_executing_node = functools.cache(stack_data.style_with_executing_node)
    formatter = ultratb.Terminal256Formatter
    ultratb.Terminal256Formatter = functools.cache(lambda style: formatter(style=style))


def _format_once(formatter: Any) -> None:
    """An error's traceback formatted once, where IPython 9 formats it twice: to show it, and
    again, with the same arguments, to keep it for %notebook (history_manager.exceptions).
    The second call gets the first's lines, once; any other call is formatted afresh."""
    structured_traceback = formatter.structured_traceback
    last: list[Any] = []  # etype, evalue, etb, settings, lines: the call not asked for again

    def formatted_once(
        etype: Any, evalue: Any, etb: Any = None, tb_offset: Any = None, context: int = 5
    ) -> list[str]:
        offset = formatter.tb_offset if tb_offset is None else tb_offset
        settings = (offset, context, formatter.mode, formatter._theme_name)
        asked_again = last and last[0] is etype and last[1] is evalue and last[2] is etb
        if etype is not None and asked_again and last[3] == settings:
            lines: list[str] = last[4]
            last.clear()
            formatter.tb = etb  # as the call it stands for does
            return list(lines)
        last.clear()
        lines = structured_traceback(etype, evalue, etb, tb_offset, context)
        if etype is not None:
            last.extend((etype, evalue, etb, settings, list(lines)))
        return lines

    formatter.structured_traceback = formatted_once


def _highlighting_once() -> None:
    """Tracebacks without colouring the same source line, or the same token, again. IPython
    colours each line it shows of a frame stack_data does not parse (a cell's: its file does
    not exist) token by token (`Parser.format2`), and each token, and every other piece of a
    traceback, through pygments (`Theme.format`, 70 calls for an interrupt's one frame). Both
    depend only on the theme and their text, so a line, or a run of a few tokens, is coloured
    once per theme and kept (bounded, least recently used out first); the output is the
    same. A theme replaced in `theme_table` is a new theme."""
    import functools

    from IPython.utils import PyColorize

    format2 = PyColorize.Parser.format2
    theme_format = PyColorize.Theme.format

    @functools.lru_cache(maxsize=_HIGHLIGHTED_LINES)
    def coloured_line(theme: Any, name: str, raw: str) -> tuple[str | None, bool]:
        return format2(PyColorize.Parser(theme_name=name), raw, "str")

    @functools.lru_cache(maxsize=_COLOURED_PIECES)
    def coloured_tokens(theme: Any, tokens: tuple[Any, ...]) -> str:
        return theme_format(theme, list(tokens))

    @functools.wraps(format2)
    def format2_once(self: Any, raw: str, out: Any = None) -> tuple[str | None, bool]:
        if type(out) is str and out == "str" and type(raw) is str:
            theme = PyColorize.theme_table.get(self.theme_name)
            if theme is not None and len(raw) <= _HIGHLIGHTED_CHARS:
                return coloured_line(theme, self.theme_name, raw)
        return format2(self, raw, out)

    @functools.wraps(theme_format)
    def format_once(self: Any, stream: Any) -> str:
        if type(stream) is list and len(stream) <= _COLOURED_TOKENS:
            try:
                return coloured_tokens(self, tuple(stream))
            except TypeError:  # a token that cannot be a key: coloured as it comes
                pass
        return theme_format(self, stream)

    PyColorize.Parser.format2 = format2_once
    PyColorize.Theme.format = format_once


def _module_lookups_once() -> None:
    """Tracebacks without looking through every loaded module again for a file no module has.

    For a frame whose file is no module's (Cython's `pandas/_libs/index.pyx`, `<string>`),
    `inspect.getmodule` walks all of sys.modules (1,100 in a pandas session, 2-3 ms each
    here), and a pandas KeyError's traceback asks 16 times. Such a file stays unknown until
    sys.modules or the working folder change, or inspect learns the file otherwise, so the
    answer is kept until then. Objects found otherwise than by their file are asked as
    before."""
    import functools

    getmodule = inspect.getmodule
    missed: dict[tuple[str, str | None], str | None] = {}  # (file, _filename): absolute file
    missed_when: list[Any] = []  # sys.modules and the working folder when `missed` was made

    def unchanged() -> bool:
        if not missed_when or missed_when[1] != os.getcwd():
            return False
        try:
            return bool(missed_when[0] == sys.modules)
        except Exception:  # an entry replaced by an object whose == fails: a change
            return False

    @functools.wraps(getmodule)
    def module_of(object: Any, _filename: str | None = None) -> Any:
        if inspect.ismodule(object) or hasattr(object, "__module__") or hasattr(object, "__name__"):
            return getmodule(object, _filename)
        try:
            key = (inspect.getfile(object), _filename)
        except TypeError:
            return getmodule(object, _filename)
        if key in missed and missed[key] not in inspect.modulesbyfile and unchanged():
            return None
        module = getmodule(object, _filename)
        if module is None:
            if not unchanged() or len(missed) >= _MISSED_FILES:
                missed.clear()
                missed_when[:] = (dict(sys.modules), os.getcwd())
            try:
                missed[key] = inspect.getabsfile(object, _filename)
            except (TypeError, FileNotFoundError):
                missed[key] = None
        return module

    inspect.getmodule = module_of


def _library_sources_once() -> None:
    """Tracebacks without asking the host whether a library's file exists for every frame of
    every traceback, IPython's own included (`inspect.getsourcefile`: a stat through WASI,
    0.1-0.2 ms). The standard library and the guest library are mounted read only, so a
    file's first answer stays true; files anywhere else are asked each time, as before."""
    import functools

    import IPython

    getsourcefile = inspect.getsourcefile
    libraries = (os.path.dirname(os.__file__), os.path.dirname(os.path.dirname(IPython.__file__)))
    read_only = tuple(folder + "/" for folder in libraries)
    sources: dict[str, str] = {}

    @functools.wraps(getsourcefile)
    def source_file_of(object: Any) -> str | None:
        filename = inspect.getfile(object)
        if not filename.startswith(read_only):
            return getsourcefile(object)
        known = sources.get(filename)
        if known is None:
            known = getsourcefile(object)
            if known is not None:
                sources[filename] = known
        return known

    inspect.getsourcefile = source_file_of


def _line_counts_by_stat() -> None:
    """Tracebacks without opening files that do not exist. For each frame IPython counts its
    file's lines by opening it (`count_lines_in_py_file`, which keeps counts, not failures):
    a cell's file, which does not exist (as on ipykernel), and a library's `.py`, which the
    guest library holds compiled only, are tried again in every traceback. An open goes
    through the host's descriptor guard (0.15-0.3 ms here), a stat does not (0.05 ms), so a
    file that is not there is found missing by a stat; one that is there is counted as
    before."""
    import functools

    import IPython.core.tbtools as tbtools

    count_lines = tbtools.count_lines_in_py_file

    @functools.wraps(count_lines)
    def count_lines_of_a_file(filename: str) -> int:
        if filename.endswith(".py") and not os.path.exists(filename):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), filename)
        return int(count_lines(filename))

    tbtools.count_lines_in_py_file = count_lines_of_a_file


# What any of IPython's static input transforms (inputtransformer2) looks for, over-approximated:
# a line starting with an escape (%magic, %%cell magic, !shell, ?help, ,;/ autocall), `= %` or
# `= !` (x = %magic, x = !cmd), any `?` (obj?), prompts to strip (>>>, In [1]:, ...:), and
# line breaks other than \n, which IPython's splitlines honours and the tokenizer does not.
_SPECIAL = re.compile(
    r"^[ \t]*[%!?,;/]|=[\s\\]*[%!]|\?|>>>|In \[|\.\.\.:"
    r"|[\r\v\f\x1c-\x1e\x85\u2028\u2029]",
    re.M,
)


def plain(cell: str) -> bool:
    """Whether IPython's static transforms leave `cell` as it is (only a final newline is
    added): no special syntax (_SPECIAL), and nothing its cleanup changes (a first line that
    is blank or indented, a line of only blanks, which dedent empties)."""
    if not cell or cell[0].isspace() or _SPECIAL.search(cell):
        return False
    return not any(line.isspace() for line in cell.split("\n"))


def _plain_cells_as_they_are(manager: Any) -> None:
    """Plain Python through IPython's static input transforms without tokenizing it: they
    tokenize the whole cell, test every transform on every line and dedent it, for a cell
    with no special syntax only to add a final newline (a quarter of a 25-line cell's
    instructions in the guest). A cell that might have any (plain() over-approximates) or a
    manager whose transforms were changed (a user's cleanup transform) goes IPython's way.
    tests/repl/test_shell_speedups.py checks both ways agree, as they did on two courses' 2,422
    cells."""
    transform_cell = manager.transform_cell
    default = (
        list(manager.cleanup_transforms),
        list(manager.line_transforms),
        list(manager.token_transformers),
    )

    def transform_plain_cell_as_it_is(cell: str) -> str:
        if plain(cell) and default == (
            manager.cleanup_transforms,
            manager.line_transforms,
            manager.token_transformers,
        ):
            return cell if cell.endswith("\n") else cell + "\n"
        return str(transform_cell(cell))

    manager.transform_cell = transform_plain_cell_as_it_is

"""IPython inside the sandbox: the shell that runs a kernel session's cells.

Runs INSIDE the sandbox's CPython, loaded as the module "sandbox_kernel_shell" after the guest
library (IPython and its pure-Python dependencies, read-only at /usr/local/lib/site-packages)
is on sys.path. As JupyterLite's pyodide-kernel does in Pyodide, it is IPython's own
`InteractiveShell`, with the parts that would talk to a terminal or a ZMQ socket replaced by
the driver's door (driver.py):

- display publisher: display(), update_display(), clear_output() and matplotlib figures go to
  the host as they happen, with their display_id and update flag;
- display hook: the cell's result becomes the execute_result bundle (IPython's formatters,
  `Out`, `_`, `_N` as in ipykernel);
- tracebacks: IPython's, sent as the error reply instead of printed;
- the pager: `obj?` and `obj??` become a `page` payload, as in ipykernel.

What WebAssembly cannot do is refused or replaced here, in one place, each with its reason:
processes (`!cmd`, `%sx`, `%%bash`, `%%script`): WASI has no process API (`%pip` and
`!pip install` are served through the door instead, packages.py); the event loop for top-level
`await`: asyncio's default loop wakes itself through a socket pair, and
WASI has no sockets, so the loop below sleeps through the door instead; threads: IPython's
history is kept in memory, without its saving thread.

Must import only the standard library at module level: IPython is imported by `start()`.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import os
import re
import selectors
import struct
import sys
import time
import types
from typing import Any

__all__ = ["NO_PROCESSES", "start"]

NO_PROCESSES = (
    "the sandbox runs no processes (WebAssembly has no way to start one): {what} is not "
    "available; use Python instead (os, shutil, pathlib, glob for files)"
)
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
# Cell magics that start a program: IPython's ScriptMagics and its shortcuts.
_SCRIPT_CELL_MAGICS = ("script", "bash", "sh", "perl", "ruby", "python2", "python3", "pypy", "js")
_PROCESS_LINE_MAGICS = ("sx", "system", "conda", "mamba", "micromamba", "uv")
# `!pip install x` and its spellings: %pip, which the sandbox has (packages.py).
_PIP_COMMAND = re.compile(r"^\s*(?:pip3?|python3?\s+-m\s+pip)(?:\s+(.*))?$", re.DOTALL)
# What warm_tracebacks() formats: a traceback through a function in a file IPython can read.
_WARM_UP_CELL = "def warm_up():\n    return 1 / 0\n\nwarm_up()\n"
_MISSED_FILES = 256  # files without a module remembered at most (_module_lookups_once)
_HIGHLIGHTED_LINES = 1024  # source lines kept coloured (_highlighting_once), at most
_HIGHLIGHTED_CHARS = 400  # ... each at most this long; a longer one is coloured each time
_COLOURED_PIECES = 4096  # short token runs kept coloured, at most
_COLOURED_TOKENS = 4  # ... each of at most this many tokens
# Where cells' files are named, as ipykernel names them (a folder of the process's own), and
# ipykernel's seed for the MurmurHash2 of a cell's text that names the file in it.
_CELLS_FOLDER = f"/tmp/ipykernel_{os.getpid()}"
_CELL_NAME_SEED = 0xC70F6907
_MURMUR_M = 0x5BD1E995
_WORD = 0xFFFFFFFF


class NoProcessesError(OSError):
    """What `!cmd` and its relatives raise in the sandbox."""


class _SleepSelector(selectors.BaseSelector):
    """A selector with nothing to select: waits sleep (through the door, so they end on an
    interrupt or the cell's deadline) and there are no sockets to register."""

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        raise NoProcessesError("the sandbox has no sockets or pipes to wait on")

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        raise KeyError(fileobj)

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is None:
            raise RuntimeError("the event loop would wait forever: nothing can wake it")
        if timeout > 0:
            time.sleep(timeout)
        return []

    def get_map(self) -> dict[Any, selectors.SelectorKey]:
        return {}


class SandboxEventLoop(asyncio.BaseEventLoop):
    """asyncio's event loop without its self-pipe: callbacks, tasks, futures and timers work;
    sockets and subprocesses do not exist here."""

    def __init__(self) -> None:
        super().__init__()
        self._selector = _SleepSelector()

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:  # only threads need to wake the loop; there are none
        pass


def _new_event_loop() -> asyncio.AbstractEventLoop:
    return SandboxEventLoop()


def start(driver: Any, main_module: Any) -> Any:
    """Create the session's shell over `main_module` (its namespace is the user's) and return
    it. IPython is imported here, once, from the guest library."""
    from IPython.core import page, payloadpage
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.hist_file = ":memory:"  # no file, no saving thread
    os.environ["MPLBACKEND"] = INLINE_BACKEND  # as ipykernel: figures show below the cell
    asyncio.events.new_event_loop = asyncio.new_event_loop = _new_event_loop  # asyncio.run too
    shell = _shell_class(driver).instance(
        config=config, user_module=main_module, compiler_class=_compiler_class()
    )
    shell.loop_runner = _LoopRunner()
    shell.set_hook("show_in_pager", page.as_hook(payloadpage.page), 99)
    for name in _SCRIPT_CELL_MAGICS:
        shell.register_magic_function(_refuse(name, "%%"), "cell", name)
    for name in _PROCESS_LINE_MAGICS:
        shell.register_magic_function(_refuse(name, "%"), "line", name)
    shell.register_magic_function(_pip_magic(driver), "line", "pip")
    shell.ast_transformers.append(driver.loop_checks())
    _lexer_once()
    _styles_once()
    _format_once(shell.InteractiveTB)
    _highlighting_once()
    _module_lookups_once()
    _library_sources_once()
    _line_counts_by_stat()
    return shell


def warm_tracebacks() -> None:
    """Format a traceback as a user's error is formatted, once the session's modules are
    imported: the warm image is taken after this, so a user's first error does not pay for
    what IPython, stack_data and pygments work out once (a map from every imported module's
    file to the module, a stat through WASI per file; the lexer's rules; the parsers' first
    use): 12 ms off a first `1/0`, 150 ms off a first pandas KeyError. Its frames are of a
    file IPython can read, which stack_data shows (a workspace module's); a cell's file does
    not exist, as on ipykernel, and IPython shows it line by line, which needs no warm-up
    (a first `1/0` costs 5.0 M instructions, a later one 6.0 M)."""
    import linecache

    from IPython import get_ipython

    name = "<sandbox-warm-up>"
    linecache.cache[name] = (len(_WARM_UP_CELL), None, _WARM_UP_CELL.splitlines(True), name)
    try:
        exec(compile(_WARM_UP_CELL, name, "exec"), {})
    except ZeroDivisionError:
        get_ipython().InteractiveTB.structured_traceback(*sys.exc_info())
    finally:
        linecache.cache.pop(name, None)


def murmur2(data: bytes, seed: int) -> int:
    """MurmurHash2 (32-bit, Austin Appleby's), the hash ipykernel names a cell's file by."""
    length = len(data)
    whole = length & ~3
    h = (seed ^ length) & _WORD
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * _MURMUR_M) & _WORD
        k = ((k ^ (k >> 24)) * _MURMUR_M) & _WORD
        h = ((h * _MURMUR_M) & _WORD) ^ k
    if length > whole:
        h = ((h ^ int.from_bytes(data[whole:], "little")) * _MURMUR_M) & _WORD
    h = ((h ^ (h >> 13)) * _MURMUR_M) & _WORD
    return h ^ (h >> 15)


def cell_file_name(raw_code: str) -> str:
    """The file a cell's code is compiled as, named as ipykernel names it: a folder of the
    process's own and the hash of the cell's text. Users see it where ipykernel shows it (a
    SyntaxError's message, a warning's location, `inspect.getfile`); a cell run again is the
    same file, so linecache keeps one copy of it. And IPython formats its frames as it does
    on ipykernel: the file does not exist, so IPython shows its lines one by one instead of
    parsing the cell with stack_data (an interrupt's turn: 10.5 M -> 7.7 M instructions)."""
    name = murmur2(raw_code.encode("utf-8", "surrogatepass"), _CELL_NAME_SEED)
    return f"{_CELLS_FOLDER}/{name}.py"


def _compiler_class() -> Any:
    from IPython.core.compilerop import CachingCompiler

    class CellCompiler(CachingCompiler):
        """IPython's compiler, with cells' files named as ipykernel's XCachingCompiler does."""

        def get_code_name(self, raw_code: str, transformed_code: str, number: int) -> str:
            return cell_file_name(raw_code)

    return CellCompiler


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


def _output_classes(driver: Any) -> tuple[Any, Any]:
    """IPython's display publisher and display hook, answering through `driver`."""
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher

    class DoorDisplayPublisher(DisplayPublisher):
        def publish(  # type: ignore[override]
            self,
            data: dict[str, Any],
            metadata: dict[str, Any] | None = None,
            source: Any = None,
            *,
            transient: dict[str, Any] | None = None,
            update: bool = False,
            **kwargs: Any,
        ) -> None:
            message = {"data": data, "metadata": metadata or {}}
            if transient:
                message["transient"] = transient
            if update:
                message["update"] = True
            driver.publish_display(message)

        def clear_output(self, wait: bool = False) -> None:
            driver.clear_output(wait)

    class DoorDisplayHook(DisplayHook):
        def write_output_prompt(self) -> None:
            pass

        def write_format_data(
            self, format_dict: dict[str, Any], md_dict: dict[str, Any] | None = None
        ) -> None:
            driver.set_result(format_dict, md_dict or {})

        def finish_displayhook(self) -> None:
            pass

    return DoorDisplayPublisher, DoorDisplayHook


def _shell_class(driver: Any) -> Any:
    """IPython's InteractiveShell, answering through `driver`."""
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell

    publisher, hook = _output_classes(driver)
    cells = sys.modules["sandbox_kernel_cells"]  # the sandbox's functions, not a cell's
    user_frames, chain = cells.user_frames, cells.chain

    class SandboxShell(InteractiveShell):
        """IPython's shell, answering through the door."""

        display_pub_class = publisher
        displayhook_class = hook

        def _get_exc_info(self, exc_tuple: Any = None) -> Any:
            """As IPython's, without the sandbox's own frames: an interrupt, or an error in
            a helper such as llm_query, ends at the user's line, as in ipykernel."""
            etype, value, tb = super()._get_exc_info(exc_tuple)
            sys.last_traceback = tb = _user_tracebacks(self, value, tb, user_frames, chain)
            return etype, value, tb

        def _showtraceback(self, etype: Any, evalue: Any, stb: list[str]) -> None:
            driver.set_error(etype, evalue, stb)

        def enable_gui(self, gui: str | None = None) -> None:
            if gui not in (None, "inline"):
                raise UsageError(f"the sandbox has no windows: only `inline` plots, not {gui!r}")

        def system_piped(self, cmd: str) -> None:
            """`!cmd`: %pip for pip, the sandbox's own commands (commands.py) for the rest; the
            output as the shell would print it, the status in `_exit_code`, as ipykernel."""
            pip = _PIP_COMMAND.match(cmd)
            if pip:  # `!pip install x` is %pip's, as in ipykernel's environment
                _pip(driver, pip.group(1) or "")
                return
            line = self.var_expand(cmd, depth=1)
            out, err, status = sys.modules["sandbox_kernel_commands"].run(line, tty=True)
            # As ipykernel shows a command run on its pseudo-terminal: both streams on stdout,
            # each line ending in \r\n.
            sys.stdout.write((out + err).replace("\n", "\r\n"))
            self.user_ns["_exit_code"] = status

        system_raw = system = system_piped

        def set_next_input(self, text: str, replace: bool = False) -> None:
            """As ipykernel: a `set_next_input` payload (%load, %recall), not readline's."""
            payload = {"source": "set_next_input", "text": text, "replace": replace}
            self.payload_manager.write_payload(payload)

        def getoutput(self, cmd: str, split: bool = True, depth: int = 0) -> Any:
            """`x = !cmd` and `!!cmd`: the output (stderr with it, as IPython's) as an SList."""
            from IPython.utils.text import SList

            out, err, status = sys.modules["sandbox_kernel_commands"].run(
                self.var_expand(cmd, depth=depth + 1)
            )
            self.user_ns["_exit_code"] = status
            text = out + err
            return SList(text.splitlines()) if split else text

    return SandboxShell


def _user_tracebacks(
    shell: Any, value: BaseException, tb: Any, user_frames: Any, chain: Any
) -> Any:
    """`tb` and the tracebacks of the exceptions chained to `value`, without the sandbox's own
    frames and what they called (driver.user_frames); `value`'s chain is changed in place, as
    IPython reads it from there. The cells' files are made known to `inspect.getmodule`, which
    otherwise looks through every loaded module for each cell frame (1-2 ms apiece here)."""
    cells = shell.compile._filename_map
    module = shell.user_module
    module_name = module.__name__ if sys.modules.get(module.__name__) is module else None

    def prune(head: Any) -> Any:
        entries = []
        while head is not None:
            entries.append(head)
            head = head.tb_next
        names = [entry.tb_frame.f_code.co_filename for entry in entries]
        users = user_frames(names, cells.__contains__)
        kept = [entry for entry, user in zip(entries, users, strict=True) if user]
        for name in names if module_name is not None else ():
            if name in cells:  # under the absolute name inspect looks files up by
                inspect.modulesbyfile[os.path.normcase(os.path.abspath(name))] = module_name
        if len(kept) == len(entries):
            return entries[0] if entries else None
        rebuilt = None
        for entry in reversed(kept):
            rebuilt = types.TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
        return rebuilt

    top = value.__traceback__
    for exc in chain(value):
        if exc.__traceback__ is not None:
            exc.__traceback__ = prune(exc.__traceback__)
    return value.__traceback__ if tb is top else prune(tb)


def _pip(driver: Any, line: str) -> None:
    if driver.packages is None:
        raise RuntimeError("this session has no package folder for %pip")
    sys.modules["sandbox_kernel_packages"].pip(driver, line, driver.packages)


def _pip_magic(driver: Any) -> Any:
    def pip(line: str = "") -> None:
        """Install pure-Python packages into this session: `%pip install NAME...`.

        The host's pip downloads wheels without compiled code from its package index (never
        building from source) and logs their SHA-256; they are unpacked into the session's
        own folder under /app and importable at once and after a restart. Also
        `%pip list` and `%pip uninstall NAME` (this session's packages)."""
        _pip(driver, line)

    return pip


def _refuse(name: str, prefix: str) -> Any:
    def magic(line: str = "", cell: str | None = None) -> None:
        raise NoProcessesError(NO_PROCESSES.format(what=f"`{prefix}{name}`"))

    magic.__doc__ = f"Not available in the sandbox: {NO_PROCESSES.format(what=prefix + name)}"
    return magic


class _LoopRunner:
    """Runs a cell that awaits at top level on the session's one event loop (so futures and
    tasks made in one cell can be awaited in the next, as in ipykernel)."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None

    def __call__(self, coro: Any) -> Any:
        if self.loop is None or self.loop.is_closed():
            self.loop = SandboxEventLoop()
        asyncio.set_event_loop(self.loop)
        return self.loop.run_until_complete(coro)

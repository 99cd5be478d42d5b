"""IPython's tracebacks in the guest (guest/shell.py): the lexer made once gives exactly what
stack_data's own per-traceback lexer gives, and a session's first error is not the one that
pays for IPython's imports (they are in the warm image)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.repl import REPLConfig, ReplSandbox

POLICY = ExecutionPolicy(fuel_budget=10**12, timeout_seconds=120)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplSandbox]:
    config = REPLConfig(ipython=True, policy=POLICY, workspace=tmp_path_factory.mktemp("tb"))
    with ReplSandbox(config) as repl:
        yield repl


def test_highlighting_is_stack_datas(session: ReplSandbox) -> None:
    done = session.execute(
        "import stack_data.core as core, stack_data.utils as utils\n"
        "from pygments.formatters import Terminal256Formatter\n"
        "formatter = Terminal256Formatter(style='default')\n"
        "code = 'def f(x):\\n    return x / 0  # note\\nf(1)\\n'\n"
        "same = [core._pygmented_with_ranges(formatter, code, r)\n"
        "        == utils._pygmented_with_ranges(formatter, code, r)\n"
        "        for r in ([(13, 25)], [], [(0, 3), (30, 40)])]\n"
        "same, core._pygmented_with_ranges is utils._pygmented_with_ranges"
    )
    assert done.result == {"text/plain": "([True, True, True], False)"}, done


def test_a_first_error_costs_what_later_ones_do(session: ReplSandbox) -> None:
    first = session.execute("1 / 0")
    later = session.execute("1 / 0")
    assert first.ename == later.ename == "ZeroDivisionError"
    assert "Traceback (most recent call last)" in "\n".join(first.traceback)  # IPython's
    # Before the warm-up, the first cost 790 M instructions against 170 M for the next.
    assert first.fuel_consumed < 3 * later.fuel_consumed, (first.fuel_consumed, later)


def test_a_helpers_error_ends_at_the_users_line(session: ReplSandbox) -> None:
    """The sandbox's own frames (llm_query's checks here) are cut from IPython's traceback, in
    chained exceptions too, as a built-in function's would be."""
    done = session.execute(
        "try:\n    llm_query(1)\nexcept TypeError as exc:\n    raise ValueError('again') from exc"
    )
    shown = _plain(done.traceback)
    assert done.ename == "ValueError"
    assert "llm_query(1)" in shown and "The above exception was the direct cause" in shown
    assert "sandbox" not in shown, shown


def test_the_colours_made_once_are_ipythons(session: ReplSandbox) -> None:
    """With the style and formatter made afresh for each traceback (IPython's own way), the
    traceback is the same, colour for colour."""
    done = session.execute(
        "import sys, stack_data, IPython.core.ultratb as ultratb\n"
        "from pygments.formatters.terminal256 import Terminal256Formatter\n"
        "def shown():\n"
        "    try:\n"
        "        {}['missing']\n"
        "    except KeyError:\n"
        "        return get_ipython().InteractiveTB.structured_traceback(*sys.exc_info())\n"
        "cached = shown()\n"
        "kept = stack_data.style_with_executing_node, ultratb.Terminal256Formatter\n"
        "stack_data.style_with_executing_node = kept[0].__wrapped__\n"
        "ultratb.Terminal256Formatter = Terminal256Formatter\n"
        "try:\n"
        "    fresh = shown()\n"
        "finally:\n"
        "    stack_data.style_with_executing_node, ultratb.Terminal256Formatter = kept\n"
        "cached == fresh, '\\x1b[' in ''.join(cached)"
    )
    assert done.result == {"text/plain": "(True, True)"}, done


def _plain(traceback: list[str] | None) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(traceback or []))


def test_an_error_is_formatted_once_and_kept_as_shown(session: ReplSandbox) -> None:
    """IPython 9 formats an error twice, to show it and to keep it for %notebook: the second
    is the first's lines, and the kept traceback is the one shown."""
    shown = session.execute("{}['missing']")
    assert shown.ename == "KeyError" and shown.traceback
    kept = session.execute(
        f"get_ipython().history_manager.exceptions[{shown.execution_count}]['traceback']"
        f" == {shown.traceback!r}"
    )
    assert kept.result == {"text/plain": "True"}, kept
    counted = session.execute(
        "import IPython.core.ultratb as ultratb\n"
        "calls = []\n"
        "original = ultratb.FormattedTB.structured_traceback\n"
        "def counting(self, *args, **kwargs):\n"
        "    calls.append(1)\n"
        "    return original(self, *args, **kwargs)\n"
        "ultratb.FormattedTB.structured_traceback = counting\n"
        "try:\n"
        "    get_ipython().run_cell('1 / 0', store_history=True)\n"
        "finally:\n"
        "    ultratb.FormattedTB.structured_traceback = original\n"
        "len(calls)"
    )
    assert counted.result == {"text/plain": "1"}, counted


def test_a_file_no_module_has_is_looked_for_once(session: ReplSandbox) -> None:
    """inspect.getmodule walks every loaded module for a file no module has (Cython's .pyx
    frames, exec'd code); the walk is made again only once something it saw has changed:
    a new module, a file inspect learnt otherwise. Every answer is inspect's own."""
    done = session.execute(
        "import inspect, os, sys, types\n"
        "def frame_of(filename):\n"
        "    try:\n"
        "        exec(compile('raise ValueError', filename, 'exec'), {})\n"
        "    except ValueError as exc:\n"
        "        return exc.__traceback__.tb_next.tb_frame\n"
        "frame, original = frame_of('pkg/_lib.pyx'), inspect.getmodule.__wrapped__\n"
        "walked, ismodule = [], inspect.ismodule\n"
        "inspect.ismodule = lambda o: walked.append(o) or ismodule(o)\n"
        "def asked():\n"
        "    walked.clear()\n"
        "    module = inspect.getmodule(frame)\n"
        "    return module, len(walked) >= len(sys.modules)\n"
        "try:\n"
        "    first, again = asked(), asked()\n"
        "    module = types.ModuleType('pkg._lib')\n"
        "    module.__file__ = os.path.abspath('pkg/_lib.pyx')\n"
        "    sys.modules['pkg._lib'] = module\n"
        "    imported = asked()\n"
        "    del sys.modules['pkg._lib']\n"
        "    other = frame_of('pkg/_other.pyx')\n"
        "    frame = other\n"
        "    missed = asked()\n"
        "    inspect.modulesbyfile[os.path.abspath('pkg/_other.pyx')] = 'json'\n"
        "    learnt = asked()\n"
        "finally:\n"
        "    inspect.ismodule = ismodule\n"
        "    inspect.modulesbyfile.pop(os.path.abspath('pkg/_other.pyx'), None)\n"
        "(first, again, imported[0] is module, imported[1], missed, learnt[0].__name__,\n"
        " original(other) is None)"
    )
    expected = "((None, True), (None, False), True, True, (None, True), 'json', True)"
    assert done.result == {"text/plain": expected}, done


def test_a_library_file_is_asked_for_once(session: ReplSandbox) -> None:
    """inspect.getsourcefile stats a file for every frame of every traceback; for the
    read-only libraries (the standard library, IPython's) the first answer is kept, for files
    anywhere else it is asked again. The answers are inspect's own."""
    done = session.execute(
        "import inspect, os, json.decoder, IPython.core.interactiveshell as shell\n"
        "from pathlib import Path\n"
        "Path('mine.py').write_text('def f():\\n    pass\\n')\n"
        "import mine\n"
        "stats, stat = [], os.stat\n"
        "os.stat = lambda *a, **k: stats.append(a[0]) or stat(*a, **k)\n"
        "def asked(code):\n"
        "    stats.clear()\n"
        "    found, asks = inspect.getsourcefile(code), len(stats)\n"
        "    return found == inspect.getsourcefile.__wrapped__(code), asks\n"
        "try:\n"
        "    library = [asked(c) for c in (json.decoder.JSONDecoder.decode.__code__,\n"
        "                                  shell.InteractiveShell.run_code.__code__) * 2]\n"
        "    workspace = [asked(mine.f.__code__) for _ in range(2)]\n"
        "finally:\n"
        "    os.stat = stat\n"
        "([same for same, _ in library + workspace], [n for _, n in library[2:]],\n"
        " min(n for _, n in workspace) > 0)"
    )
    expected = "([True, True, True, True, True, True], [0, 0], True)"
    assert done.result == {"text/plain": expected}, done


def test_a_first_error_does_not_look_up_the_imported_modules(tmp_path: Path) -> None:
    """The warm image is taken after a traceback has been formatted with the session's
    modules imported: a user's first error through numpy does not look up where each of the
    modules imported with it lives (150 ms in a pandas session)."""
    config = REPLConfig(
        ipython=True, policy=POLICY, workspace=tmp_path, warm_start_modules=("numpy", "pandas")
    )
    with ReplSandbox(config) as repl:
        repl.execute(
            "import os.path, numpy\n"
            "looked_up, realpath = [], os.path.realpath\n"
            "os.path.realpath = lambda p, **k: looked_up.append(p) or realpath(p, **k)"
        )
        failed = repl.execute("numpy.linalg.inv(numpy.zeros((2, 3)))")
        counted = repl.execute("os.path.realpath = realpath\nlen(looked_up)")
    assert failed.ename == "LinAlgError" and "_linalg.py" in _plain(failed.traceback), failed
    assert counted.result == {"text/plain": "0"}, counted


def test_a_module_replaced_by_an_odd_object_leaves_the_lookup_working(
    session: ReplSandbox,
) -> None:
    """A sys.modules entry replaced by an object whose == raises is a change like any other:
    the lookup asks inspect again instead of failing the traceback."""
    done = session.execute(
        "import inspect, sys\n"
        "class Odd:\n"
        "    def __eq__(self, other):\n"
        "        raise RuntimeError('no comparing me')\n"
        "    __hash__ = object.__hash__\n"
        "try:\n"
        "    exec(compile('raise ValueError', 'pkg/_odd.pyx', 'exec'), {})\n"
        "except ValueError as exc:\n"
        "    frame = exc.__traceback__.tb_next.tb_frame\n"
        "first, kept = inspect.getmodule(frame), sys.modules['json']\n"
        "sys.modules['json'] = Odd()\n"
        "try:\n"
        "    again = inspect.getmodule(frame)\n"
        "finally:\n"
        "    sys.modules['json'] = kept\n"
        "first, again"
    )
    assert done.result == {"text/plain": "(None, None)"}, done


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 5, 7, 8, 63, 1000])
def test_cells_files_are_named_by_ipykernels_hash(size: int) -> None:
    """The guest's MurmurHash2, and the host's that comes with each cell, are ipykernel's (its
    own pure-Python one, run on the host), for every length of tail and text outside ASCII."""
    from ipykernel.compiler import get_tmp_hash_seed, murmur2_x86

    from sandbox_kernel.guest.shell import _CELL_NAME_SEED, murmur2
    from sandbox_kernel.repl.protocol import CELL_NAME_SEED, cell_hash

    assert get_tmp_hash_seed() == _CELL_NAME_SEED == CELL_NAME_SEED
    text = ("x = 'é€😀'\n" * 200)[:size]
    hashed = murmur2_x86(text, _CELL_NAME_SEED)
    assert murmur2(text.encode(), _CELL_NAME_SEED) == cell_hash(text.encode()) == hashed


def test_a_cell_run_again_is_the_same_file(session: ReplSandbox) -> None:
    """As on ipykernel, a cell's file is named by the hash of its text, in a folder of the
    process's own: run again, it is the same file (linecache keeps one copy of its lines),
    and its traceback names the latest cell."""
    from sandbox_kernel.guest.shell import _CELL_NAME_SEED, murmur2

    code = "def g():\n    1 / 0\ng.__code__.co_filename"
    names = [session.execute(code).result for _ in range(2)]
    expected = f"/tmp/ipykernel_42/{murmur2(code.encode(), _CELL_NAME_SEED)}.py"
    assert names == [{"text/plain": repr(expected)}] * 2, names
    # A cell run by a cell, not by the host: the guest names its file itself.
    inner = "def h():\n    pass\nh.__code__.co_filename"
    nested = session.execute(f"get_ipython().run_cell({inner!r}).result")
    named = f"/tmp/ipykernel_42/{murmur2(inner.encode(), _CELL_NAME_SEED)}.py"
    assert nested.result == {"text/plain": repr(named)}, nested
    errors = [session.execute("g()") for _ in range(2)]
    numbers = [re.findall(r"Cell In\[(\d+)\]", _plain(error.traceback)) for error in errors]
    [[first, _], [second, _]] = numbers  # the cell that runs g(), then g's own cell
    assert int(first) < int(second), numbers
    assert numbers[0][1] == numbers[1][1], numbers


def test_a_file_that_is_not_there_is_not_opened(session: ReplSandbox) -> None:
    """IPython counts the lines of each frame's file by opening it; a cell's file (which does
    not exist, as on ipykernel) is found missing by a stat instead, and the traceback is the
    one IPython's own count gives. A file that is there is still counted."""
    done = session.execute(
        "import builtins, sys, IPython.core.tbtools as tbtools\n"
        "def shown():\n"
        "    try:\n"
        "        exec(compile('1 / 0', get_ipython().compile.cache('1 / 0', 7), 'exec'), {})\n"
        "    except ZeroDivisionError:\n"
        "        return get_ipython().InteractiveTB.structured_traceback(*sys.exc_info())\n"
        "opened, real_open = [], builtins.open\n"
        "def counted_open(file, *args, **kwargs):\n"
        "    opened.append(file)\n"
        "    return real_open(file, *args, **kwargs)\n"
        "builtins.open = counted_open\n"
        "try:\n"
        "    by_stat = shown()\n"
        "    stat_opens = list(opened)\n"
        "    ours, tbtools.count_lines_in_py_file = (\n"
        "        tbtools.count_lines_in_py_file, tbtools.count_lines_in_py_file.__wrapped__)\n"
        "    try:\n"
        "        by_open = shown()\n"
        "    finally:\n"
        "        tbtools.count_lines_in_py_file = ours\n"
        "finally:\n"
        "    builtins.open = real_open\n"
        "with open('counted.py', 'w') as f:\n"
        "    f.write('a = 1\\nb = 2\\n')\n"
        "stat_opens, len(opened) - len(stat_opens), by_stat == by_open, ours('counted.py')"
    )
    # Opened by IPython's count: this cell's file and the compiled one's, its two frames.
    assert done.result == {"text/plain": "([], 2, True, 2)"}, done


def test_lines_coloured_once_are_coloured_as_ipython_colours_them(session: ReplSandbox) -> None:
    """Source lines and short token runs are coloured once per theme and kept: each traceback,
    in each of IPython's themes, the first time and again, is what IPython's own colouring
    gives, a line longer than those kept too; and a theme replaced in `theme_table` colours
    with the new theme, not from what the old one left."""
    done = session.execute(
        "import sys\n"
        "from IPython.utils import PyColorize as pc\n"
        "sh = get_ipython()\n"
        "cells = ['1 / 0', 'x = [1,\\n     2]\\nraise KeyError(\"k\" * 500)  # long line\\n',\n"
        "         'def f(a):\\n    return a[\"k\"]  # comment\\n\\nf({})\\n',\n"
        "         'while True:\\n    raise KeyboardInterrupt\\n']\n"
        "def shown():\n"
        "    out = []\n"
        "    for n, cell in enumerate(cells):\n"
        "        try:\n"
        "            exec(compile(cell, sh.compile.cache(cell, 900 + n), 'exec'), {})\n"
        "        except BaseException:\n"
        "            out.append(sh.InteractiveTB.structured_traceback(*sys.exc_info()))\n"
        "    return out\n"
        "def own(make):\n"
        "    kept = pc.Parser.format2, pc.Theme.format\n"
        "    pc.Parser.format2, pc.Theme.format = kept[0].__wrapped__, kept[1].__wrapped__\n"
        "    try:\n"
        "        return make()\n"
        "    finally:\n"
        "        pc.Parser.format2, pc.Theme.format = kept\n"
        "same = []\n"
        "for theme in ('neutral', 'linux', 'lightbg', 'nocolor'):\n"
        "    sh.run_line_magic('colors', theme)\n"
        "    first, again = shown(), shown()\n"
        "    same.append(first == again == own(shown))\n"
        "sh.run_line_magic('colors', 'neutral')\n"
        "before = shown()\n"
        "old = pc.theme_table['neutral']\n"
        "pc.theme_table['neutral'] = pc.Theme('neutral', None, {pc.Token.Keyword: 'ansired'})\n"
        "try:\n"
        "    replaced = shown()\n"
        "    same.append(replaced == own(shown) and replaced != before)\n"
        "finally:\n"
        "    pc.theme_table['neutral'] = old\n"
        "same.append(shown() == before)\n"
        "same"
    )
    assert done.result == {"text/plain": "[True, True, True, True, True, True]"}, done

"""Attacks on the shared warm image.

Every kernel started from one warm image maps the image's file copy-on-write over its guest
memory (GuestSession.restore): a page is the page cache's, shared by all of them, until the
kernel's own cells write it, and the kernel's rollback image is the same file, patched with
the pages its cells wrote. These cells rewrite everything they can reach (module state, the
heap, every page of a big object, memory grown past the image), then make the host stop them.
The other kernels, the file on disk and the next kernel started from it must see none of it,
and the stopped kernel must come back byte for byte as it was before the cell.
"""

from __future__ import annotations

import ctypes
import hashlib
import sys
from pathlib import Path

from sandbox_kernel import ExecutionStatus, REPLConfig, ReplSandbox
from tests.repl.conftest import new_repl, plain, repl_config, run_ok
from tests.repl.conftest import stopped as stop

MODULES = ("json",)  # a warm image made in a second, in the test's own cache
POISON = (
    "import string, sys\n"
    "string.capwords = None\n"
    "for module in list(sys.modules.values()):\n"
    "    vars(module)['poisoned'] = True\n"
)


def warm_config(workspace: Path) -> REPLConfig:
    return repl_config(workspace, interrupt_grace_seconds=0.2, warm_start_modules=MODULES)


def the_image(cache: Path, config: REPLConfig) -> Path:
    """Make the warm image (a first session does) and return its file."""
    new_repl(config).destroy()
    (image,) = sorted((cache / "warm").glob("*.mem"))
    return image


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def memory_now(repl: ReplSandbox) -> bytes:
    session = repl._session
    assert session is not None
    return (ctypes.c_char * session.memory_bytes()).from_address(session._base).raw


def untouched(repl: ReplSandbox) -> str:
    return plain(
        repl.execute("import string, sys\nstring.capwords('a b'), hasattr(sys, 'poisoned')")
    )


def test_a_kernel_cannot_change_what_other_kernels_map(
    private_cache: Path, workspace: Path
) -> None:
    config = warm_config(workspace)
    image = the_image(private_cache, config)
    before = digest(image)
    attacker, neighbour = new_repl(config), new_repl(config)
    try:
        run_ok(attacker, POISON)
        assert attacker._image is not None and attacker._image.origin is not None, (
            "the attacker's rollback image should still be the mapped file, patched"
        )
        stopped = stop(attacker, "blob = bytearray(b'q' * 30_000_000)\nwhile True: pass")
        assert stopped.status is ExecutionStatus.TIMEOUT and stopped.rolled_back
        assert plain(attacker.execute("string.capwords, 'blob' in globals()")) == "(None, False)"
        assert untouched(neighbour) == "('A B', False)"
    finally:
        attacker.destroy()
        neighbour.destroy()
    assert digest(image) == before, "a kernel's writes reached the image file"
    later = new_repl(config)
    try:
        assert untouched(later) == "('A B', False)"
    finally:
        later.destroy()


def test_a_rollback_from_a_warm_start_is_the_image_byte_for_byte(
    private_cache: Path, workspace: Path
) -> None:
    """The rollback maps the file again and copies the pages the cells patched: what it makes
    must be exactly the image after the last good cell, however the stopped cell wrote."""
    config = warm_config(workspace)
    the_image(private_cache, config)
    repl = new_repl(config)
    try:
        run_ok(repl, "kept = {'n': 1}")
        run_ok(repl, "grown = bytearray(b'g' * 40_000_000)")  # the memory grows past the file
        for rewrite in (
            POISON,
            "kept.update({i: str(i) for i in range(20_000)})",
            "import gc; gc.collect()",
        ):
            run_ok(repl, "kept['n'] += 1")
            repl._join_capture()
            saved = repl._image
            assert saved is not None and saved.origin is not None
            expected = saved.memory().tobytes()
            stopped = stop(repl, f"{rewrite}\nkept['n'] = -1\nwhile True: pass")
            assert stopped.status is ExecutionStatus.TIMEOUT and stopped.rolled_back
            assert memory_now(repl) == expected, f"the rollback after {rewrite!r} differs"
        assert (
            plain(repl.execute("import string\nkept['n'], hasattr(string, 'poisoned')"))
            == "(4, False)"
        )
        assert plain(repl.execute("bytes(set(grown)), len(grown)")) == "(b'g', 40000000)"
    finally:
        repl.destroy()


# A module planted in a folder a session's code can write: it records that it ran (in the
# guest's builtins, which a warm image keeps) and steps aside for the real module.
PLANTED = """\
import builtins as _builtins, importlib as _importlib, sys as _sys
_builtins.__dict__.setdefault("__planted__", []).append(__name__)
_here = __file__.rpartition("/")[0]
del _sys.modules[__name__]
_saved = _sys.path[:]
_sys.path[:] = [p for p in _sys.path if p not in ("", ".", _here)]
try:
    _sys.modules[__name__] = _importlib.import_module(__name__)
finally:
    _sys.path[:] = _saved
"""
PLANTED_NAMES = sorted(
    name
    for name in sys.stdlib_module_names
    if name.isidentifier() and not name.startswith("_") and name not in ("sys", "builtins")
)


def test_a_shared_image_holds_no_module_from_a_folder_the_guest_writes(
    private_cache: Path, tmp_path: Path
) -> None:
    """A notebook's folder (the session's working folder, first on sys.path as on ipykernel)
    holds a module for every standard-library name. The first session made in
    it builds the machine's shared warm image (IPython, then `decimal`, which imports
    `numbers`): none of the planted modules may go into it, and a session started from the
    image in a clean folder must not run them."""
    poisoned, clean = tmp_path / "poisoned", tmp_path / "clean"
    poisoned.mkdir()
    for name in PLANTED_NAMES:
        (poisoned / f"{name}.py").write_text(PLANTED)
    clean.mkdir()
    modules = ("decimal",)
    first = new_repl(repl_config(poisoned, ipython=True, warm_start_modules=modules))
    try:
        run_ok(first, "x = 1")
    finally:
        first.destroy()
    assert sorted((private_cache / "warm").glob("*.mem")), "the first session saves the image"
    later = new_repl(repl_config(clean, ipython=True, warm_start_modules=modules))
    try:
        found = plain(
            later.execute(
                "import builtins, decimal, numbers\n"
                "getattr(builtins, '__planted__', None), numbers.__file__.startswith('/app')"
            )
        )
    finally:
        later.destroy()
    assert found == "(None, False)"

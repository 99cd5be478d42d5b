"""Warm start: REPLConfig(warm_start_modules=...) imports the modules once, keeps the session's
memory as an image in the cache, and later sessions start from it with the imports paid for.

Each test has a private SANDBOX_KERNEL_CACHE. The compiled guest (hundreds of MB, a minute to
compile) is hard-linked into it from the shared cache, so only warm images are new there.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from sandbox_kernel import ExecutionStatus
from tests.repl.conftest import interrupting, new_repl, plain, repl_config, run_ok

MODULES = ("numpy", "pandas")

pytestmark = pytest.mark.slow


def _images(cache: Path) -> list[Path]:
    return sorted((cache / "warm").glob("*.mem"))


def test_a_warm_image_is_made_once_and_makes_imports_cheap(
    private_cache: Path, workspace: Path
) -> None:
    cold = new_repl(repl_config(workspace))
    try:
        cold_import = run_ok(cold, "import pandas")
    finally:
        cold.destroy()
    assert _images(private_cache) == []

    config = repl_config(workspace, warm_start_modules=MODULES)
    first = new_repl(config)
    try:
        run_ok(first, "first_session_secret = 1")
    finally:
        first.destroy()
    images = _images(private_cache)
    assert len(images) == 1, "the first warm session saves one image"
    saved = images[0].stat().st_mtime_ns

    second = new_repl(config)
    try:
        warm_import = run_ok(second, "import pandas")
        frame = run_ok(second, "pandas.DataFrame({'a': [1, 2]})")
        assert frame.result is not None and "<table" in frame.result["text/html"]
        assert second.get_variable("first_session_secret") is None  # images hold no cells
        assert plain(run_ok(second, "import sys\n'numpy' in sys.modules")) == "True"
    finally:
        second.destroy()
    assert _images(private_cache)[0].stat().st_mtime_ns == saved, "the image was made again"
    assert warm_import.fuel_consumed < cold_import.fuel_consumed * 0.1, (
        f"import pandas cost {warm_import.fuel_consumed:,} instructions warm, "
        f"{cold_import.fuel_consumed:,} cold"
    )


def test_a_warm_session_keeps_its_limits_and_interrupts(
    private_cache: Path, workspace: Path
) -> None:
    config = repl_config(workspace, warm_start_modules=MODULES, interrupt_grace_seconds=0.5)
    new_repl(config).destroy()  # makes the image
    repl = new_repl(config, context="the context")
    try:
        assert plain(run_ok(repl, "context")) == "'the context'"
        run_ok(repl, "import pandas as pd\nearlier = pd.Series([1, 2]).sum()")
        timer = threading.Timer(0.3, repl.cancel)
        timer.start()
        soft = repl.execute("while True:\n    pass")
        timer.join()
        assert soft.status is ExecutionStatus.CANCELLED and soft.rolled_back is False
        timer = threading.Timer(0.3, repl.cancel)
        timer.start()
        hard = repl.execute("sum(range(10**11))")
        timer.join()
        assert hard.status is ExecutionStatus.CANCELLED and hard.rolled_back is True
        assert repl.get_variable("earlier") == 3
    finally:
        repl.destroy()


def test_a_damaged_warm_image_is_ignored(private_cache: Path, workspace: Path) -> None:
    config = repl_config(workspace, warm_start_modules=MODULES)
    new_repl(config).destroy()
    (image,) = _images(private_cache)
    image.write_bytes(b"\x00" * 1024)  # no longer matches the digest beside it
    repl = new_repl(config)
    try:
        assert plain(run_ok(repl, "import pandas\npandas.Series([2, 3]).sum()")) == "np.int64(5)"
    finally:
        repl.destroy()


def test_different_module_lists_get_different_images(private_cache: Path, workspace: Path) -> None:
    new_repl(repl_config(workspace, warm_start_modules=("json",))).destroy()
    new_repl(repl_config(workspace, warm_start_modules=("json", "csv"))).destroy()
    assert len(_images(private_cache)) == 2


def test_an_image_is_only_reused_with_the_same_folders(
    private_cache: Path, workspace: Path, tmp_path: Path
) -> None:
    """wasi-libc keeps its table of preopened folders in linear memory: an image made without
    /data, restored into a session with /data, showed /data missing and /tmp as the data."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.csv").write_text("a\n1\n")
    new_repl(repl_config(workspace, warm_start_modules=("json",))).destroy()
    with_data = repl_config(workspace, {"mount_data_dir": data}, warm_start_modules=("json",))
    repl = new_repl(with_data)
    try:
        listing = "import os\nsorted(os.listdir('/data')), sorted(os.listdir('/tmp'))"
        assert plain(run_ok(repl, listing)) == "(['in.csv'], [])"
    finally:
        repl.destroy()
    assert len(_images(private_cache)) == 2, "each folder layout has its own image"


IMMORTAL_CHECKS = """
import gc, json, sys
made = object()
(
    sys._is_immortal(json), sys._is_immortal(json.dumps), sys._is_immortal(json.JSONEncoder),
    sys._is_immortal(vars(json)), sys._is_immortal(made), sys.getrefcount(made),
)
"""
# What leans on the counts: the collector, a module reloaded and dropped, cycles through the
# image's objects, a finalizer, deep copies of the image's structures.
STILL_WORKS = """
import copy, gc, importlib, json, sys, weakref
gc.unfreeze()
collected = gc.collect()
importlib.reload(json)
del sys.modules['json']
import json
class Node:
    def __init__(self):
        self.me, self.encoder = self, json.JSONEncoder
finalized = []
node = Node()
weakref.finalize(node, finalized.append, 'gone')
del node
gc.collect()
copied = copy.deepcopy(sys.modules['json.decoder'].BACKSLASH)
json.loads(json.dumps({'a': [1, 2.5, None]})), finalized, len(copied) > 5
"""


def test_the_image_objects_are_immortal_and_the_cells_own_are_not(
    private_cache: Path, workspace: Path
) -> None:
    """The warm image's objects are made immortal (host/immortal.py), so cells do not write
    their counts; a cell's own objects are counted as ever, and what relies on counts (the
    collector, finalizers, a reload, the rollback) works as before."""
    config = repl_config(workspace, warm_start_modules=("json",), interrupt_grace_seconds=0.5)
    new_repl(config).destroy()  # makes the image
    repl = new_repl(config)
    try:
        assert plain(run_ok(repl, IMMORTAL_CHECKS)) == "(True, True, True, True, False, 2)"
        assert plain(run_ok(repl, STILL_WORKS)) == "({'a': [1, 2.5, None]}, ['gone'], True)"
        run_ok(repl, "kept = [json.dumps(i) for i in range(1000)]")
        with interrupting(repl):
            hard = repl.execute("sum(range(10**11))")
        assert hard.status is ExecutionStatus.CANCELLED and hard.rolled_back is True
        kept = "len(kept), sys._is_immortal(sys.modules['json.decoder'].JSONDecoder)"
        assert plain(run_ok(repl, kept)) == "(1000, True)"  # the rollback kept both
    finally:
        repl.destroy()

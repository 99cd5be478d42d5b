"""numpy's default integer in the sandbox (guest/numpy64.py): the functions cells call by name
give int64 as on 64-bit Linux, so `np.arange(100_000).sum()` is right; explicit dtypes and
arrays' own dtypes are kept; what stays 32-bit is what the README says. The real guest, numpy
imported by a cell (the import hook) and from a warm image (patched before the image)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.repl import REPLConfig, ReplSandbox

POLICY = ExecutionPolicy(fuel_budget=10**12, timeout_seconds=120, memory_bytes=1_000_000_000)

# expression -> what 64-bit numpy on Linux gives (checked against it in
# tests/kernel/test_data_compat.py).
AS_ON_LINUX = {
    "int(np.arange(100_000).sum())": "4999950000",
    "int(np.sum([2**31, 2**31]))": "4294967296",
    "int(np.prod(np.arange(1, 20)))": "121645100408832000",
    "int(np.cumsum(np.arange(100_000))[-1])": "4999950000",
    "str(np.array([1, 2]).dtype)": "'int64'",
    "str(np.asarray([[1, 2], [3, 4]]).dtype)": "'int64'",
    "str(np.zeros(3, dtype=int).dtype)": "'int64'",
    "str(np.ones(3, dtype='int').dtype)": "'int64'",
    "str(np.full(3, 7).dtype)": "'int64'",
    "str(np.random.randint(0, 5, 3).dtype)": "'int64'",
    "str(np.cumsum(np.ones(5, dtype=np.int8)).dtype)": "'int64'",
    "str(np.sum(np.ones(5, dtype=bool)).dtype)": "'int64'",
    "repr(np.concatenate([[1, 2, 3], [4, 5, 6]]))": "'array([1, 2, 3, 4, 5, 6])'",
    "repr(np.concatenate([[[1, 2], [3, 4]]] * 2, axis=1))": (
        "'array([[1, 2, 1, 2],\\n       [3, 4, 3, 4]])'"
    ),
    "repr(np.where(np.array([1.5, -2.0]) > 0, 2, -2))": "'array([ 2, -2])'",
    "repr(np.count_nonzero(np.arange(10) < 6))": "'np.int64(6)'",
    "repr(np.count_nonzero(np.eye(2), axis=0))": "'array([1, 1])'",
    # The methods sum and prod (ndarray's C code calls numpy._core._methods for them).
    "repr((np.array([1.5, -2.0, 3.0]) > 0).sum())": "'np.int64(2)'",
    "repr(np.eye(2, dtype=bool).sum(axis=0))": "'array([1, 1])'",
    "int(np.arange(100_000, dtype=np.int32).sum())": "4999950000",
    "repr(np.ones(2, dtype=np.uint8).prod())": "'np.uint64(1)'",
    "repr(np.ones(2, dtype=np.int32).sum(dtype=np.int32))": "'np.int32(2)'",
    "repr(np.ones(2).sum())": "'np.float64(2.0)'",
    "repr(np.c_[1:3, -10:-8])": "'array([[  1, -10],\\n       [  2,  -9]])'",
    "repr(np.r_[1:4, 7, [8, 9]])": "'array([1, 2, 3, 7, 8, 9])'",
    "repr(np.r_[np.array([1, 2], dtype=np.int32), 3])": "'array([1, 2, 3], dtype=int32)'",
    "repr(np.r_[-1:1:5j])": "'array([-1. , -0.5,  0. ,  0.5,  1. ])'",
    # Drawn from range(n): the numbers numpy draws, as int64.
    "np.random.seed(0) or repr(np.random.permutation(5))": "'array([2, 0, 1, 3, 4])'",
    "np.random.seed(1) or repr(np.random.choice(10, 3, replace=False))": "'array([2, 9, 6])'",
    "np.random.seed(2) or repr(np.random.choice(10))": "'8'",
    "repr(np.random.permutation(np.array([3], dtype=np.int32)))": "'array([3], dtype=int32)'",
    # Kept: explicit dtypes, arrays' own, floats.
    "str(np.array([1, 2], dtype=np.int32).dtype)": "'int32'",
    "str(np.array(np.arange(3, dtype=np.int16)).dtype)": "'int16'",
    "str(np.arange(5, dtype=np.uint8).dtype)": "'uint8'",
    "str(np.arange(0, 1, 0.25).dtype)": "'float64'",
    "str(np.zeros(3).dtype)": "'float64'",
    "str(np.full(2, 1.5).dtype)": "'float64'",
    "str(np.fromiter(range(3), dtype=int).dtype)": "'int64'",
    # Reprs: the default integer's dtype left out, any other named.
    "repr(np.array([7, 8, 9]))": "'array([7, 8, 9])'",
    "repr(np.arange(3))": "'array([0, 1, 2])'",
    "repr(np.array([1, 2], dtype=np.int32))": "'array([1, 2], dtype=int32)'",
    "repr(np.array([], dtype=np.int64))": "'array([], dtype=int64)'",
    "repr(np.concatenate([np.arange(2, dtype=np.int32), [5]]))": "'array([0, 1, 5])'",
    "repr(np.concatenate([np.arange(2, dtype=np.int32)] * 2))": (
        "'array([0, 1, 0, 1], dtype=int32)'"
    ),
    "repr(np.where([True, False], np.int32(1), np.int32(0)))": "'array([1, 0], dtype=int32)'",
    "repr(np.where([True, False], np.arange(2, dtype=np.int8), 0))": (
        "'array([0, 0], dtype=int8)'"
    ),
    "repr(np.array([[1, 2], [3, 4]]))": "'array([[1, 2],\\n       [3, 4]])'",
}


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplSandbox]:
    workspace = tmp_path_factory.mktemp("numpy64")
    config = REPLConfig(policy=POLICY, workspace=workspace)
    with ReplSandbox(config) as repl:
        assert repl.execute("import numpy as np").status == "ok"
        yield repl


@pytest.mark.parametrize("expression", list(AS_ON_LINUX))
def test_default_integer_is_64_bit(session: ReplSandbox, expression: str) -> None:
    done = session.execute(expression)
    assert done.status == "ok", done
    assert done.result == {"text/plain": AS_ON_LINUX[expression]}


def test_what_stays_32_bit_is_what_the_readme_says(session: ReplSandbox) -> None:
    done = session.execute(
        "a = np.array([1.5, 2.5])\n"
        "[str(a.astype(int).dtype), str(np.argmax(a).dtype), str(np.dtype(np.int_))]"
    )
    assert done.result == {"text/plain": "['int32', 'int32', 'int32']"}


def test_a_librarys_own_calls_get_numpys_integer(session: ReplSandbox) -> None:
    """Libraries here were built for this platform's intp: their calls are numpy's own."""
    done = session.execute(
        "import types\n"
        "library = types.ModuleType('library')\n"
        "exec('def count(a):\\n    return (a > 0).sum(), a.prod()', library.__dict__)\n"
        "[str(x.dtype) for x in library.count(np.arange(1, 4, dtype=np.int16))]"
    )
    assert done.result == {"text/plain": "['int32', 'int32']"}, done


def test_the_functions_still_look_like_numpys(session: ReplSandbox) -> None:
    done = session.execute("(np.array.__name__, np.sum.__doc__ == np.sum.__wrapped__.__doc__)")
    assert done.result == {"text/plain": "('array', True)"}


def test_numpy_from_a_warm_image_is_patched_too(tmp_path: Path) -> None:
    config = REPLConfig(
        policy=POLICY,
        workspace=tmp_path,
        warm_start_modules=("numpy",),
    )
    for _ in range(2):  # the first session makes the image, the second starts from it
        with ReplSandbox(config) as repl:
            done = repl.execute(
                "import numpy as np\n(int(np.arange(100_000).sum()), (np.arange(5) > 1).sum())"
            )
            assert done.result == {"text/plain": "(4999950000, np.int64(3))"}, done


def test_the_expected_values_are_those_of_numpy_on_linux() -> None:
    """AS_ON_LINUX checked against the real thing: the same expressions in the ipykernel
    baseline's CPython, with the guest's numpy version, on this 64-bit machine."""
    baseline = Path(__file__).resolve().parents[2] / ".venv-baseline" / "bin" / "python"
    assert baseline.exists(), "bin/setup --tests makes .venv-baseline (the ipykernel baseline)"
    script = (
        "import json, sys\nimport numpy as np\n"
        "print(json.dumps([repr(eval(e)) for e in json.load(sys.stdin)]))"
    )
    done = subprocess.run(
        [str(baseline), "-c", script],
        input=json.dumps(list(AS_ON_LINUX)),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert dict(zip(AS_ON_LINUX, json.loads(done.stdout), strict=True)) == AS_ON_LINUX

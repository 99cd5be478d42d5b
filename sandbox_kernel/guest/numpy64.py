"""NumPy's default integer, made 64-bit where a cell asks for it.

Runs INSIDE the sandbox's CPython, loaded as the module "sandbox_kernel_numpy" with the
driver, which has `patch(numpy)` called as soon as numpy is imported (imports.py).

In WebAssembly (wasm32) NumPy's default integer, np.int_ (the C long, intp), is 32-bit: on the
64-bit machines notebooks are written for it is 64-bit. So `np.arange(100_000).sum()` gives
704982704 here and 4999950000 there, silently. NumPy's default is compiled in; what can be
changed are the functions cells call by name. These, in the numpy namespace, called from the
notebook's own code (a cell, a function a cell defined, a %run script: module __main__), give
int64 where they would give the default integer (an explicit dtype other than `int` or "int"
is kept, and so is the dtype of an array passed in); called from a library they are numpy's
own, since libraries here were built for this platform's intp:

    array, asarray, asanyarray, arange, zeros, ones, empty, full, fromiter, random.randint,
    random.permutation and random.choice of a Python int
    sum, prod, cumsum, cumprod, nansum, nanprod (int32 accumulates in int64, as on Linux)
    the methods a.sum() and a.prod() (`(a > 0).sum()` counts in int64)
    concatenate of Python sequences, where(c, x, y) of two Python ints, count_nonzero,
    np.r_ and np.c_ of slices and Python ints

Arrays print as they do there too: `array([7, 8, 9])` for int64, `dtype=int32` named.

The two methods can be changed because ndarray's C code calls Python functions for them
(numpy._core._methods._sum and _prod), looked up when first called: the caller is the frame
above those functions, as for the functions above.

What stays 32-bit (README, "numpy's 32-bit integer"): the other ndarray methods
(`a.astype(int)`, `a.cumsum()`), indices NumPy returns (argmax, nonzero, the one-argument where,
argsort, bincount: intp), and arrays numpy's C code makes for other libraries. pandas'
integers are int64 already.

Must import only the standard library at module level.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

__all__ = ["patch"]

_PATCHED = "__sandbox_kernel_int64__"
_CREATORS = ("array", "asarray", "asanyarray", "fromiter")
_FILLED = ("zeros", "ones", "empty")
_REDUCTIONS = ("sum", "prod", "cumsum", "cumprod", "nansum", "nanprod")
_METHODS = ("_sum", "_prod")  # what ndarray.sum and ndarray.prod call (numpy._core._methods)


def patch(np: Any) -> None:
    """Replace numpy's creation functions and reductions by 64-bit-integer ones (once)."""
    if getattr(np, _PATCHED, False):
        return
    if np.dtype(np.int_).itemsize < 8:  # 32-bit (wasm32); a 64-bit numpy needs nothing
        _creators(np)
        _reductions(np)
        _combiners(np)
        _reprs(np)
    setattr(np, _PATCHED, True)


def _reprs(np: Any) -> None:
    """Arrays print as on 64-bit Linux: an int64 array's repr leaves its dtype out (numpy
    leaves out the platform's default integer's), and an int32 array's names it."""
    arrayprint = sys.modules.get("numpy._core.arrayprint") or sys.modules.get(
        "numpy.core.arrayprint"
    )
    typeless = getattr(arrayprint, "_typelessdata", None)
    if isinstance(typeless, list):
        typeless[:] = [np.int64 if kind is np.int32 else kind for kind in typeless]


def _wanted(dtype: Any) -> Any:
    """`int` and "int" mean the platform's integer: 64-bit, as on Linux. (np.int_ cannot be
    told from an explicit np.int32 here: they are the same type, so both are kept.)"""
    return "int64" if dtype is int or (isinstance(dtype, str) and dtype == "int") else dtype


def _replace(owner: Any, name: str, make: Any) -> None:
    """owner.name = make(original) for the notebook's own code, looking like the original
    (name, docs, __wrapped__). Libraries calling it get numpy's own: they were built and
    tested for this platform's integer (scikit-learn passes `np.zeros(n, dtype=int)` to code
    that wants intp, which is 32-bit here)."""
    original = getattr(owner, name)
    ours = make(original)

    def replacement(*args: Any, **kw: Any) -> Any:
        caller = sys._getframe(1).f_globals.get("__name__")
        return (ours if caller == "__main__" else original)(*args, **kw)

    functools.update_wrapper(replacement, original)
    replacement.__sandbox_kernel_original__ = original  # type: ignore[attr-defined]
    setattr(owner, name, replacement)


def _creators(np: Any) -> None:
    int64, default = np.dtype(np.int64), np.dtype(np.int_)
    for name in _CREATORS:
        _replace(np, name, lambda original: _creator(original, int64, default))
    for name in _FILLED:
        _replace(np, name, _filled)
    _replace(np, "full", lambda original: _full(original, int64))
    _replace(np, "arange", lambda original: _arange(original, int64))
    _replace(np.random, "randint", _randint)
    for name in ("permutation", "choice"):  # of a Python int n: drawn from arange(n)
        _replace(np.random, name, lambda original: _drawn_from_range(original, int64, default))


def _creator(original: Any, int64: Any, default: Any) -> Any:
    def create(obj: Any, *args: Any, **kw: Any) -> Any:
        if args and args[0] is not None:  # dtype, given by position
            return original(obj, _wanted(args[0]), *args[1:], **kw)
        if kw.get("dtype") is not None:
            kw["dtype"] = _wanted(kw["dtype"])
            return original(obj, *args, **kw)
        result = original(obj, *args, **kw)
        if getattr(result, "dtype", None) == default and not hasattr(obj, "dtype"):
            return result.astype(int64)  # Python ints: the platform integer, 64-bit
        return result  # an array's own dtype is kept

    return create


def _filled(original: Any) -> Any:
    def fill(shape: Any, dtype: Any = float, *args: Any, **kw: Any) -> Any:
        return original(shape, _wanted(dtype), *args, **kw)

    return fill


def _full(original: Any, int64: Any) -> Any:
    def fill(shape: Any, fill_value: Any, dtype: Any = None, *args: Any, **kw: Any) -> Any:
        if dtype is None and type(fill_value) is int:
            dtype = int64
        return original(shape, fill_value, _wanted(dtype), *args, **kw)

    return fill


def _arange(original: Any, int64: Any) -> Any:
    def numbers(*args: Any, **kw: Any) -> Any:
        bounds = (*args, kw.get("start"), kw.get("stop"), kw.get("step"))
        ints = all(type(a) is int for a in bounds if a is not None)
        if len(args) < 4 and kw.get("dtype") is None and ints:
            kw["dtype"] = int64
        elif kw.get("dtype") is not None:
            kw["dtype"] = _wanted(kw["dtype"])
        return original(*args, **kw)

    return numbers


def _combiners(np: Any) -> None:
    """concatenate of Python sequences, where between two Python ints and count_nonzero give
    int64, as on Linux (numpy makes their integers the platform's: `np.concatenate([[1, 2],
    [3]])`, `np.where(a > 0, 1, -1)`, `np.count_nonzero(a < 6)`). Arrays passed in keep their
    dtype, and the one-argument where's indices stay numpy's own."""

    intp, int64 = np.dtype(np.intp), np.dtype(np.int64)

    def as_linux(sequence: Any) -> Any:  # Python ints: int64; anything else as numpy makes it
        made = np.asarray(sequence)  # numpy's own here (this module is not __main__)
        return made.astype(int64) if made.dtype == intp else made

    def concatenate(original: Any) -> Any:
        def join(arrays: Any, *args: Any, **kw: Any) -> Any:
            if kw.get("dtype") is None and isinstance(arrays, list | tuple):
                arrays = [a if hasattr(a, "dtype") else as_linux(a) for a in arrays]
            return original(arrays, *args, **kw)

        return join

    def where(original: Any) -> Any:
        def choose(condition: Any, *values: Any, **kw: Any) -> Any:
            if len(values) == 2 and all(type(v) is int for v in values):
                values = tuple(np.int64(v) for v in values)
            return original(condition, *values, **kw)

        return choose

    def count_nonzero(original: Any) -> Any:
        def count(a: Any, *args: Any, **kw: Any) -> Any:
            counted = original(a, *args, **kw)
            if getattr(counted, "dtype", None) == intp:  # a scalar or an array
                return counted.astype(int64) if counted.ndim else np.int64(counted)
            return counted

        return count

    _replace(np, "concatenate", concatenate)
    _replace(np, "where", where)
    _replace(np, "count_nonzero", count_nonzero)
    _index_tricks(np, intp, int64)


def _index_tricks(np: Any, intp: Any, int64: Any) -> None:
    """np.r_[1:4, 7] and np.c_[1:6, -10:-5]: numpy makes a slice's numbers with its own
    arange, so of slices and Python ints they are int64 as on Linux. Any other part (an
    array, a numpy scalar) leaves numpy's result as it is."""
    module = sys.modules.get("numpy.lib._index_tricks_impl")
    concatenator = getattr(module, "AxisConcatenator", None)
    if concatenator is None:
        return

    def plain(part: Any) -> bool:  # a slice, a Python int, a directive ("r", "0,2"), lists
        if isinstance(part, slice | str) or type(part) is int:
            return True
        return isinstance(part, list | tuple) and all(plain(item) for item in part)

    def getitem(original: Any) -> Any:
        def index(self: Any, key: Any) -> Any:
            made = original(self, key)
            if getattr(made, "dtype", None) == intp and plain(key):
                return made.astype(int64)
            return made

        return index

    _replace(concatenator, "__getitem__", getitem)


def _drawn_from_range(original: Any, int64: Any, default: Any) -> Any:
    def draw(a: Any, *args: Any, **kw: Any) -> Any:
        drawn = original(a, *args, **kw)
        if type(a) is int and getattr(drawn, "dtype", None) == default:  # the same numbers
            return drawn.astype(int64)  # an array, or one numpy integer (choice(5))
        return drawn

    return draw


def _randint(original: Any) -> Any:
    def draw(low: Any, high: Any = None, size: Any = None, dtype: Any = int) -> Any:
        return original(low, high, size, _wanted(dtype))

    return draw


def _reductions(np: Any) -> None:
    """sum and its kin: a narrower integer accumulates in 64 bits, as numpy does on Linux."""

    def reduction(original: Any) -> Any:
        def reduce(a: Any, *args: Any, **kw: Any) -> Any:
            if isinstance(a, list | tuple | range):
                a = np.asarray(a)  # the patched one: Python ints become int64
            if len(args) < 2 and kw.get("dtype") is None:  # (axis, dtype, ...) by position
                kind = getattr(getattr(a, "dtype", None), "kind", None)
                if kind in ("i", "b") and a.dtype.itemsize < 8:
                    kw["dtype"] = np.int64
                elif kind == "u" and a.dtype.itemsize < 8:
                    kw["dtype"] = np.uint64
            return original(a, *args, **kw)

        return reduce

    for name in _REDUCTIONS:
        _replace(np, name, reduction)
    methods = sys.modules.get("numpy._core._methods")
    for name in _METHODS:
        if callable(getattr(methods, name, None)):
            _replace(methods, name, reduction)

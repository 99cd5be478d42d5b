"""Field descriptions from the docstrings written under a model's fields.

    @described                                       # descriptions set, the schema built once
    class Policy(BaseModel):
        model_config = ConfigDict(defer_build=True)
        fuel: int = 1
        # ...and under each field, a string literal: its description

pydantic's `use_attribute_docstrings` does the same, but on Python 3.11 and 3.12 it finds the
class's source by walking the stack and asking `inspect.getmodule` about each frame, which
scans every loaded module: about 10 ms per model in a process that has imported Jupyter, on
the path to the kernel's first reply. Here the class is found in its module's syntax tree,
parsed once for the models of one module, where `inspect.getsource` would also tokenize the
class (importing the core models: 105 ms with it, 86 ms without).

Must not import: wasmtime, anything of sandbox_kernel above core.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import itertools
import sys
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

__all__ = ["described"]

Model = TypeVar("Model", bound=type[BaseModel])


def described(model: Model) -> Model:
    """Give each field of `model` the docstring under it as its description, then build the
    model's schema (declare the model with `defer_build=True`, so it is built once, here)."""
    body = _class_body(model)
    base: type[BaseModel] = model
    fields = base.model_fields
    for node, following in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id in fields
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            fields[node.target.id].description = inspect.cleandoc(following.value.value)
    model.model_rebuild(force=True)
    return model


def _class_body(model: type) -> list[ast.stmt]:
    """The statements of `model`'s class block, as its module's source has them (the last
    definition of that name, as Python keeps); none when the source is not there, and the
    model works undescribed."""
    module = sys.modules.get(model.__module__)
    filename = getattr(module, "__file__", None)
    tree = _module_tree(filename) if isinstance(filename, str) else None
    body: list[ast.stmt] = tree.body if tree is not None else []
    for name in model.__qualname__.split("."):
        found = [n for n in body if isinstance(n, ast.ClassDef) and n.name == name]
        body = found[-1].body if found else []
    return body


@functools.lru_cache(maxsize=1)  # a module's models are described one after the other
def _module_tree(filename: str) -> ast.Module | None:
    try:
        return ast.parse(importlib.util.decode_source(Path(filename).read_bytes()), filename)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None

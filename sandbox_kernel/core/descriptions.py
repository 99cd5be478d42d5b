"""Field descriptions from the docstrings written under a model's fields.

    @described                                       # descriptions set, the schema built once
    class Policy(BaseModel):
        model_config = ConfigDict(defer_build=True)
        fuel: int = 1
        # ...and under each field, a string literal: its description

pydantic's `use_attribute_docstrings` does the same, but on Python 3.11 and 3.12 it finds the
class's source by walking the stack and asking `inspect.getmodule` about each frame, which
scans every loaded module: about 10 ms per model in a process that has imported Jupyter, on
the path to the kernel's first reply. Here the source comes from the class itself.

Must not import: wasmtime, anything of sandbox_kernel above core.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import textwrap
from typing import TypeVar

from pydantic import BaseModel

__all__ = ["described"]

Model = TypeVar("Model", bound=type[BaseModel])


def described(model: Model) -> Model:
    """Give each field of `model` the docstring under it as its description, then build the
    model's schema (declare the model with `defer_build=True`, so it is built once, here)."""
    try:
        source = textwrap.dedent(inspect.getsource(model))
    except (OSError, TypeError):  # no source shipped: the model works, undescribed
        model.model_rebuild(force=True)
        return model
    tree = ast.parse(source).body[0]
    body = tree.body if isinstance(tree, ast.ClassDef) else []
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

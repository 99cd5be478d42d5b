"""The driver's parts are listed twice: by the host (repl/protocol.py's DRIVER_PARTS, which the
guest's loader and Pyodide's worker send) and by driver.py itself (under host CPython it loads
them from its folder). The two lists must be one list."""

from __future__ import annotations

import ast
import importlib.resources

from sandbox_kernel.repl.protocol import DRIVER_PARTS


def test_driver_py_loads_the_parts_the_host_sends() -> None:
    source = importlib.resources.files("sandbox_kernel.guest").joinpath("driver.py").read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "DRIVER_PARTS" for t in node.targets
        ):
            assert ast.literal_eval(node.value) == DRIVER_PARTS
            break
    else:
        raise AssertionError("driver.py has no DRIVER_PARTS")
    guest = importlib.resources.files("sandbox_kernel.guest")
    assert all(guest.joinpath(file).is_file() for _, file in DRIVER_PARTS)

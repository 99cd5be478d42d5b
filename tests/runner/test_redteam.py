"""Red-team fixtures: every attack is refused before it runs, or contained by the sandbox.

First with the default guard (the AST check refuses, and the capsule shows that no sandbox
was started); then the same attacks with a guard that lets everything through, to show the
WebAssembly sandbox contains them on its own: no process, no network (a real server on the
host's loopback sees no connection), no file outside /data and a scratch /app, /data
read-only, a link planted in the dataset folder not followed, no host path in a response.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path

import pytest

from sandbox_kernel.runner import (
    CapsuleStore,
    ErrorCode,
    RunnerResponse,
    RunnerSettings,
    execute_python,
)
from tests.runner.conftest import describe

SECRET = "TOP-SECRET host data, never for a guest"

ATTACKS = {
    "subprocess": "import subprocess\nresult = subprocess.run(['id'], capture_output=True).stdout",
    "os-system": "import os\nresult = os.system('id')",
    "os-popen": "import os\nresult = os.popen('id').read()",
    "socket": "import socket\nresult = str(socket.create_connection(('127.0.0.1', PORT)))",
    "urllib": "import urllib.request\nresult = urllib.request.urlopen('http://127.0.0.1:PORT/')",
    "etc-passwd": "result = open('/etc/passwd').read()",
    "host-secret": "result = open('SECRET_PATH').read()",
    "dotdot": "result = open('/data/../../secret.txt').read()",
    "planted-link": "result = open('/data/link.csv').read()",
    "write-data": "open('/data/t.csv', 'w').write('overwritten')\nresult = 1",
    "subclasses": (
        "subs = ().__class__.__base__.__subclasses__()\n"
        "wrap = [c for c in subs if c.__name__ == '_wrap_close']\n"
        "g = wrap[0].__init__.__globals__ if wrap else {}\n"
        "result = g['system']('echo pwned') if 'system' in g else open('SECRET_PATH').read()"
    ),
    "computed-getattr": "result = getattr(__builtins__, 'op' + 'en')('SECRET_PATH').read()",
    "import-builtin": "result = __import__('o' + 's').listdir('/')",
    "ctypes": "import ctypes\nresult = str(ctypes.CDLL(None))",
    "sqlite-file": "import sqlite3\nresult = sqlite3.connect('SECRET_PATH').execute('select 1')",
}


# Code the default guard lets through (pandas reads files and URLs): the sandbox contains it.
ALLOWED_BUT_CONTAINED = {
    "pandas-url": "result_df = pd.read_csv('http://127.0.0.1:PORT/x.csv')",
    "pandas-host-file": "result_df = pd.read_csv('SECRET_PATH')",
    "pandas-dotdot": "result_df = pd.read_csv('/data/../../secret.txt')",
    "pandas-link": "result_df = pd.read_csv('/data/link.csv')",
    "pandas-write-data": "orders = dfs['t']\norders.to_csv('/data/t.csv')\nresult = 1",
}


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A registry with one dataset, a secret beside it, and a link to the secret planted in
    the dataset's folder."""
    root = tmp_path_factory.mktemp("host")
    (root / "secret.txt").write_text(SECRET)
    folder = root / "data" / "ds"
    folder.mkdir(parents=True)
    (folder / "t.csv").write_text("a,b\n1,x\n2,y\n")
    os.symlink(root / "secret.txt", folder / "link.csv")
    (root / "datasets.toml").write_text('[datasets.ds]\npath = "data/ds"\n')
    return root


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): os.readlink(p) if p.is_symlink() else _digest(p)
        for p in sorted(root.rglob("*"))
        if p.is_symlink() or p.is_file()
    }


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _code(name: str, host: Path, server: socket.socket) -> str:
    port = str(server.getsockname()[1])
    secret = str(host / "secret.txt")
    code = ATTACKS.get(name) or ALLOWED_BUT_CONTAINED[name]
    return code.replace("PORT", port).replace("SECRET_PATH", secret)


def _run(settings: RunnerSettings, host: Path, code: str) -> RunnerResponse:
    mine = settings.model_copy(update={"datasets": host / "datasets.toml"})
    return execute_python("ds", code, settings=mine, timeout_seconds=10)


@pytest.mark.parametrize("name", list(ATTACKS))
def test_the_guard_refuses_the_attack_before_anything_runs(
    settings: RunnerSettings, host: Path, listening: socket.socket, name: str
) -> None:
    response = _run(settings, host, _code(name, host, listening))
    assert response.error is not None, describe(response)
    assert response.error.type is ErrorCode.PYTHON_POLICY_VIOLATION, describe(response)
    assert response.error.line is not None and response.error.message.startswith("line ")
    assert response.run_id is not None
    capsule = CapsuleStore(settings.capsules).get(response.run_id)
    assert "start" not in capsule.timings_ms, "a sandbox was started for refused code"
    assert capsule.policy_report is not None and capsule.policy_report["allowed"] is False


def _assert_contained(
    response: RunnerResponse, host: Path, before: dict[str, str], server: socket.socket
) -> None:
    text = response.model_dump_json()
    assert SECRET not in text and "uid=" not in text
    assert "pwned" not in response.stdout_trunc + json.dumps(response.rows)
    assert response.error is not None, describe(response)
    assert response.error.type is ErrorCode.PYTHON_EXECUTION_ERROR, describe(response)
    assert _tree(host) == before, "a host file changed"
    try:
        connection, _ = server.accept()
    except TimeoutError:
        return
    connection.close()
    pytest.fail("a connection from the guest reached the host's server")


@pytest.mark.parametrize("name", list(ATTACKS))
def test_the_sandbox_contains_the_attack_without_the_guard(
    permissive: RunnerSettings, host: Path, listening: socket.socket, name: str
) -> None:
    before = _tree(host)
    response = _run(permissive, host, _code(name, host, listening))
    _assert_contained(response, host, before, listening)


@pytest.mark.parametrize("name", list(ALLOWED_BUT_CONTAINED))
def test_what_the_guard_allows_is_contained_by_the_sandbox(
    settings: RunnerSettings, host: Path, listening: socket.socket, name: str
) -> None:
    before = _tree(host)
    response = _run(settings, host, _code(name, host, listening))
    _assert_contained(response, host, before, listening)


def test_no_host_path_reaches_the_response(permissive: RunnerSettings, host: Path) -> None:
    code = (
        "import os, sys\n"
        "print(os.getcwd(), sorted(os.listdir('/data')), sorted(os.listdir('/app')))\n"
        "print(dict(os.environ), sys.path, dfs)\n"
        "pd.read_csv('/data/absent.csv')"
    )
    response = _run(permissive, host, code)
    assert response.error is not None and "absent.csv" in response.error.message
    text = json.dumps(response.model_dump(mode="json"))
    assert "'t.csv'" in response.stdout_trunc, "the code did see the dataset"
    for host_path in (str(host), "sandbox-kernel-runner", str(Path.home())):
        assert host_path not in text, f"{host_path} leaked: {text[:3000]}"


def test_the_planted_link_is_not_a_table(settings: RunnerSettings, host: Path) -> None:
    response = _run(settings, host, "result = sorted(dfs)")
    assert response.rows == [["t"]], describe(response)


def test_a_host_path_written_by_the_code_is_rewritten_whole(
    settings: RunnerSettings, host: Path
) -> None:
    folder = str(host / "data" / "ds")
    code = f"print({folder!r} + '/t.csv')\nprint({folder!r} + 'x')\nresult = 1"
    response = _run(settings, host, code)
    first, second = response.stdout_trunc.splitlines()
    assert first == "/data/t.csv", "the dataset's folder is what the guest calls /data"
    assert second == folder + "x", "only whole path components are rewritten"

"""%dataset, %%sql and the guarded kernel spec, through jupyter_client like any client.

One `sandbox-python` kernel and one `sandbox-python-guarded` kernel for the module, both
pointed at the project's example datasets.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import start_new_kernel

from sandbox_kernel.kernel.data_magics import DataMagics
from sandbox_kernel.kernel.install import kernel_spec
from sandbox_kernel.kernel.magics import is_complete
from sandbox_kernel.kernel.settings import KernelSettings
from tests.kernel.conftest import (
    REPO,
    STARTUP_TIMEOUT_SECONDS,
    RunningKernel,
    install_kernel_spec,
    kernel_env,
    start_kernel,
)

DATASETS = REPO / "datasets" / "datasets.toml"
GUARDED_NAME = "sandbox-python-guarded"


@pytest.fixture(scope="module")
def data_kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningKernel]:
    root = tmp_path_factory.mktemp("data-kernel")
    running = start_kernel(root, {"SANDBOX_KERNEL_DATASETS": str(DATASETS)})
    yield running
    running.shutdown()


@pytest.fixture(scope="module")
def guarded_kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningKernel]:
    install_kernel_spec()
    root = tmp_path_factory.mktemp("guarded-kernel")
    km, kc = start_new_kernel(
        kernel_name=GUARDED_NAME,
        startup_timeout=STARTUP_TIMEOUT_SECONDS,
        cwd=str(root),
        env={**kernel_env(root), "SANDBOX_KERNEL_DATASETS": str(DATASETS)},
    )
    running = RunningKernel(km, kc, root)
    yield running
    running.shutdown()


# -- %dataset --------------------------------------------------------------------------------


def test_dataset_lists_the_registry(data_kernel: RunningKernel) -> None:
    listing = data_kernel.run_ok("%dataset").stream()
    assert "retail: A small coffee-equipment web shop" in listing
    assert "tables: daily, stations" in listing
    assert str(REPO) not in listing


def test_dataset_loads_tables_as_globals_and_dfs(data_kernel: RunningKernel) -> None:
    loaded = data_kernel.run_ok("%dataset weather").stream()
    assert "dataset 'weather': 2 tables, also in dfs" in loaded
    assert "daily: 35 rows x 6 columns" in loaded
    result = data_kernel.run_ok("len(daily), sorted(dfs), type(stations).__name__").result()
    assert result == "(35, ['daily', 'stations'], 'DataFrame')"


def test_the_dataset_is_read_only_in_the_session(data_kernel: RunningKernel) -> None:
    data_kernel.run_ok("%dataset retail")
    refused = data_kernel.run("open('/data/retail/orders.csv', 'a').write('x')")
    assert refused.status == "error" and refused.reply["ename"] == "PermissionError"
    assert data_kernel.run_ok("len(orders)").result() == "30", "the data is intact"


@pytest.mark.parametrize("name", ["../datasets", "retail/../../etc", "/etc", "retail x"])
def test_dataset_ids_that_look_like_paths_load_nothing(
    data_kernel: RunningKernel, name: str
) -> None:
    refused = data_kernel.run(f"%dataset {name}")
    assert refused.reply["ename"] == "UsageError", refused.describe()
    assert "unknown dataset_id" in refused.reply["evalue"]


def test_staged_tables_cannot_reach_the_host_files(data_kernel: RunningKernel) -> None:
    """%dataset hard-links the host's CSVs into /data: the links share the files, so every
    way of writing through them must fail and the host's bytes stay as they were."""
    host_file = REPO / "datasets" / "retail" / "orders.csv"
    before = hashlib.sha256(host_file.read_bytes()).hexdigest()
    mode = host_file.stat().st_mode
    data_kernel.run_ok("%dataset retail")
    # WASI has no permission bits: the guest's os.chmod succeeds and changes nothing.
    data_kernel.run_ok("import os\nos.chmod('/data/retail/orders.csv', 0o777)")
    attacks = (
        "import os\n"
        "tries = []\n"
        "for attack in (\n"
        "    lambda: open('/data/retail/orders.csv', 'r+').write('x'),\n"
        "    lambda: os.truncate('/data/retail/orders.csv', 0),\n"
        "    lambda: os.remove('/data/retail/orders.csv'),\n"
        "    lambda: os.rename('/data/retail/orders.csv', '/data/retail/o.csv'),\n"
        "    lambda: open('/data/retail/new.csv', 'w'),\n"
        "):\n"
        "    try:\n"
        "        attack()\n"
        "        tries.append('WROTE')\n"
        "    except OSError as exc:\n"
        "        tries.append(type(exc).__name__)\n"
        "tries"
    )
    tries = data_kernel.run_ok(attacks).result()
    assert "WROTE" not in tries, tries
    assert hashlib.sha256(host_file.read_bytes()).hexdigest() == before
    assert host_file.stat().st_mode == mode


def test_dataset_errors_are_usage_errors(data_kernel: RunningKernel) -> None:
    unknown = data_kernel.run("%dataset sales")
    assert unknown.reply["ename"] == "UsageError"
    assert unknown.reply["evalue"] == (
        "%dataset: unknown dataset_id 'sales'; registered: retail, weather"
    )


# -- %%sql -----------------------------------------------------------------------------------


def test_sql_shows_a_table(data_kernel: RunningKernel) -> None:
    data_kernel.run_ok("%dataset retail")
    query = "%%sql\nSELECT category, COUNT(*) AS n FROM products GROUP BY category ORDER BY n DESC"
    shown = data_kernel.run_ok(query)
    html = shown.result("text/html")
    assert "<table" in html and "equipment" in html
    plain = shown.result("text/plain")
    assert plain.splitlines()[0].split() == ["category", "n"]
    assert "equipment  4" in plain


def test_sql_runs_over_the_session_s_own_frames(data_kernel: RunningKernel) -> None:
    data_kernel.run_ok(
        "import pandas as pd\nscores = pd.DataFrame({'who': list('abc'), 'n': [3, 5, 2]})"
    )
    shown = data_kernel.run_ok("%%sql --out best\nSELECT who FROM scores ORDER BY n DESC LIMIT 1")
    assert "b" in shown.result()
    assert data_kernel.run_ok("best.who.tolist()").result() == "['b']"


def test_sql_cuts_at_max_rows_and_says_so(data_kernel: RunningKernel) -> None:
    data_kernel.run_ok("%dataset retail")
    shown = data_kernel.run_ok("%%sql --max-rows 2 --out few\nSELECT * FROM orders")
    assert "showing the first 2 rows" in shown.stream("stderr")
    assert data_kernel.run_ok("len(few)").result() == "2"


def test_sql_writes_are_refused_before_the_guest(data_kernel: RunningKernel) -> None:
    refused = data_kernel.run("%%sql\nWITH t AS (SELECT 1)\nDELETE FROM orders")
    assert refused.reply["ename"] == "SQL_POLICY_VIOLATION"
    assert refused.reply["evalue"] == "%%sql: line 2: DELETE is not allowed: queries are read-only"


@pytest.mark.parametrize(
    ("cell", "ename", "words"),
    [
        ("%%sql\nSELECT * FROM nowhere", "SqlExecutionError", "no such table: nowhere"),
        ("%%sql --colour red\nSELECT 1", "UsageError", "unknown or incomplete option '--colour'"),
        ("%%sql --out 1x\nSELECT 1", "UsageError", "--out needs a variable name"),
        ("%%sql\n", "UsageError", "%%sql: no query"),
    ],
    ids=["unknown-table", "unknown-option", "bad-out", "empty"],
)
def test_sql_errors(data_kernel: RunningKernel, cell: str, ename: str, words: str) -> None:
    failed = data_kernel.run(cell)
    assert failed.status == "error" and failed.reply["ename"] == ename, failed.describe()
    assert words in failed.reply["evalue"]


def test_the_run_log_keeps_the_cells_as_typed(data_kernel: RunningKernel) -> None:
    data_kernel.run_ok("%%sql\nSELECT 41 + 1 AS answer")
    entries = [json.loads(line) for line in data_kernel.run_log.read_text().splitlines()]
    assert entries[-1]["code"] == "%%sql\nSELECT 41 + 1 AS answer"


def test_a_sql_cell_is_complete_after_a_blank_line() -> None:
    assert is_complete("%%sql")["status"] == "incomplete"
    assert is_complete("%%sql\nSELECT 1")["status"] == "incomplete"
    assert is_complete("%%sql\nSELECT 1\n\n")["status"] == "complete"
    assert is_complete("%dataset retail")["status"] == "complete"


# -- the guarded kernel spec -----------------------------------------------------------------


def test_the_guarded_spec_is_installed() -> None:
    install_kernel_spec()
    spec = KernelSpecManager().get_kernel_spec(GUARDED_NAME)
    assert spec.env == {"SANDBOX_KERNEL_GUARDED": "1"}
    assert spec.display_name.endswith("[guarded]")
    assert kernel_spec(guarded=True)["env"] == {"SANDBOX_KERNEL_GUARDED": "1"}
    assert "env" not in kernel_spec()


@pytest.mark.parametrize(
    ("cell", "words"),
    [
        ("import os", "line 1: import of 'os' is blocked"),
        ("x = 1\ny = open('/etc/passwd')", "line 2: open() is not allowed"),
        ("().__class__.__base__.__subclasses__()", "line 1: the attribute '__class__'"),
        ("getattr(x, 'sy' + 's')", "line 1: getattr() with a computed attribute name"),
        ("print(", "line 1: the code does not parse"),
    ],
    ids=["import", "builtin", "dunder", "computed-getattr", "syntax"],
)
def test_the_guarded_kernel_refuses_cells_naming_the_line(
    guarded_kernel: RunningKernel, cell: str, words: str
) -> None:
    refused = guarded_kernel.run(cell)
    assert refused.status == "error" and refused.reply["ename"] == "PYTHON_POLICY_VIOLATION"
    assert refused.reply["evalue"].startswith(words), refused.describe()
    assert refused.of_type("error"), "the refusal is shown"


def test_nothing_of_a_refused_cell_runs(guarded_kernel: RunningKernel) -> None:
    guarded_kernel.run("marker = 'ran'\nimport os")
    assert guarded_kernel.run("marker").reply["ename"] == "NameError"


def test_the_guarded_kernel_runs_allowed_code_and_the_data_magics(
    guarded_kernel: RunningKernel,
) -> None:
    assert guarded_kernel.run_ok("import math\nmath.factorial(5)").result() == "120"
    guarded_kernel.run_ok("%dataset retail")
    shown = guarded_kernel.run_ok("%%sql\nSELECT COUNT(*) AS n FROM orders")
    assert "30" in shown.result()
    assert "timeout_seconds" in guarded_kernel.run_ok("%policy").stream()


def test_the_guarded_kernel_checks_user_expressions(guarded_kernel: RunningKernel) -> None:
    done = guarded_kernel.run_ok(
        "y = 2", user_expressions={"ok": "y * 21", "bad": "__import__('os').getcwd()"}
    )
    expressions = done.reply["user_expressions"]
    assert expressions["ok"]["status"] == "ok"
    assert expressions["ok"]["data"]["text/plain"] == "42"
    assert expressions["bad"]["status"] == "error"
    assert expressions["bad"]["ename"] == "PYTHON_POLICY_VIOLATION"


# -- configuration ---------------------------------------------------------------------------


def test_a_broken_guard_file_refuses_every_cell(tmp_path: Path) -> None:
    guard = tmp_path / "guard.toml"
    guard.write_text("allowed_imports = 7\n")
    environ = {
        "SANDBOX_KERNEL_GUARDED": "1",
        "SANDBOX_KERNEL_GUARD": str(guard),
        "SANDBOX_KERNEL_WORKSPACE": str(tmp_path / "workspace"),
        "SANDBOX_KERNEL_RUN_LOG": str(tmp_path / "runs.jsonl"),
    }
    magics = DataMagics(KernelSettings.from_environment(environ, cwd=tmp_path))
    plan = magics.plan("x = 1")
    assert plan.reply is not None and plan.reply.ename == "PYTHON_POLICY_VIOLATION"
    assert plan.reply.error is not None and "every cell is refused" in plan.reply.error


@pytest.mark.parametrize(
    ("value", "guarded"),
    [("", False), ("0", False), ("off", False), ("1", True), ("yes", True), ("typo", True)],
)
def test_the_guarded_switch_fails_closed(tmp_path: Path, value: str, guarded: bool) -> None:
    environ = {"SANDBOX_KERNEL_GUARDED": value, "SANDBOX_KERNEL_RUN_LOG": str(tmp_path / "r")}
    assert KernelSettings.from_environment(environ, cwd=tmp_path).guarded is guarded


def test_a_policy_data_folder_is_kept_and_used(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(f"mount_data_dir = {str(REPO / 'datasets')!r}\n")
    environ = {
        "SANDBOX_KERNEL_POLICY": str(policy),
        "SANDBOX_KERNEL_DATASETS": str(DATASETS),
        "SANDBOX_KERNEL_RUN_LOG": str(tmp_path / "runs.jsonl"),
    }
    magics = DataMagics(KernelSettings.from_environment(environ, cwd=tmp_path))
    assert magics.settings.policy.mount_data_dir == REPO / "datasets"
    plan = magics.plan("%dataset weather")
    assert plan.reply is None and "'/data/weather/daily.csv'" in plan.code
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "x.csv").write_text("a\n1\n")
    registry = tmp_path / "datasets.toml"
    registry.write_text(f"[datasets.far]\npath = {str(outside)!r}\n")
    far = DataMagics(
        KernelSettings.from_environment({**environ, "SANDBOX_KERNEL_DATASETS": str(registry)})
    ).plan("%dataset far")
    assert far.reply is not None and far.reply.error is not None
    assert "dataset 'far' is not inside it" in far.reply.error

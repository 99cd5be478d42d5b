"""Bypasses of the AST guard (runner and guarded kernel), one per class the issue found: the
guard must refuse each deterministically, before anything runs; the sandbox would contain
them anyway, but the seed promises rejection. Ordinary analysis code stays allowed
(tests/runner/test_guard.py).
"""

from __future__ import annotations

import pytest

from sandbox_kernel.runner import RunnerSettings, execute_python
from sandbox_kernel.runner.guard import Rule, check_code
from tests.runner.conftest import DATASETS

BYPASSES = {
    # reachable-module attribute chains
    "builtins-chain": (
        "import pandas as pd\nresult = pd.core.common.builtins.open('/etc/passwd')",
        Rule.BLOCKED_ATTRIBUTE,
    ),
    "io-common-os": (
        "import pandas as pd\nresult = pd.io.common.os.listdir('/')",
        Rule.BLOCKED_MODULE,
    ),
    "io-common-path": (
        "import pandas as pd\nresult = pd.io.common.Path('/etc/passwd').read_text()",
        Rule.BLOCKED_ATTRIBUTE,
    ),
    "open-as-attribute": (
        "import numpy as np\nresult = np.compat.open('/etc/passwd')",
        Rule.BLOCKED_ATTRIBUTE,
    ),
    "private-module": ("import numpy as np\nresult = np._core.multiarray", Rule.BLOCKED_ATTRIBUTE),
    "builtins-attribute": (
        "import numpy as np\nf = np.builtins\nresult = f",
        Rule.BLOCKED_ATTRIBUTE,
    ),
    # eval-like pandas APIs
    "df-query": (
        "result = orders.query('@pd.io.common.os.system(\"id\")', engine='python')",
        Rule.BLOCKED_ATTRIBUTE,
    ),
    "df-eval": ("result = orders.eval('quantity * 2')", Rule.BLOCKED_BUILTIN),
    "pd-eval": ("import pandas as pd\nresult = pd.eval('1 + 1')", Rule.BLOCKED_BUILTIN),
    # pickle loaders
    "read-pickle": (
        "import pandas as pd\nresult_df = pd.read_pickle('/data/x.pkl')",
        Rule.BLOCKED_ATTRIBUTE,
    ),
    "np-load-pickle": (
        "import numpy as np\nresult = np.load('/data/x.npy', allow_pickle=True)",
        Rule.BLOCKED_ATTRIBUTE,
    ),
    "np-load-pickle-computed": (
        "import numpy as np\nflag = 1 > 0\nresult = np.load('/data/x', allow_pickle=flag)",
        Rule.BLOCKED_ATTRIBUTE,
    ),
    # format templates built at run time
    "format-built": ("t = '{0._' + '_class__}'\nresult = t.format(orders)", Rule.RUNTIME_FORMAT),
    "format-join": (
        "result = ''.join(['{0.', '_', '_init__}']).format(orders)",
        Rule.RUNTIME_FORMAT,
    ),
    "str-format-unbound": (
        "t = '{0.__class__}'\nresult = str.format(t, orders)",
        Rule.RUNTIME_FORMAT,
    ),
    "format-map": (
        "t = '{x._' + '_class__}'\nresult = t.format_map({'x': orders})",
        Rule.RUNTIME_FORMAT,
    ),
}


@pytest.mark.parametrize("case", BYPASSES, ids=list(BYPASSES))
def test_each_bypass_class_is_refused(case: str) -> None:
    code, rule = BYPASSES[case]
    report = check_code(code)
    assert not report.allowed, f"{case} passed the guard"
    assert rule in {v.rule for v in report.violations}, report.details()
    assert check_code(code) == report  # deterministic


@pytest.mark.parametrize("case", ["builtins-chain", "df-query", "np-load-pickle", "format-built"])
def test_the_runner_refuses_before_running(case: str, tmp_path: pytest.TempPathFactory) -> None:
    settings = RunnerSettings(
        datasets=DATASETS,
        capsules=tmp_path / "c.sqlite3",
        enable_python_execution=True,  # type: ignore[operator]
    )
    code = BYPASSES[case][0].replace("orders", "dfs['orders']")
    response = execute_python("retail", code, settings=settings)
    assert response.status.value == "error"
    assert response.error is not None and response.error.type.value == "PYTHON_POLICY_VIOLATION"

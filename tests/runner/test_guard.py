"""The AST policy check: allow and deny cases, the report, configurable lists.

Pure host-side tests: nothing runs. What the sandbox does with code that passes is in
test_redteam.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from sandbox_kernel.runner import GuardConfig, GuardConfigError, check_code
from sandbox_kernel.runner.guard import Rule, load_guard_config


@pytest.mark.parametrize(
    "code",
    [
        "import pandas as pd\nresult_df = pd.DataFrame({'a': [1]})",
        "import numpy as np\nfrom numpy.linalg import norm\nresult = float(norm(np.ones(3)))",
        "import math, statistics, re, datetime\nresult = math.pi",
        "from datetime import date as d\nresult = d(2024, 1, 1)",
        "result = getattr(orders, 'shape')",
        "if __name__ == '__main__':\n    result = type(orders).__name__",
        "open_ = orders['quantity'].sum()\nresult = open_",
        "open = orders['quantity']\ninput = 3",  # binding a builtin's name, never using it
        "def f(x):\n    return x * 2\nresult = [f(i) for i in range(3)]",
        "class Row:\n    pass\nresult = len(dfs)",
        "result = '{0} and {1}'.format(1, 2)",
        "result = f'{len(orders)} orders'",
        "try:\n    result = 1 / 0\nexcept ZeroDivisionError:\n    result = None",
        "result = orders[orders['quantity'] > 2]",
        "import numpy as np\nresult = np.random.default_rng(0).normal(size=3).tolist()",
        "import pandas as pd\nresult = pd.api.types.is_numeric_dtype(orders['quantity'])",
        "result = orders.groupby('product').agg(total=('quantity', 'sum'))",
        "import numpy as np\nresult = np.load('/data/x.npy', allow_pickle=False)",
    ],
    ids=[
        "pandas",
        "numpy-submodule",
        "stdlib-allowlist",
        "from-import",
        "getattr-literal",
        "harmless-dunders",
        "name-like-builtin",
        "rebinding-builtin-names",
        "functions",
        "classes",
        "format-plain",
        "f-string",
        "try-except",
        "pandas-filter",
        "numpy-random",
        "pandas-api-types",
        "groupby-agg",
        "numpy-load-no-pickle",
    ],
)
def test_analysis_code_is_allowed(code: str) -> None:
    report = check_code(code)
    assert report.allowed, report.details()
    assert report.summary() == "allowed" and report.first_line is None


@pytest.mark.parametrize(
    ("code", "rule", "line", "words"),
    [
        pytest.param(
            "import os", Rule.BLOCKED_MODULE, 1, "import of 'os' is blocked", id="import-os"
        ),
        pytest.param(
            "x = 1\nimport subprocess",
            Rule.BLOCKED_MODULE,
            2,
            "'subprocess' is blocked",
            id="import-later-line",
        ),
        pytest.param(
            "import os.path", Rule.BLOCKED_MODULE, 1, "'os.path' is blocked", id="import-submodule"
        ),
        pytest.param(
            "from socket import socket",
            Rule.BLOCKED_MODULE,
            1,
            "'socket' is blocked",
            id="from-socket",
        ),
        pytest.param(
            "from pandas.io.common import os",
            Rule.BLOCKED_MODULE,
            1,
            "'os' from",
            id="from-pandas-import-os",
        ),
        pytest.param(
            "import json",
            Rule.IMPORT_NOT_ALLOWED,
            1,
            "'json' is not allowed (allowed: datetime",
            id="json-not-allowed",
        ),
        pytest.param(
            "import pickle",
            Rule.IMPORT_NOT_ALLOWED,
            1,
            "'pickle' is not allowed",
            id="pickle-not-allowed",
        ),
        pytest.param(
            "import builtins",
            Rule.IMPORT_NOT_ALLOWED,
            1,
            "'builtins' is not allowed",
            id="builtins-not-allowed",
        ),
        pytest.param(
            "from . import x", Rule.IMPORT_NOT_ALLOWED, 1, "relative imports", id="relative-import"
        ),
        pytest.param(
            "import numpyx",
            Rule.IMPORT_NOT_ALLOWED,
            1,
            "'numpyx' is not allowed",
            id="lookalike-module",
        ),
        pytest.param(
            "pd.io.common.os.system('id')",
            Rule.BLOCKED_MODULE,
            1,
            "'os' reaches a blocked",
            id="attribute-chain-to-os",
        ),
        pytest.param(
            "x = sys.modules", Rule.BLOCKED_MODULE, 1, "use of blocked module 'sys'", id="sys-name"
        ),
        pytest.param(
            "open('/etc/passwd')", Rule.BLOCKED_BUILTIN, 1, "open() is not allowed", id="open-call"
        ),
        pytest.param("f = open", Rule.BLOCKED_BUILTIN, 1, "open() is not allowed", id="open-alias"),
        pytest.param("exec('1')", Rule.BLOCKED_BUILTIN, 1, "exec() is not allowed", id="exec"),
        pytest.param("eval('1')", Rule.BLOCKED_BUILTIN, 1, "eval() is not allowed", id="eval"),
        pytest.param(
            "compile('1', 'x', 'exec')",
            Rule.BLOCKED_BUILTIN,
            1,
            "compile() is not allowed",
            id="compile",
        ),
        pytest.param(
            "__import__('os')",
            Rule.BLOCKED_BUILTIN,
            1,
            "__import__() is not allowed",
            id="dunder-import",
        ),
        pytest.param("input()", Rule.BLOCKED_BUILTIN, 1, "input() is not allowed", id="input"),
        pytest.param(
            "globals()['x'] = 1", Rule.BLOCKED_BUILTIN, 1, "globals() is not allowed", id="globals"
        ),
        pytest.param(
            "().__class__", Rule.DUNDER, 1, "'__class__' is not allowed", id="class-attribute"
        ),
        pytest.param("__builtins__", Rule.DUNDER, 1, "the name '__builtins__'", id="builtins-name"),
        pytest.param(
            "__builtins__ = {}", Rule.DUNDER, 1, "the name '__builtins__'", id="builtins-binding"
        ),
        pytest.param(
            "getattr(x, '__class__')",
            Rule.DUNDER,
            1,
            "getattr() of the attribute '__class__'",
            id="getattr-dunder",
        ),
        pytest.param(
            "getattr(x, 'os')",
            Rule.DUNDER,
            1,
            "getattr() of the attribute 'os'",
            id="getattr-module",
        ),
        pytest.param(
            "getattr(x, '__cl' + 'ass__')",
            Rule.COMPUTED_ATTRIBUTE,
            1,
            "computed attribute",
            id="getattr-computed",
        ),
        pytest.param(
            "name = 'shape'\ngetattr(x, name)",
            Rule.COMPUTED_ATTRIBUTE,
            2,
            "computed attribute",
            id="getattr-variable",
        ),
        pytest.param(
            "setattr(x, n, 1)",
            Rule.COMPUTED_ATTRIBUTE,
            1,
            "setattr() with a computed",
            id="setattr-computed",
        ),
        pytest.param(
            "g = getattr",
            Rule.COMPUTED_ATTRIBUTE,
            1,
            "getattr may only be called directly",
            id="getattr-alias",
        ),
        pytest.param(
            "'{0.__class__}'.format(1)",
            Rule.DUNDER,
            1,
            "format field reaching a dunder",
            id="format-dunder",
        ),
        pytest.param(
            "t = '{x.__init__.__globals__}'",
            Rule.DUNDER,
            1,
            "format field reaching a dunder",
            id="format-template",
        ),
        pytest.param(
            "match x:\n    case object(__class__=c): pass",
            Rule.DUNDER,
            2,
            "class pattern",
            id="match-class-pattern",
        ),
        pytest.param(
            "print(", Rule.SYNTAX, 1, "does not parse, so it cannot be checked", id="syntax"
        ),
    ],
)
def test_dangerous_code_is_refused_naming_the_line(
    code: str, rule: Rule, line: int, words: str
) -> None:
    report = check_code(code)
    assert not report.allowed
    assert any(v.rule is rule and words in v.message for v in report.violations), report.details()
    assert report.first_line == line
    assert report.summary().startswith(f"line {line}: ")


def test_the_subclasses_escape_is_refused_at_every_step() -> None:
    report = check_code("x = ().__class__.__base__.__subclasses__()")
    assert [v.name for v in report.violations] == ["__class__", "__base__", "__subclasses__"]
    assert report.summary() == ("line 1: the attribute '__class__' is not allowed (and 2 more)")


def test_the_report_is_deterministic_and_in_source_order() -> None:
    code = "import os\nimport json\nx = open('f')\ny = ().__class__\nimport sys"
    first, second = check_code(code), check_code(code)
    assert first == second
    assert [v.line for v in first.violations] == [1, 2, 3, 4, 5]
    assert first.details()[0] == "line 1: import of 'os' is blocked"


def test_the_lists_are_configurable() -> None:
    config = GuardConfig(
        allowed_imports=("pandas", "json"),
        blocked_modules=("os", "requests"),
        blocked_builtins=("print",),
    )
    assert check_code("import json", config).allowed
    assert not check_code("import math", config).allowed, "no longer in the allowlist"
    assert not check_code("print(1)", config).allowed
    assert check_code("open('x')", config).allowed, "open is not blocked by this config"
    assert check_code("import requests", config).violations[0].rule is Rule.BLOCKED_MODULE
    relaxed = GuardConfig(block_dunders=False, block_computed_attributes=False)
    assert check_code("x = ().__class__\ng = getattr", relaxed).allowed


def test_a_module_cannot_be_allowed_and_blocked() -> None:
    with pytest.raises(ValidationError, match="both allowed and blocked: os"):
        GuardConfig(allowed_imports=("os",))
    with pytest.raises(ValidationError, match="not module names"):
        GuardConfig(allowed_imports=("pandas; rm",))


def test_the_lists_load_from_toml(tmp_path: Path) -> None:
    file = tmp_path / "guard.toml"
    file.write_text('[guard]\nallowed_imports = ["pandas", "json"]\nblock_dunders = false\n')
    config = load_guard_config(file)
    assert config.allowed_imports == ("pandas", "json") and config.block_dunders is False
    assert load_guard_config(None) == GuardConfig()
    file.write_text("allowed_imports = 3\n")
    with pytest.raises(GuardConfigError, match=r"guard lists guard\.toml: allowed_imports"):
        load_guard_config(file)
    file.write_text("allowed_imports = [\n")
    with pytest.raises(GuardConfigError, match="TOML syntax error"):
        load_guard_config(file)
    with pytest.raises(GuardConfigError, match=r"cannot read the guard lists absent\.toml"):
        load_guard_config(tmp_path / "absent.toml")

"""The AST policy check: what Python a guarded run may contain, decided before anything runs.

`check_code(code, config)` parses the code with the host's `ast` and returns a
`PolicyReport`: every violation with its line, column, rule and the name involved, sorted,
so the same code and lists always give the same report. Rules:

- imports: only modules in `allowed_imports` (and their submodules); a module in
  `blocked_modules` anywhere in a dotted name, and relative imports, are refused;
- names and attributes that reach a blocked module (`os.system`, `pd.io.common.os`);
- blocked builtins (`open`, `exec`, `eval`, `compile`, `__import__`, `input`, ...) named
  anywhere, called or not, so they cannot be aliased;
- dunder names and attributes (`().__class__.__base__.__subclasses__()`, `__builtins__`),
  except harmless ones such as `__name__`; also in class patterns (`case C(__class__=x)`)
  and in any str that could be a str.format template (`"{0.__class__}"`);
- getattr, setattr, delattr and hasattr except when called directly with a literal,
  non-dunder name (a computed name could reach anything);
- attribute chains that leave the public API: an attribute named as a blocked module or
  builtin (`pd.core.common.builtins.open`), as a library's internal namespace (`core`,
  `common`, `compat`, `_libs`, ...) or module re-export (`builtins`, `Path`), or private
  (`_x`): allowed modules re-export what is blocked, so their insides are out of bounds;
- APIs that evaluate a string as code (`df.query`, `df.eval`, `pd.eval`) and that unpickle
  (`pd.read_pickle`, `allow_pickle=` anything but False);
- `.format(...)` and `.format_map(...)` on anything but a str literal, and `str.format`
  (a template built at run time could reach any attribute).

This is a policy layer, not the boundary: the WebAssembly sandbox still contains whatever
passes. Code the host's Python cannot parse (a syntax error, or syntax newer than the
host's) is refused, since it cannot be checked.

Must not import anything from sandbox_kernel but core and runner.errors, nor wasmtime.
"""

from __future__ import annotations

import ast
import re
import tomllib
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Final, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from sandbox_kernel.runner.errors import GuardConfigError

__all__ = [
    "DEFAULT_ALLOWED_IMPORTS",
    "DEFAULT_BLOCKED_ATTRIBUTES",
    "DEFAULT_BLOCKED_BUILTINS",
    "DEFAULT_BLOCKED_MODULES",
    "GuardConfig",
    "PolicyReport",
    "Rule",
    "Violation",
    "check_code",
    "load_guard_config",
]

DEFAULT_ALLOWED_IMPORTS: Final = (
    "pandas",
    "numpy",
    "math",
    "statistics",
    "re",
    "datetime",
    "matplotlib",  # charts: result_figure, or the last figure drawn
)
DEFAULT_BLOCKED_MODULES: Final = (
    "os",
    "sys",
    "subprocess",
    "socket",
    "pathlib",
    "shutil",
    "ctypes",
    "importlib",
)
DEFAULT_BLOCKED_BUILTINS: Final = (
    "open",
    "exec",
    "eval",
    "compile",
    "__import__",
    "input",
    "breakpoint",
    "globals",
    "locals",
    "vars",
)
DEFAULT_ALLOWED_DUNDERS: Final = ("__name__", "__qualname__", "__doc__")
# Attributes no guarded code needs: string evaluators, unpicklers, libraries' internal
# namespaces and the stdlib they re-export (pandas.io.common imports os, pathlib, builtins).
DEFAULT_BLOCKED_ATTRIBUTES: Final = (
    "eval",
    "query",
    "read_pickle",
    "builtins",
    "core",
    "common",
    "compat",
    "util",
    "testing",
    "Path",
    "pickle",
    "marshal",
)
_FORMAT_METHODS: Final = frozenset({"format", "format_map"})
_ATTRIBUTE_FUNCTIONS: Final = frozenset({"getattr", "setattr", "delattr", "hasattr"})
# A str.format replacement field that reaches a dunder: "{0.__class__}", "{x[__y__]}".
_FORMAT_DUNDER: Final = re.compile(r"\{[^{}]*?(__\w+__)[^{}]*\}")
_MODULE_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _module_names(names: tuple[str, ...]) -> tuple[str, ...]:
    bad = [name for name in names if not _MODULE_NAME.match(name)]
    if bad:
        raise ValueError(f"not module names: {', '.join(map(repr, bad))}")
    return tuple(dict.fromkeys(names))


def _identifiers(names: tuple[str, ...]) -> tuple[str, ...]:
    bad = [name for name in names if not name.isidentifier()]
    if bad:
        raise ValueError(f"not identifiers: {', '.join(map(repr, bad))}")
    return tuple(dict.fromkeys(names))


_Modules = Annotated[tuple[str, ...], AfterValidator(_module_names)]
_Names = Annotated[tuple[str, ...], AfterValidator(_identifiers)]


class GuardConfig(BaseModel):
    """The allow and block lists of the check (the issue's defaults)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    allowed_imports: _Modules = DEFAULT_ALLOWED_IMPORTS
    """Modules code may import, with their submodules."""
    blocked_modules: _Modules = DEFAULT_BLOCKED_MODULES
    """Modules code may neither import nor reach by name or attribute."""
    blocked_builtins: _Names = DEFAULT_BLOCKED_BUILTINS
    """Builtins code may not name."""
    allowed_dunders: _Names = DEFAULT_ALLOWED_DUNDERS
    """Dunder names and attributes that stay allowed."""
    block_dunders: bool = True
    """Refuse every other dunder name and attribute."""
    block_computed_attributes: bool = True
    """Refuse getattr/setattr/delattr/hasattr unless called with a literal, non-dunder name."""
    blocked_attributes: _Names = DEFAULT_BLOCKED_ATTRIBUTES
    """Attribute names refused wherever they appear (besides blocked modules and builtins)."""
    block_private_attributes: bool = True
    """Refuse attributes starting with one underscore (a library's private parts)."""
    block_runtime_formats: bool = True
    """Refuse str.format templates that are not str literals, and allow_pickle= not False."""

    @model_validator(mode="after")
    def _apart(self) -> Self:
        both = set(self.allowed_imports) & set(self.blocked_modules)
        if both:
            raise ValueError(f"both allowed and blocked: {', '.join(sorted(both))}")
        return self

    def is_blocked(self, module: str) -> bool:
        return any(part in self.blocked_modules for part in module.split("."))

    def is_allowed(self, module: str) -> bool:
        return any(module == a or module.startswith(a + ".") for a in self.allowed_imports)

    def is_dunder(self, name: str) -> bool:
        return (
            self.block_dunders
            and name.startswith("__")
            and name.endswith("__")
            and len(name) > 4
            and name not in self.allowed_dunders
        )


def load_guard_config(path: Path | str | None) -> GuardConfig:
    """The lists from a TOML file (top-level keys, or a [guard] table); defaults for None.

    Raises:
        GuardConfigError: the file is missing, unreadable, not TOML, or invalid.
    """
    if path is None:
        return GuardConfig()
    file = Path(path).expanduser()
    try:
        document = tomllib.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise GuardConfigError(f"cannot read the guard lists {file.name}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise GuardConfigError(f"guard lists {file.name}: TOML syntax error: {exc}") from None
    table = document.get("guard", document)
    try:
        return GuardConfig.model_validate(table)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" if e["loc"] else e["msg"]
            for e in exc.errors()
        )
        raise GuardConfigError(f"guard lists {file.name}: {problems}") from None


class Rule(StrEnum):
    SYNTAX = "syntax"
    IMPORT_NOT_ALLOWED = "import_not_allowed"
    BLOCKED_MODULE = "blocked_module"
    BLOCKED_BUILTIN = "blocked_builtin"
    DUNDER = "dunder"
    COMPUTED_ATTRIBUTE = "computed_attribute"
    BLOCKED_ATTRIBUTE = "blocked_attribute"
    RUNTIME_FORMAT = "runtime_format"


class Violation(BaseModel):
    model_config = ConfigDict(frozen=True)

    line: int
    col: int
    rule: Rule
    name: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


class PolicyReport(BaseModel):
    """The outcome of one check: allowed, or every violation in source order."""

    model_config = ConfigDict(frozen=True)

    allowed: bool
    violations: list[Violation] = Field(default_factory=list)
    config: GuardConfig

    @property
    def first_line(self) -> int | None:
        return self.violations[0].line if self.violations else None

    def summary(self) -> str:
        """One line: the first violation, and how many more there are."""
        if self.allowed:
            return "allowed"
        first = str(self.violations[0])
        more = len(self.violations) - 1
        return f"{first} (and {more} more)" if more else first

    def details(self) -> list[str]:
        return [str(v) for v in self.violations]


def check_code(code: str, config: GuardConfig | None = None) -> PolicyReport:
    """Check `code` against `config` (the defaults when None); nothing is run."""
    config = config if config is not None else GuardConfig()
    try:
        tree = ast.parse(code, "<code>", "exec")
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None) or 1
        reason = getattr(exc, "msg", None) or str(exc)
        message = f"the code does not parse, so it cannot be checked: {reason}"
        violation = Violation(line=line, col=0, rule=Rule.SYNTAX, name="", message=message)
        return PolicyReport(allowed=False, violations=[violation], config=config)
    checker = _Checker(config)
    checker.visit(tree)
    found = sorted(set(checker.found), key=lambda v: (v.line, v.col, v.rule, v.name))
    return PolicyReport(allowed=not found, violations=found, config=config)


class _Checker(ast.NodeVisitor):
    def __init__(self, config: GuardConfig) -> None:
        self.config = config
        self.found: list[Violation] = []

    def _flag(self, node: ast.AST, rule: Rule, name: str, message: str) -> None:
        line = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0)
        if isinstance(node, ast.Attribute) and node.end_lineno == line and node.end_col_offset:
            col = node.end_col_offset - len(node.attr)  # where the attribute itself is
        self.found.append(Violation(line=line, col=col, rule=rule, name=name, message=message))

    # -- imports ----------------------------------------------------------------------------

    def _check_module(self, node: ast.AST, module: str) -> None:
        if self.config.is_blocked(module):
            self._flag(node, Rule.BLOCKED_MODULE, module, f"import of {module!r} is blocked")
        elif not self.config.is_allowed(module):
            allowed = ", ".join(sorted(self.config.allowed_imports)) or "none"
            message = f"import of {module!r} is not allowed (allowed: {allowed})"
            self._flag(node, Rule.IMPORT_NOT_ALLOWED, module, message)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            message = "relative imports are not allowed"
            self._flag(node, Rule.IMPORT_NOT_ALLOWED, "." * node.level, message)
            return
        module = node.module or ""
        self._check_module(node, module)
        for alias in node.names:  # `from pandas import os` would bind a blocked module
            if alias.name in self.config.blocked_modules:
                message = f"import of {alias.name!r} from {module!r} is blocked"
                self._flag(node, Rule.BLOCKED_MODULE, alias.name, message)

    # -- names and attributes ---------------------------------------------------------------

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self._check_name(node, node.id, called=False)
        elif self.config.is_dunder(node.id):  # binding one, such as __builtins__
            self._flag(node, Rule.DUNDER, node.id, f"the name {node.id!r} is not allowed")

    def _check_name(self, node: ast.AST, name: str, *, called: bool) -> None:
        config = self.config
        if name in config.blocked_modules:
            self._flag(node, Rule.BLOCKED_MODULE, name, f"use of blocked module {name!r}")
        elif name in config.blocked_builtins:
            self._flag(node, Rule.BLOCKED_BUILTIN, name, f"{name}() is not allowed")
        elif config.is_dunder(name):
            self._flag(node, Rule.DUNDER, name, f"the name {name!r} is not allowed")
        elif name in _ATTRIBUTE_FUNCTIONS and config.block_computed_attributes and not called:
            message = f"{name} may only be called directly, with a literal attribute name"
            self._flag(node, Rule.COMPUTED_ATTRIBUTE, name, message)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr, config = node.attr, self.config
        if attr in config.blocked_modules:
            message = f"attribute {attr!r} reaches a blocked module"
            self._flag(node, Rule.BLOCKED_MODULE, attr, message)
        elif config.is_dunder(attr):
            self._flag(node, Rule.DUNDER, attr, f"the attribute {attr!r} is not allowed")
        elif attr in config.blocked_builtins:
            message = f"the attribute {attr!r} names a blocked builtin"
            self._flag(node, Rule.BLOCKED_BUILTIN, attr, message)
        elif attr in config.blocked_attributes or (
            config.block_private_attributes and attr.startswith("_") and not attr.startswith("__")
        ):
            message = f"the attribute {attr!r} is not allowed (internals, eval or unpickling)"
            self._flag(node, Rule.BLOCKED_ATTRIBUTE, attr, message)
        self.generic_visit(node)

    def _check_runtime_format(self, node: ast.Call) -> None:
        """`template.format(...)` on a template built at run time; `allow_pickle=...`."""
        if not self.config.block_runtime_formats:
            return
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _FORMAT_METHODS:
            literal = isinstance(func.value, ast.Constant) and isinstance(func.value.value, str)
            if not literal:
                message = f".{func.attr}() of a template that is not a str literal is not allowed"
                self._flag(func, Rule.RUNTIME_FORMAT, func.attr, message)
        for keyword in node.keywords:
            if keyword.arg == "allow_pickle" and not (
                isinstance(keyword.value, ast.Constant) and keyword.value.value is False
            ):
                message = "allow_pickle= anything but False is not allowed (unpickling)"
                self._flag(keyword.value, Rule.BLOCKED_ATTRIBUTE, "allow_pickle", message)

    def visit_Call(self, node: ast.Call) -> None:
        self._check_runtime_format(node)
        func = node.func
        if isinstance(func, ast.Name) and func.id in _ATTRIBUTE_FUNCTIONS:
            self._check_name(func, func.id, called=True)
            self._check_attribute_call(node, func.id)
            for part in [*node.args, *node.keywords]:
                self.visit(part)
            return
        self.generic_visit(node)

    def _check_attribute_call(self, node: ast.Call, function: str) -> None:
        if not self.config.block_computed_attributes:
            return
        name = node.args[1] if len(node.args) > 1 else None
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            message = f"{function}() with a computed attribute name is not allowed"
            self._flag(node, Rule.COMPUTED_ATTRIBUTE, function, message)
        elif self.config.is_dunder(name.value) or name.value in self.config.blocked_modules:
            message = f"{function}() of the attribute {name.value!r} is not allowed"
            self._flag(node, Rule.DUNDER, name.value, message)

    def visit_Constant(self, node: ast.Constant) -> None:
        """A str that could serve as a str.format template reaching a dunder."""
        if isinstance(node.value, str):
            for match in _FORMAT_DUNDER.finditer(node.value):
                if self.config.is_dunder(match.group(1)):
                    message = f"a format field reaching a dunder ({match.group()}) is not allowed"
                    self._flag(node, Rule.DUNDER, match.group(1), message)

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        """`case object(__class__=c)` reads the attribute by name."""
        for attr in node.kwd_attrs:
            if self.config.is_dunder(attr) or attr in self.config.blocked_modules:
                message = f"a class pattern reading the attribute {attr!r} is not allowed"
                self._flag(node, Rule.DUNDER, attr, message)
        self.generic_visit(node)

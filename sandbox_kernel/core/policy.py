"""`ExecutionPolicy`, the limits and grants of one sandbox, and `load_policy` (TOML).

A policy is a frozen value: every check happens when it is made, and every failure
is a `PolicyValidationError` listing each bad field (never a bare pydantic error).

Must not import anything from the rest of sandbox_kernel except core, nor wasmtime.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path, PurePath
from types import MappingProxyType
from typing import Annotated, Any, Final, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from sandbox_kernel.core.descriptions import described
from sandbox_kernel.core.errors import FieldError, PolicyValidationError

__all__ = ["DEFAULT_ENV", "IMAGE_MOUNT_PATH", "ExecutionPolicy", "load_policy"]

DEFAULT_ENV: Final[Mapping[str, str]] = MappingProxyType({"PYTHONUTF8": "1", "LC_ALL": "C.UTF-8"})
"""Environment every guest gets; a policy's `env` is laid over it, never replaces it."""

IMAGE_MOUNT_PATH: Final = "/usr/local/lib"
"""Where the guest image mounts its own read-only files; no grant may overlap it."""

# Upper-case fragments of host variable names that must never reach a guest.
_SECRET_MARKERS: Final = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
_SECRET_PREFIXES: Final = ("SANDBOX_KERNEL_LLM_",)
_REDACTED: Final = "[redacted]"


def _looks_secret(name: str) -> bool:
    upper = name.upper()
    return any(m in upper for m in _SECRET_MARKERS) or upper.startswith(_SECRET_PREFIXES)


def _not_bool(value: object) -> object:
    # pydantic reads True as 1: a `fuel_budget = true` typo would pass as one instruction.
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


def _finite_number(value: object) -> object:
    value = _not_bool(value)
    # Checked before pydantic's `gt`, which would call NaN "not > 0".
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def _check_host_dir(value: object) -> object:
    # Path("") is ".", which would quietly mount the current directory.
    if isinstance(value, str) and not value:
        raise ValueError("must not be empty")
    if isinstance(value, str | PurePath) and "\0" in str(value):
        raise ValueError("must not contain NUL")
    return value


def _overlaps(a: str, b: str) -> bool:
    """True when the normalised guest paths `a` and `b` are equal or one holds the other."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def _check_guest_path(value: str) -> str:
    """A guest mount point, normalised ("/app/./x/" -> "/app/x")."""
    if "\0" in value:
        raise ValueError("must not contain NUL")
    if not value.startswith("/"):
        raise ValueError("must be an absolute POSIX path (starting with '/')")
    parts = [part for part in value.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ValueError("must not contain '..'")
    if not parts:
        raise ValueError("must not be the root '/'")
    path = "/" + "/".join(parts)
    if _overlaps(path, IMAGE_MOUNT_PATH):
        raise ValueError(
            f"must not be, contain or lie under {IMAGE_MOUNT_PATH}, "
            "where the guest image is mounted read-only"
        )
    return path


def _check_env_name(name: str) -> str:
    if not name:
        raise ValueError("name must not be empty")
    if "=" in name:
        raise ValueError("name must not contain '='")
    if "\0" in name:
        raise ValueError("name must not contain NUL")
    return name


def _check_env_value(value: str) -> str:
    if "\0" in value:
        raise ValueError("value must not contain NUL")
    return value


def _check_not_secret(name: str) -> str:
    if _looks_secret(name):
        raise ValueError(
            "looks like a secret (API key, token, password, credential); "
            "secrets are never copied into the guest"
        )
    return name


_PositiveInt = Annotated[int, BeforeValidator(_not_bool), Field(gt=0)]
_HostDir = Annotated[Path, BeforeValidator(_check_host_dir)]
_GuestPath = Annotated[str, AfterValidator(_check_guest_path)]
_EnvName = Annotated[str, AfterValidator(_check_env_name)]
_EnvValue = Annotated[str, AfterValidator(_check_env_value)]
_InheritedName = Annotated[str, AfterValidator(_check_env_name), AfterValidator(_check_not_secret)]


@contextmanager
def _policy_errors() -> Iterator[None]:
    """Turn pydantic's ValidationError into PolicyValidationError.

    Because `ExecutionPolicy` has its own `__init__`, pydantic's `model_validate` goes
    through it, and wraps the PolicyValidationError raised there (a ValueError) into a
    ValidationError again: unwrap it rather than translate it twice.
    """
    try:
        yield
    except ValidationError as exc:
        for detail in exc.errors():
            inner = detail.get("ctx", {}).get("error")
            if isinstance(inner, PolicyValidationError):
                raise inner from None
        raise PolicyValidationError.from_pydantic(exc) from None


# The fields that bound one execution, as opposed to what the guest sees (folders, environment,
# trust): what a live session's limits may change.
LIMIT_FIELDS: Final = (
    "fuel_budget",
    "memory_bytes",
    "stdout_max_bytes",
    "stderr_max_bytes",
    "timeout_seconds",
    "max_open_files",
    "max_file_bytes",
    "workspace_max_bytes",
    "display_max_bytes",
)


@described
class ExecutionPolicy(BaseModel):
    """What one sandbox may use (fuel, memory, time, output, files) and see (mounts, env).

    Frozen: derive a changed copy with `with_overrides`. Invalid input raises
    `PolicyValidationError`, from the constructor and from every `model_validate*`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    fuel_budget: _PositiveInt = 2_000_000_000
    """Wasm instructions (fuel units) one execution may run before it is stopped."""
    meter_fuel: StrictBool = True
    """Count every instruction against `fuel_budget`: a limit exact to the instruction,
    whatever the machine's speed, at 5-20% of pure Python's speed. False (a persistent session
    only): the wall clock alone stops a runaway cell (`timeout_seconds`, wasmtime's epoch
    deadline, which also ends a loop inside C code), and `fuel_budget` is not enforced."""
    memory_bytes: _PositiveInt = 128_000_000
    """Largest linear memory the guest may grow to."""
    stdout_max_bytes: _PositiveInt = 2_000_000
    """Bytes of stdout kept per execution; the rest is cut with a notice."""
    stderr_max_bytes: _PositiveInt = 1_000_000
    """Bytes of stderr kept per execution; the rest is cut with a notice."""
    timeout_seconds: Annotated[
        float, BeforeValidator(_finite_number), Field(gt=0, allow_inf_nan=False)
    ] = 30.0
    """Wall-clock time one execution may take."""
    mount_host_dir: _HostDir = Path("workspace")
    """Host folder mounted read-write at `guest_mount_path` (the workspace)."""
    guest_mount_path: _GuestPath = "/app"
    """Where the guest sees the workspace."""
    mount_data_dir: _HostDir | None = None
    """Optional host folder mounted read-only at `guest_data_path`."""
    guest_data_path: Annotated[_GuestPath, Field(validate_default=True)] = "/data"
    """Where the guest sees `mount_data_dir`; never the same place as the workspace."""
    env: dict[_EnvName, _EnvValue] = Field(default_factory=lambda: dict(DEFAULT_ENV))
    """Environment of the guest, laid over DEFAULT_ENV (a given env adds and overrides)."""
    inherit_env: tuple[_InheritedName, ...] = ()
    """Host environment variables copied into the guest when set; secrets are refused."""
    max_open_files: _PositiveInt = 256
    """Files and folders the guest may hold open at once."""
    max_file_bytes: _PositiveInt = 256 * 1024 * 1024
    """Largest file the guest may create or extend."""
    workspace_max_bytes: _PositiveInt = 1024 * 1024 * 1024
    """Bytes the guest may add to the workspace in one execution."""
    display_max_bytes: _PositiveInt = 10_000_000
    """Bytes of one rich output item (an image, a table's HTML) shown; a larger one is dropped
    with a notice."""
    trust_outputs: StrictBool = False
    """Show the guest's rich outputs unchanged, scripts included (they then run in the user's
    browser with the user's credentials). Off: the kernel's output firewall sanitizes them."""

    def with_limits_of(self, other: ExecutionPolicy) -> ExecutionPolicy:
        """This policy with `other`'s limits (LIMIT_FIELDS) and its own folders and
        environment: what a live session may take from outside."""
        return self.model_copy(update={name: getattr(other, name) for name in LIMIT_FIELDS})

    def __init__(self, /, **data: Any) -> None:
        with _policy_errors():
            super().__init__(**data)

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Self:
        with _policy_errors():
            return super().model_validate(obj, **kwargs)

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, **kwargs: Any) -> Self:
        with _policy_errors():
            return super().model_validate_json(json_data, **kwargs)

    @classmethod
    def model_validate_strings(cls, obj: Any, **kwargs: Any) -> Self:
        with _policy_errors():
            return super().model_validate_strings(obj, **kwargs)

    @field_validator("env", mode="before")
    @classmethod
    def _merge_default_env(cls, value: object) -> object:
        if isinstance(value, Mapping):
            return {**DEFAULT_ENV, **value}
        return value  # not a mapping: let the type check report it

    @field_validator("inherit_env")
    @classmethod
    def _drop_repeats(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(names))

    @field_validator("guest_data_path")
    @classmethod
    def _apart_from_workspace(cls, value: str, info: ValidationInfo) -> str:
        mount = info.data.get("guest_mount_path")  # absent when it failed its own checks
        if mount is not None and _overlaps(value, mount):
            raise ValueError(f"must not be, contain or lie under guest_mount_path ({mount})")
        return value

    def __hash__(self) -> int:
        # pydantic's frozen hash fails on the env dict; hash its items instead.
        fields = self.__dict__.copy()
        fields["env"] = frozenset(self.env.items())
        return hash((type(self), tuple(fields.items())))

    def with_overrides(self, **changes: Any) -> ExecutionPolicy:
        """A validated copy with `changes` applied; a given `env` is merged over this one's."""
        data = self.model_dump()
        new_env = changes.get("env")
        if isinstance(new_env, Mapping):
            changes["env"] = {**self.env, **new_env}
        data.update(changes)
        return type(self).model_validate(data)

    def guest_env(self, host_env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The guest's environment: `env` plus the whitelisted variables set in `host_env`.

        `host_env` defaults to `os.environ`. An explicit `env` entry wins over an
        inherited one of the same name.
        """
        source: Mapping[str, str] = os.environ if host_env is None else host_env
        merged = {
            name: source[name]
            for name in self.inherit_env
            if name in source and "\0" not in source[name]
        }
        merged.update(self.env)
        return merged

    def snapshot(self) -> dict[str, object]:
        """The policy as JSON-able data for logs; env values with secret-like names hidden."""
        data: dict[str, object] = self.model_dump(mode="json")
        data["env"] = {
            name: _REDACTED if _looks_secret(name) else value for name, value in self.env.items()
        }
        return data


def load_policy(path: str | Path | None = None) -> ExecutionPolicy:
    """Read a policy from a TOML file; the defaults when `path` is None or does not exist.

    The fields are top-level keys, or live in a `[policy]` table (then the file's other
    tables are left for other readers). An `[env]` table is merged over DEFAULT_ENV.
    Relative `mount_host_dir` and `mount_data_dir` are taken from the file's folder.

    Raises:
        PolicyValidationError: the file cannot be read, is not valid TOML, or holds an
            invalid policy; the message names the file.
    """
    if path is None:
        return ExecutionPolicy()
    file = Path(path).expanduser().absolute()
    document = _read_toml(file)
    if document is None:
        return ExecutionPolicy()
    table = _resolve_host_dirs(_policy_table(document, file), file.parent)
    try:
        return ExecutionPolicy.model_validate(table)
    except PolicyValidationError as exc:
        raise exc.with_source(file) from None


def _read_toml(file: Path) -> dict[str, Any] | None:
    """The parsed document, or None when there is no file."""
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise PolicyValidationError([FieldError("", f"cannot read it: {reason}")], file) from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        message = f"not UTF-8 text ({exc.reason} at byte {exc.start})"
        raise PolicyValidationError([FieldError("", message)], file) from None
    except tomllib.TOMLDecodeError as exc:
        # The message ends "(at line L, column C)".
        message = f"TOML syntax error: {exc}"
        raise PolicyValidationError([FieldError("", message)], file) from None


def _policy_table(document: dict[str, Any], file: Path) -> dict[str, Any]:
    """The table holding the policy's fields: `[policy]` when present, else the document."""
    if "policy" not in document:
        return document
    table = document["policy"]
    errors = [] if isinstance(table, dict) else [FieldError("policy", "must be a table", table)]
    # Other tables belong to other readers, but a policy field left outside [policy]
    # would be silently ignored: refuse it.
    errors += [
        FieldError(key, "belongs inside the [policy] table")
        for key in document
        if key in ExecutionPolicy.model_fields
    ]
    if errors:
        raise PolicyValidationError(errors, file)
    return dict(table)


def _resolve_host_dirs(table: dict[str, Any], base: Path) -> dict[str, Any]:
    """A copy of `table` with relative host folders taken from `base` (the file's folder)."""
    resolved = dict(table)
    for key in ("mount_host_dir", "mount_data_dir"):
        value = resolved.get(key)
        if isinstance(value, str) and value and "\0" not in value:
            folder = Path(value).expanduser()
            resolved[key] = folder if folder.is_absolute() else base / folder
    return resolved

"""REPLConfig (how a session is set up) and CodeExecution (what one execution did).

Must not import: wasmtime, sandbox_kernel.host, anything Jupyter.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    Base64Bytes,
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    model_validator,
)

from sandbox_kernel.core.policy import ExecutionPolicy
from sandbox_kernel.core.results import WheelRecord
from sandbox_kernel.core.usage import LLMUsage

__all__ = [
    "COMM_TYPES",
    "CodeExecution",
    "CommMessage",
    "DisplayMessage",
    "ExecutionStatus",
    "REPLConfig",
    "WarmSetup",
    "limited",
]

LineCallback = Callable[[str], None]


def _index_url(value: str) -> str:
    if not value.startswith(("https://", "http://", "file:///")) or any(c.isspace() for c in value):
        raise ValueError("must be an http(s):// or file:/// URL with no spaces")
    return value


HttpOrFileURL = Annotated[str, AfterValidator(_index_url)]


class ExecutionStatus(StrEnum):
    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    OUT_OF_FUEL = "out_of_fuel"
    MEMORY = "memory"
    CANCELLED = "cancelled"


class DisplayMessage(BaseModel):
    """A display from the guest: its bundle, and for IPython's display_id the transient part
    ({"display_id": ...}) and whether it updates an earlier display with that id."""

    model_config = ConfigDict(frozen=True)

    data: dict[str, Any]
    metadata: dict[str, Any] = Field(default_factory=dict)
    transient: dict[str, Any] = Field(default_factory=dict)
    update: bool = False


CommType = Literal["comm_open", "comm_msg", "comm_close"]
COMM_TYPES: tuple[CommType, ...] = get_args(CommType)


class CommMessage(BaseModel):
    """A guest comm's message for the frontend: a comm_open (content has target_name),
    comm_msg or comm_close, its content ({"comm_id", "data", ...}) and binary buffers."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    msg_type: CommType
    content: dict[str, Any]
    metadata: dict[str, Any] = Field(default_factory=dict)
    buffers: list[Base64Bytes] = Field(default_factory=list)


class WarmSetup(BaseModel):
    """Our own code run once after the warm-start imports, whose result is kept in an image of
    its own (the runner's dataset tables, loaded): later sessions with the same setup start
    with it done. Never user code: an image is shared by every session that names its key."""

    model_config = ConfigDict(frozen=True)

    source: str
    key: str  # a digest of what the source reads beyond itself (the data files' contents)
    label: str  # the family of images: saving a new key removes the label's older images


class REPLConfig(BaseModel):
    """A persistent session's settings. Every limit of an execution (fuel, wall clock, memory,
    output) is the policy's: `policy` is their one owner, and `ReplSandbox.set_limits` changes
    a live session's.

    Callbacks run on host threads while the cell runs (stream callbacks on whichever thread
    the guest's output arrives, bridge callbacks on a helper thread that sees the caller's
    context variables); they must not call back into the same session. One that raises is
    reported to the guest as an exception (bridges) or detached (streams), never allowed to
    kill the session or make `execute()` raise.
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    policy: ExecutionPolicy = Field(default_factory=ExecutionPolicy)

    # The specification's names (seeds/004: `REPLConfig.timeout` in milliseconds,
    # `max_output_length`) and the earlier `timeout_ms`: inputs that set the policy's limits,
    # never a second owner. Read back, each gives the policy's value.
    @model_validator(mode="before")
    @classmethod
    def _spec_names(cls, data: Any) -> Any:
        if isinstance(data, dict) and not _SPEC_NAMES.isdisjoint(data):
            data = spec_names_to_policy(data)
        return data

    @property
    def timeout(self) -> int:
        """The wall clock per execution in milliseconds (the specification's name): the
        policy's `timeout_seconds`."""
        return round(self.policy.timeout_seconds * 1000)

    @timeout.setter
    def timeout(self, milliseconds: float) -> None:
        seconds = _milliseconds("timeout", milliseconds) / 1000
        self.policy = limited(self, timeout_seconds=seconds).policy

    @property
    def timeout_ms(self) -> int:
        """As `timeout` (the name of earlier releases)."""
        return self.timeout

    @timeout_ms.setter
    def timeout_ms(self, milliseconds: float) -> None:
        self.timeout = milliseconds

    @property
    def max_output_length(self) -> int:
        """What one execution's stdout keeps (the specification's name): the policy's
        `stdout_max_bytes` (stderr's is set with it)."""
        return self.policy.stdout_max_bytes

    @max_output_length.setter
    def max_output_length(self, length: int) -> None:
        caps = dict.fromkeys(("stdout_max_bytes", "stderr_max_bytes"), _output_length(length))
        self.policy = ExecutionPolicy.model_validate({**self.policy.model_dump(), **caps})

    # "auto": the daemon when one answers at `daemon_socket`, else "wasm"; never an unsafe
    # backend ("native" and "pyodide" are no sandbox: they run only when named).
    backend: Literal["auto", "wasm", "daemon", "native", "pyodide"] = "auto"
    daemon_socket: Path | None = None  # default ~/.rlm/daemon.sock
    # Pyodide's files: a folder (or a list whose first entry is used); default the pinned
    # package `sandbox-kernel pyodide install` put in the cache folder.
    pyodide_index_url: str | list[str] | None = None
    workspace: Path | None = None  # default: the policy's mount_host_dir
    warm_start_modules: tuple[str, ...] = ()  # imported once, kept in a reusable image
    warm_setup: WarmSetup | None = None  # run once after them, kept in an image of its own
    # False: a session used for one run and then destroyed (the runner's): no rollback image
    # is taken after its cells, and a cell that traps returns it to the state it started in.
    rollback_images: bool = True
    interrupt_grace_seconds: float = Field(default=1.0, gt=0)
    max_bridge_calls: PositiveInt = 1_000  # door requests per execution
    max_bridge_bytes: PositiveInt = 256 * 1024 * 1024  # request + answer bytes per execution
    llm_concurrency: PositiveInt = 8  # llm_query_batched's parallel calls
    on_stdout: LineCallback | None = None
    on_stderr: LineCallback | None = None
    # False: on_stdout and on_stderr hear whole lines. True: whatever output has arrived (a
    # progress bar's '\r' updates, print(..., end='')), as a frontend that batches it wants.
    stream_partial_lines: bool = False
    on_llm_query: Callable[[str], str] | None = None
    on_rlm_query: Callable[[str, Any], str] | None = None
    on_input: Callable[[str, bool], str] | None = None  # (prompt, password) -> line
    on_display: Callable[[dict[str, Any], dict[str, Any]], None] | None = None
    # Displays with their display_id and update flag (update_display); when set, used instead
    # of on_display. on_clear_output(wait) for IPython's clear_output.
    on_display_message: Callable[[DisplayMessage], None] | None = None
    # on_result(data, metadata): an IPython session's cell result, when its display hook gives
    # it (before the figures the cell shows after); CodeExecution.result carries it too.
    on_result: Callable[[dict[str, Any], dict[str, Any]], None] | None = None
    on_clear_output: Callable[[bool], None] | None = None
    # Comms (ipywidgets): on_comm hears each guest comm's message for the frontend (None:
    # dropped); on_parent answers which request the guest is answering ({"header": {...}},
    # as a kernel's get_parent()), for the Output widget.
    on_comm: Callable[[CommMessage], None] | None = None
    on_parent: Callable[[], dict[str, Any]] | None = None
    # Cells run through IPython inside the guest (magics, `obj?`, top-level await, Out/_N):
    # the kernel's sessions. Needs the guest library (host/guest_library.py).
    ipython: bool = False
    # %pip install (IPython sessions): pure-Python wheels the host's pip downloads from its
    # package index, unpacked by the guest into <workspace>/.packages. Off by default: the
    # host fetches what the guest names. `max_package_bytes` caps one %pip install;
    # `on_packages` hears of each set of wheels fetched (the kernel logs their SHA-256).
    # `package_index_url` is the one index pip reads (no pip configuration of the host's is).
    packages: bool = False
    max_package_bytes: PositiveInt = 100 * 1024 * 1024
    package_index_url: HttpOrFileURL = "https://pypi.org/simple/"
    on_packages: Callable[[list[WheelRecord]], None] | None = None
    # A host folder mounted read-only at /notebook and made the working folder, so a
    # notebook's relative paths (pd.read_csv("data/x.csv")) read its own folder's files;
    # writes go to the workspace (/app). None: the working folder is the workspace.
    notebook_dir: Path | None = None
    # True: notebook_dir is shown read-write as a copy-on-write overlay (host/overlay.py): the
    # guest's writes, renames and deletes land in <notebook_dir>/.sandbox-kernel/layer, and
    # the user's own files are never changed.
    notebook_overlay: bool = False
    # The running total of the session's model usage (LLMService.configure sets it): each
    # execution reports the difference as CodeExecution.llm.
    llm_usage: Callable[[], LLMUsage] | None = None


_SPEC_NAMES = frozenset({"timeout", "timeout_ms", "max_output_length"})


def spec_names_to_policy(data: dict[str, Any]) -> dict[str, Any]:
    """REPLConfig's input with the specification's names (`timeout` and `timeout_ms` in
    milliseconds, `max_output_length`) moved into its policy: `timeout_seconds`, and
    `stdout_max_bytes` and `stderr_max_bytes`. A name set twice to different values (`timeout`
    and `timeout_ms`, or either and a policy whose own field says otherwise) is a ValueError
    naming both. Also what the daemon's `open` request is read with."""
    data = dict(data)
    updates: dict[str, Any] = {}
    given = {name: data.pop(name) for name in sorted(_SPEC_NAMES) if name in data}
    milliseconds = {name: given[name] for name in ("timeout", "timeout_ms") if name in given}
    if len({repr(value) for value in milliseconds.values()}) > 1:
        raise ValueError(f"timeout and timeout_ms disagree: {milliseconds}; set one")
    for name, value in milliseconds.items():
        updates["timeout_seconds"] = _milliseconds(name, value) / 1000
    if "max_output_length" in given:
        length = _output_length(given["max_output_length"])
        updates["stdout_max_bytes"] = updates["stderr_max_bytes"] = length
    policy = data.get("policy")
    if isinstance(policy, ExecutionPolicy):
        explicit = policy.model_fields_set
        current = policy.model_dump()
    elif isinstance(policy, dict):
        explicit, current = set(policy), dict(policy)
    elif policy is None:
        explicit, current = set(), {}
    else:  # not a policy: pydantic says so
        return data
    for field, value in updates.items():
        if field in explicit and current[field] != value:
            names = ", ".join(sorted(given))
            raise ValueError(
                f"{names} and policy.{field} disagree ({current[field]!r} != {value!r}); "
                "set the limit in one place"
            )
    if isinstance(policy, ExecutionPolicy):  # as limited() changes one: validated again
        data["policy"] = ExecutionPolicy.model_validate({**current, **updates})
    else:
        data["policy"] = {**current, **updates}
    return data


def _output_length(length: Any) -> int:
    if isinstance(length, bool) or not isinstance(length, int) or length <= 0:
        raise ValueError(f"max_output_length must be a positive int, not {length!r}")
    return length


def _milliseconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{name} is in milliseconds: a positive number, not {value!r}")
    if value != value or value == float("inf"):
        raise ValueError(f"{name} must be finite, not {value!r}")
    return float(value)


def limited(
    config: REPLConfig, policy: ExecutionPolicy | None = None, timeout_seconds: float | None = None
) -> REPLConfig:
    """`config` with a new policy, or only its wall clock changed: what every backend's
    set_limits() applies. The policy stays the one owner of the limits."""
    policy = policy if policy is not None else config.policy
    if timeout_seconds is not None:
        policy = ExecutionPolicy.model_validate(
            {**policy.model_dump(), "timeout_seconds": timeout_seconds}
        )
    return config.model_copy(update={"policy": policy})


class CodeExecution(BaseModel):
    """One execution's outcome. A guest failure is data here, never a host exception."""

    model_config = ConfigDict(frozen=True)

    status: ExecutionStatus
    stdout: str = ""
    stderr: str = ""
    error: str | None = None  # "ZeroDivisionError: division by zero"; None when ok
    ename: str | None = None
    evalue: str | None = None
    traceback: list[str] = Field(default_factory=list)
    error_shown: bool = False  # the error is on stderr already (a UsageError, as IPython shows it)
    result: dict[str, Any] | None = None  # the last expression's MIME bundle
    result_metadata: dict[str, Any] = Field(default_factory=dict)  # the bundle's metadata
    displays: list[dict[str, Any]] = Field(default_factory=list)  # {"data", "metadata"}
    payload: list[dict[str, Any]] = Field(default_factory=list)  # IPython's: `obj?` pages
    duration_ms: float = 0.0
    fuel_consumed: int = 0
    truncated: bool = False
    rolled_back: bool = False
    execution_count: int = 0
    llm: LLMUsage | None = None  # model calls made by this execution (when a model is set)

    @property
    def ok(self) -> bool:
        return self.status is ExecutionStatus.OK

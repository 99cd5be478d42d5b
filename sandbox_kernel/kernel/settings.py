"""The kernel's configuration, read in one place: file < environment < explicit argument.

    SANDBOX_KERNEL_POLICY     a policy TOML; default ~/.config/sandbox-kernel/policy.toml
                              (XDG_CONFIG_HOME), else built-in defaults. Never a file beside
                              the notebook (a cloned folder's, or one a cell wrote) and never
                              one the guest can write: a file under the workspace is refused
    SANDBOX_KERNEL_WORKSPACE  the host folder mounted at /app; default ./workspace (Jupyter
                              starts a kernel in the notebook's folder), which must then be a
                              folder of the user's own: a link there (a cloned folder's
                              `workspace -> ~`) is refused, never followed
    SANDBOX_KERNEL_RUN_LOG    the run log; default one file per workspace in Jupyter's data
                              folder (never inside the workspace, which the guest can write)
    SANDBOX_KERNEL_WARM_MODULES  modules pre-imported in the warm-start image, comma-separated
                              (default numpy,pandas; empty for none)
    SANDBOX_KERNEL_LLM_*      the model behind llm_query and rlm_query (see llm/config.py);
                              also an [llm] table in the policy file
    SANDBOX_KERNEL_DATASETS   the dataset registry %dataset reads; default
                              ~/.config/sandbox-kernel/datasets.toml (XDG_CONFIG_HOME). Never
                              one beside the notebook: a registry names host folders to show
    SANDBOX_KERNEL_GUARDED    anything but empty, 0, false, no or off turns the guarded mode on
                              (the sandbox-python-guarded kernel spec sets 1)
    SANDBOX_KERNEL_GUARD      the guarded mode's allow and block lists (a TOML file)
    SANDBOX_KERNEL_PIP        %pip install of pure-Python wheels: on unless 0, false, no or
                              off (always off in the guarded mode)
    SANDBOX_KERNEL_PIP_INDEX_URL  the one package index %pip reads (default PyPI); no pip
                              configuration of the host's is read
    SANDBOX_KERNEL_FILES_NOTE  the line after a cell that wrote files beside the notebook: on
                              unless 0, false, no or off (nbval compares a cell's outputs with
                              ipykernel's, which has no such line)
    SANDBOX_KERNEL_NOTEBOOK_FOLDER  how the guest sees the kernel's starting folder (Jupyter
                              starts a kernel in the notebook's), at /notebook, its working
                              folder: overlay (the default) reads every file there and writes
                              to a layer beside them, never changing the user's files;
                              read-only (or 1, true, yes, on); off (the working folder is the
                              workspace, /app). Always off when the workspace is that folder
                              or holds it (it is the guest's to write already)

The kernel's defaults suit notebooks (importing pandas within the fuel budget, room for
DataFrames, numpy and pandas pre-imported); the library keeps the seeds' defaults.

Must not import: anything from ipykernel (this module is plain configuration).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, TypedDict

from pydantic import BaseModel, ConfigDict

from sandbox_kernel.core.errors import FieldError, PolicyValidationError
from sandbox_kernel.core.notebook_folder import layer_of
from sandbox_kernel.core.policy import ExecutionPolicy, load_policy
from sandbox_kernel.llm.config import LLMSettings
from sandbox_kernel.llm.errors import LLMConfigError
from sandbox_kernel.repl.models import REPLConfig

__all__ = ["NOTEBOOK_DEFAULTS", "KernelSettings", "guest_can_write"]

# Where a policy file sets nothing, the kernel uses these instead of the library's defaults.
# Fuel follows the clock: about 1e10 guest instructions a second on these machines, so a cell
# that may run 600 s may also spend what 600 s of work costs (the old 1e11 stopped a 27 s
# scikit-learn TSNE cell after 10 s). A policy file that sets only timeout_seconds gets fuel
# for that time; one that sets fuel_budget keeps it.
FUEL_PER_SECOND = 10_000_000_000
NOTEBOOK_TIMEOUT_SECONDS = 600.0
# A file may be as large as one cell may write (the workspace quota), so that data work (an
# np.memmap or a saved array of a few hundred MB) meets the memory limit first, not the file's.
NOTEBOOK_DEFAULTS: dict[str, object] = {
    "fuel_budget": int(NOTEBOOK_TIMEOUT_SECONDS * FUEL_PER_SECOND),
    "memory_bytes": 1_000_000_000,
    "timeout_seconds": NOTEBOOK_TIMEOUT_SECONDS,
    "max_file_bytes": 1024 * 1024 * 1024,
}
WARM_MODULES = ("numpy", "pandas")


class KernelSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    policy: ExecutionPolicy
    policy_source: Path | None
    workspace: Path
    run_log: Path
    warm_start_modules: tuple[str, ...] = WARM_MODULES
    llm: LLMSettings = LLMSettings()
    llm_error: str | None = None  # why the LLM settings could not be used (shown by llm_query)
    # Data analysis (data_magics.py): %dataset's registry, the guarded mode and its lists.
    datasets: Path = Path("datasets/datasets.toml")
    guarded: bool = False
    guard_file: Path | None = None
    packages: bool = True  # %pip install (never in the guarded mode)
    files_note: bool = True  # the line after a cell that wrote beside the notebook (issue 52)
    package_index_url: str | None = None  # None: REPLConfig's default, PyPI
    notebook_dir: Path | None = None  # shown at /notebook, the working folder
    notebook_overlay: bool = False  # ... as a copy-on-write overlay, else read-only

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, cwd: Path | None = None
    ) -> KernelSettings:
        env = os.environ if environ is None else environ
        here = cwd if cwd is not None else Path.cwd()
        source = _policy_file(env)
        explicit = env.get("SANDBOX_KERNEL_WORKSPACE")
        workspace = Path(explicit) if explicit else _own_folder(here / "workspace")
        workspace = workspace.expanduser().resolve()
        _refuse_guest_writable(source, workspace, "policy files")
        policy = _notebook_policy(source).with_overrides(mount_host_dir=workspace)
        run_log = Path(env.get("SANDBOX_KERNEL_RUN_LOG") or _run_log_for(policy.mount_host_dir))
        data = _data_settings(env, here)
        _refuse_guest_writable(data["guard_file"], workspace, "the guard's lists")
        if data["guarded"]:  # the guarded spec never trusts outputs, whatever a file says
            policy = policy.with_overrides(trust_outputs=False)
        modules = env.get("SANDBOX_KERNEL_WARM_MODULES")
        warm = tuple(m.strip() for m in modules.split(",") if m.strip()) if modules else None
        llm, llm_error = LLMSettings(), None
        try:
            llm = LLMSettings.load(source, env)
        except LLMConfigError as exc:  # the kernel still starts; llm_query says what is wrong
            llm_error = str(exc)
        pip = _switch(env, "SANDBOX_KERNEL_PIP", default=True) and not data["guarded"]
        mode = _notebook_mode(env)
        if here.resolve().is_relative_to(workspace):
            mode = "off"  # the folder is the workspace's already, read-write at /app
        notebook = here.resolve() if mode != "off" else None
        if mode == "overlay":  # the layer is the guest's to write, as the workspace is
            _refuse_guest_writable(source, layer_of(here), "policy files")
            _refuse_guest_writable(data["guard_file"], layer_of(here), "the guard's lists")
        return cls(
            packages=pip,
            files_note=_switch(env, "SANDBOX_KERNEL_FILES_NOTE", default=True),
            package_index_url=env.get("SANDBOX_KERNEL_PIP_INDEX_URL") or None,
            notebook_dir=notebook,
            notebook_overlay=mode == "overlay",
            policy=policy,
            policy_source=source,
            workspace=policy.mount_host_dir,
            run_log=run_log,
            warm_start_modules=WARM_MODULES if warm is None else warm,
            llm=llm,
            llm_error=llm_error,
            **data,
        )

    def repl_config(self, **callbacks: object) -> REPLConfig:
        if self.package_index_url is not None:
            callbacks["package_index_url"] = self.package_index_url
        return REPLConfig(
            policy=self.policy,
            workspace=self.workspace,
            warm_start_modules=self.warm_start_modules,
            ipython=True,  # notebooks written for ipykernel: magics, `obj?`, await, Out
            stream_partial_lines=True,  # progress bars update while the cell runs
            packages=self.packages,
            notebook_dir=self.notebook_dir,
            notebook_overlay=self.notebook_overlay,
            **callbacks,  # type: ignore[arg-type]
        )


class _DataSettings(TypedDict):
    datasets: Path
    guarded: bool
    guard_file: Path | None


def _data_settings(env: Mapping[str, str], here: Path) -> _DataSettings:
    """%dataset's registry and the guarded mode. An unclear SANDBOX_KERNEL_GUARDED value turns
    the mode on: a typo must not quietly drop a check someone asked for."""
    guard_file = env.get("SANDBOX_KERNEL_GUARD")
    return {
        "datasets": Path(env.get("SANDBOX_KERNEL_DATASETS") or _config_dir(env) / "datasets.toml"),
        "guarded": _switch(env, "SANDBOX_KERNEL_GUARDED", default=False),
        "guard_file": Path(guard_file).expanduser() if guard_file else None,
    }


_YES = ("1", "true", "yes", "on")


def _switch(env: Mapping[str, str], name: str, *, default: bool) -> bool:
    """An on/off variable: unset or empty is `default`; only 0, false, no, off turn it off."""
    value = env.get(name, "").strip().lower()
    if not value:
        return default
    return value not in ("0", "false", "no", "off")


def _run_log_for(workspace: Path) -> Path:
    """The workspace's run log, kept OUT of the workspace (the guest writes there): in
    Jupyter's data folder, one file per workspace path."""
    from jupyter_core.paths import jupyter_data_dir

    key = hashlib.sha256(str(workspace).encode()).hexdigest()[:16]
    return Path(jupyter_data_dir()) / "sandbox-kernel" / "runs" / f"{workspace.name}-{key}.jsonl"


def _policy_file(env: Mapping[str, str]) -> Path | None:
    """The policy file the user named (SANDBOX_KERNEL_POLICY) or keeps in their configuration
    folder. Never one found beside the notebook: a cloned folder may ship one, and a cell whose
    workspace is that folder could write one."""
    explicit = env.get("SANDBOX_KERNEL_POLICY")
    if explicit:
        return Path(explicit).expanduser()  # load_policy: a missing file gives the defaults
    user = _config_dir(env) / "policy.toml"
    return user if user.is_file() else None


def _config_dir(env: Mapping[str, str]) -> Path:
    """The user's configuration folder for the kernel (XDG_CONFIG_HOME, else ~/.config)."""
    xdg = env.get("XDG_CONFIG_HOME")
    return (Path(xdg) if xdg else Path.home() / ".config") / "sandbox-kernel"


def _own_folder(path: Path) -> Path:
    """`path` (the default workspace beside the notebook) if it is missing or a folder of the
    user's own. A link there is refused, never followed: a cloned folder's `workspace -> ~`
    or `-> .../site-packages` would give the guest those folders to write (a `.pth` file
    there runs at the host's next Python start)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return path
    if stat.S_ISLNK(info.st_mode):
        kind = f"a link to {os.readlink(path)}"
    elif not stat.S_ISDIR(info.st_mode):
        kind = "not a folder"
    elif info.st_uid != os.geteuid():
        kind = f"a folder of uid {info.st_uid}, not yours"
    else:
        return path
    message = (
        f"{path} is {kind}: the workspace beside a notebook must be a folder of your own "
        "(remove it, or name a workspace with SANDBOX_KERNEL_WORKSPACE)"
    )
    raise PolicyValidationError([FieldError("", message)])


def _notebook_mode(env: Mapping[str, str]) -> Literal["overlay", "read-only", "off"]:
    value = env.get("SANDBOX_KERNEL_NOTEBOOK_FOLDER", "").strip().lower()
    if value in ("", "overlay"):
        return "overlay"
    if value in ("read-only", *_YES):
        return "read-only"
    if value in ("off", "0", "false", "no"):
        return "off"
    message = f"SANDBOX_KERNEL_NOTEBOOK_FOLDER={value!r}: expected overlay, read-only or off"
    raise PolicyValidationError([FieldError("", message)])


def guest_can_write(path: Path, workspace: Path) -> bool:
    """Whether `path` (links followed) lies in the workspace, which the guest writes: a file
    there may never configure the host (a policy, a dataset registry, the guard's lists)."""
    return path.expanduser().resolve().is_relative_to(workspace.resolve())


def _refuse_guest_writable(source: Path | None, workspace: Path, what: str) -> None:
    """A configuration file the guest could have written would let a cell configure the next
    session's sandbox: refused, the kernel does not start."""
    if source is not None and guest_can_write(source, workspace):
        message = (
            f"lies inside the workspace {workspace}, which the sandboxed code can write: "
            f"keep {what} outside it"
        )
        raise PolicyValidationError([FieldError("", message)], source=source)


def _notebook_policy(source: Path | None) -> ExecutionPolicy:
    """The file's policy, with the notebook defaults for every limit the file does not set."""
    if source is None or not source.is_file():
        return ExecutionPolicy(**NOTEBOOK_DEFAULTS)
    from_file = load_policy(source)
    given = from_file.model_fields_set  # what the file itself sets
    changes = {key: value for key, value in NOTEBOOK_DEFAULTS.items() if key not in given}
    if "fuel_budget" in changes and "timeout_seconds" in given:  # fuel for the file's time
        changes["fuel_budget"] = int(from_file.timeout_seconds * FUEL_PER_SECOND)
    return from_file.with_overrides(**changes)

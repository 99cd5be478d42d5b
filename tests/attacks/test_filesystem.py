"""Attacks on the filesystem boundary: host paths, `..`, planted symlinks, read-only mounts, open
files, sparse files and the write budget.

Each attack must fail clearly (an OSError in the guest, or the right LimitKind), and leave a
healthy host: the same sandbox runs `print("ok")` afterwards and no host file changed.
"""

from __future__ import annotations

import os
import tempfile
import textwrap
from pathlib import Path

import pytest

from sandbox_kernel import ExecutionPolicy, LimitKind, PythonSandbox
from sandbox_kernel.host.artifacts import python_image
from tests.attacks.conftest import SECRET_TEXT, HostGuard, open_descriptors

DENIED = ("PermissionError", "FileNotFoundError", "NotADirectoryError")


def _denied(stderr: str) -> bool:
    return any(f"{name}: [Errno" in stderr for name in DENIED)


def _sandbox(workspace: Path, **policy: object) -> PythonSandbox:
    return PythonSandbox(ExecutionPolicy(timeout_seconds=10, **policy), workspace)


# --- host paths and `..` ------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "/etc/shadow",
        "/proc/self/environ",
        "/proc/self/mem",
        "/root/.ssh/id_rsa",
        "/home",
        "HOST_SECRET",
    ],
    ids=["passwd", "shadow", "environ", "mem", "ssh-key", "home", "absolute-host-path"],
)
def test_host_paths_are_not_readable(py: PythonSandbox, host: HostGuard, path: str) -> None:
    path = str(host.secret) if path == "HOST_SECRET" else path
    result = py.execute(f"print(open({path!r}).read())")
    assert result.success is False
    assert _denied(result.stderr), result.stderr
    assert SECRET_TEXT.strip() not in result.stdout
    host.assert_healthy(py)


@pytest.mark.parametrize(
    "code",
    [
        "print(open('/app/../../etc/passwd').read())",
        "print(os.listdir('/app/..'))",
        "print(os.listdir('/app/../..'))",
        "print(open('/app/../host/secret.txt').read())",
        "print(open('/tmp/../app/../host/secret.txt').read())",
        "print(open('/usr/local/lib/../../../etc/passwd').read())",
        "print(os.stat('/app/../host/secret.txt'))",
        "os.chdir('/app'); print(open('../host/secret.txt').read())",
        "os.link('/app/../host/secret.txt', '/app/hard')",
        "os.rename('/app/../host/secret.txt', '/app/stolen')",
        "os.remove('/app/../host/secret.txt')",
        "open('/app/../host/planted.txt', 'w').write('x')",
    ],
    ids=[
        "open-etc",
        "listdir-parent",
        "listdir-grandparent",
        "open-sibling",
        "via-tmp",
        "via-image",
        "stat",
        "relative-after-chdir",
        "hard-link",
        "rename-in",
        "remove",
        "write-beside",
    ],
)
def test_dotdot_cannot_leave_app(py: PythonSandbox, host: HostGuard, code: str) -> None:
    result = py.execute("import os\n" + code)
    assert result.success is False
    assert _denied(result.stderr), result.stderr
    assert "secret" not in result.stdout.lower()
    assert result.files_created == []
    host.assert_healthy(py)


# --- planted symlinks ---------------------------------------------------------------------

_SYMLINK_ATTACK = textwrap.dedent(
    """
    import os
    try:
        os.symlink({target!r}, "/app/escape")
        print("PLANTED")
    except OSError as exc:
        print("NOT-PLANTED", type(exc).__name__)
    attempts = {{
        "read": lambda: open({through!r}).read(),
        "list": lambda: os.listdir("/app/escape"),
        "stat": lambda: os.stat({through!r}).st_size,
        "write": lambda: open("/app/escape/planted.txt", "w").write("x"),
    }}
    for name, attempt in attempts.items():
        try:
            print("LEAK", name, attempt())
        except OSError as exc:
            print("DENIED", name, type(exc).__name__)
    """
)


@pytest.mark.parametrize(
    "target",
    ["../../..", "../host", "../host/secret.txt", "ABSOLUTE"],
    ids=["far-up", "host-folder", "host-file", "absolute"],
)
def test_a_planted_symlink_is_followed_by_neither_guest_nor_host(
    py: PythonSandbox, host: HostGuard, workspace: Path, target: str
) -> None:
    if target == "ABSOLUTE":
        target = str(host.folder)
    pointed = (workspace / target).resolve() if not os.path.isabs(target) else Path(target)
    rel = os.path.relpath(host.secret, pointed) if pointed.is_dir() else ""
    through = "/app/escape" + (f"/{rel}" if rel else "")
    result = py.execute(_SYMLINK_ATTACK.format(target=target, through=through))
    lines = result.stdout.splitlines()
    assert not any(line.startswith("LEAK") for line in lines), result.stdout
    assert sum(line.startswith("DENIED") for line in lines) == 4, result.stdout + result.stderr
    assert SECRET_TEXT.strip() not in result.stdout
    if not os.path.isabs(target):  # wasmtime refuses absolute targets; relative ones get made
        assert lines[0] == "PLANTED", result.stdout + result.stderr
    # The host's own listing reports the link itself and never walks into it.
    if lines[0] == "PLANTED":
        assert result.files_created == ["escape"]
        assert (workspace / "escape").is_symlink()
    assert not any(path.startswith("escape/") for path in result.files_created)
    host.assert_healthy(py)
    again = py.execute("pass")
    assert again.files_created == [] and again.files_modified == []


@pytest.mark.parametrize(
    "plant",
    [
        "os.symlink('../host/secret.txt', '/app/user_code.py')",
        "os.symlink('../host/new.py', '/app/user_code.py')",
        "os.mkdir('/app/user_code.py')",
    ],
    ids=["link-to-host-file", "dangling-link", "directory"],
)
def test_a_guest_cannot_booby_trap_the_code_file(
    py: PythonSandbox, host: HostGuard, plant: str
) -> None:
    planted = py.execute(f"import os\nos.remove('/app/user_code.py')\n{plant}\nprint('planted')")
    assert planted.stdout == "planted\n", planted.stderr
    try:
        next_run = py.execute('print("ok")')
        outcome = f"next run: success={next_run.success} stderr={next_run.stderr[-200:]!r}"
    except OSError as exc:
        next_run, outcome = None, f"next run raised {type(exc).__name__}: {exc}"
    secret_kept = host.secret.read_text() == SECRET_TEXT
    nothing_new = not (host.folder / "new.py").exists()
    assert secret_kept and nothing_new and next_run is not None and next_run.success, (
        "BaseSandbox._run_file writes user_code.py with Path.write_text, which "
        "follows a symlink the previous guest planted there (writing a host file outside the "
        "workspace) and fails on a directory planted there. "
        f"host secret kept: {secret_kept}; no host file created: {nothing_new}; {outcome}"
    )
    host.assert_healthy(py)


def test_the_scratch_tmp_cleanup_does_not_follow_a_planted_symlink(
    py: PythonSandbox, host: HostGuard
) -> None:
    # The guest's /tmp is a fresh host folder under the system temp dir, removed after the run.
    scratch_parent = Path(tempfile.gettempdir()).resolve()
    target = os.path.join("..", os.path.relpath(host.folder, scratch_parent))
    result = py.execute(f"import os\nos.symlink({target!r}, '/tmp/escape')\nprint('planted')")
    assert result.stdout == "planted\n", result.stderr
    host.assert_healthy(py)


# --- read-only mounts ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "open('/data/new.txt', 'w').write('x')",
        "open('/data/file.txt', 'a').write('x')",
        "open('/data/file.txt', 'r+').write('x')",
        "os.remove('/data/file.txt')",
        "os.mkdir('/data/folder')",
        "os.rename('/data/file.txt', '/data/moved.txt')",
        "os.rename('/data/file.txt', '/app/moved.txt')",
        "os.symlink('/app', '/data/link')",
        "os.truncate('/data/file.txt', 0)",
    ],
    ids=[
        "create",
        "append",
        "overwrite",
        "remove",
        "mkdir",
        "rename",
        "move-out",
        "link",
        "truncate",
    ],
)
def test_the_data_mount_is_read_only(
    workspace: Path, tmp_path: Path, host: HostGuard, code: str
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "file.txt").write_text("original\n")
    sandbox = _sandbox(workspace, mount_data_dir=data)
    result = sandbox.execute(f"import os\nprint(open('/data/file.txt').read(), end='')\n{code}")
    assert result.stdout == "original\n"
    assert result.success is False
    assert "Error: [Errno" in result.stderr, result.stderr
    assert sorted(p.name for p in data.iterdir()) == ["file.txt"]
    assert (data / "file.txt").read_text() == "original\n"
    assert result.files_created == []
    host.assert_healthy(sandbox)


@pytest.mark.parametrize(
    "code",
    [
        "open('/usr/local/lib/new.py', 'w').write('x')",
        "open('/usr/local/lib/' + ZIP, 'ab').write(b'x')",
        "os.remove('/usr/local/lib/' + ZIP)",
        "os.rename('/usr/local/lib/' + ZIP, '/app/stolen.zip')",
        "os.mkdir('/usr/local/lib/site-packages')",
    ],
    ids=["create", "append-zip", "remove-zip", "move-zip-out", "mkdir"],
)
def test_the_image_folder_is_read_only(py: PythonSandbox, host: HostGuard, code: str) -> None:
    image = python_image()
    lib = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in image.lib_dir.iterdir())
    result = py.execute(f"import os\nZIP = {image.zip_name!r}\n{code}")
    assert result.success is False
    assert "Error: [Errno" in result.stderr, result.stderr
    after = sorted(
        (p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in image.lib_dir.iterdir()
    )
    assert after == lib
    host.assert_healthy(py)


_PROBE_PATHS = [
    "/", "/etc", "/home", "/root", "/proc", "/sys", "/dev", "/usr", "/usr/local", "/usr/local/bin",
    "/var", "/bin", "/lib", "/opt", "/mnt", "/app", "/tmp", "/usr/local/lib", "/data",
]  # fmt: skip
_LISTING = f"""
import os
for path in {_PROBE_PATHS!r}:
    try:
        os.listdir(path)
        print("SEEN", path)
    except OSError as exc:
        print("HIDDEN", path, type(exc).__name__)
"""


@pytest.mark.parametrize("with_data", [False, True], ids=["no-data", "data"])
def test_the_guest_sees_only_its_grants(workspace: Path, tmp_path: Path, with_data: bool) -> None:
    data = tmp_path / "data"
    data.mkdir()
    sandbox = _sandbox(workspace, mount_data_dir=data if with_data else None)
    result = sandbox.execute(_LISTING)
    assert result.success is True, result.stderr
    seen = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("SEEN")}
    expected = {"/app", "/tmp", "/usr/local/lib"} | ({"/data"} if with_data else set())
    assert seen == expected
    assert len(result.stdout.splitlines()) == len(_PROBE_PATHS)


# --- descriptors, sparse files and the write budget ----------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "fs = []\nfor i in range(100_000):\n    fs.append(open(f'/app/f{i % 10}.txt', 'w'))",
        "fds = [os.open('/usr/local/lib/' + os.listdir('/usr/local/lib')[0], os.O_RDONLY)"
        " for _ in range(100_000)]",
        "fds = [os.open('/app', os.O_RDONLY) for _ in range(100_000)]",
    ],
    ids=["workspace-files", "image-zip", "folders"],
)
def test_opening_100k_files_hits_the_open_files_limit(
    py: PythonSandbox, host: HostGuard, code: str
) -> None:
    before = open_descriptors()
    result = py.execute("import os\n" + code)
    assert result.limit is LimitKind.OPEN_FILES
    assert result.success is False
    assert "[Errno 33]" in result.stderr, result.stderr
    assert result.error is not None and str(py.policy.max_open_files) in result.error
    assert open_descriptors() <= before + 3
    host.assert_healthy(py)
    assert open_descriptors() <= before + 3


def _largest_file(folder: Path) -> int:
    sizes = [p.lstat().st_size for p in folder.rglob("*") if not p.is_symlink() and p.is_file()]
    return max(sizes, default=0)


@pytest.mark.parametrize(
    "code",
    [
        "open('/app/big', 'wb').truncate(10**12)",
        "f = open('/app/big', 'wb')\nf.seek(10**12)\nf.write(b'x')\nf.close()",
        "fd = os.open('/app/big', os.O_CREAT | os.O_WRONLY)\nos.pwrite(fd, b'x', 10**12)",
        "fd = os.open('/app/big', os.O_CREAT | os.O_WRONLY)\nos.ftruncate(fd, 10**12)",
        "f = open('/app/big', 'wb')\nf.seek(10**12, 0)\nf.seek(10, 1)\nf.write(b'x')\nf.close()",
        "open('/tmp/big', 'wb').truncate(10**12)",
    ],
    ids=["truncate", "seek-write", "pwrite", "ftruncate", "seek-cur", "in-tmp"],
)
def test_a_terabyte_sparse_file_hits_the_file_size_limit(
    py: PythonSandbox, host: HostGuard, workspace: Path, code: str
) -> None:
    result = py.execute("import os\n" + code)
    assert result.limit is LimitKind.FILE_SIZE
    assert result.success is False
    assert "OSError: [Errno" in result.stderr, result.stderr
    assert _largest_file(workspace) < 1_000_000
    host.assert_healthy(py)


@pytest.mark.parametrize(
    "code",
    [
        "open('/app/big', 'wb').write(b'x' * 5_000_000)",
        "f = open('/app/big', 'wb')\n"
        "for _ in range(50):\n    f.write(b'x' * 100_000)\n    f.flush()",
        "for i in range(50):\n"
        "    with open(f'/app/part{i}', 'wb') as f:\n        f.write(b'x' * 100_000)",
        "fd = os.open('/app/big', os.O_CREAT | os.O_WRONLY)\n"
        "for i in range(50):\n    os.pwrite(fd, b'x' * 100_000, i * 100_000)",
    ],
    ids=["one-write", "many-writes", "many-files", "pwrite"],
)
def test_writing_past_the_workspace_budget_is_refused(
    workspace: Path, host: HostGuard, code: str
) -> None:
    sandbox = _sandbox(workspace, workspace_max_bytes=1_000_000)
    result = sandbox.execute("import os\n" + code)
    assert result.success is False
    assert "OSError: [Errno" in result.stderr, result.stderr
    assert result.limit is LimitKind.FILE_SIZE
    total = sum(p.lstat().st_size for p in workspace.rglob("*") if p.is_file())
    assert total <= 1_000_000 + len("import os\n" + code)
    host.assert_healthy(sandbox)


def test_sparse_growth_counts_against_the_workspace_budget(workspace: Path) -> None:
    sandbox = _sandbox(workspace, workspace_max_bytes=1_000_000)
    code = "for i in range(20):\n    open(f'/app/s{i}', 'wb').truncate(200_000_000)"
    result = sandbox.execute(code)
    total = sum(p.lstat().st_size for p in workspace.iterdir() if p.name != "user_code.py")
    assert total <= 1_000_000, (
        "growing files with truncate (or a seek past the end) is checked against "
        "max_file_bytes only, never charged to workspace_max_bytes: the guest grew the workspace "
        f"to {total:,} bytes under a 1,000,000-byte budget (success={result.success})"
    )

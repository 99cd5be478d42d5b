"""docs/install.md's Enterprise Gateway recipe, as the test runs it: the fenced `bash` blocks
whose first line is `# recipe: NAME`, read from the file and run by bash as they are written
(`set -euo pipefail` first), with the test's own settings in the environment in place of the
`settings` block. Docs and test cannot drift: a command the docs change is the command the
test runs.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INSTALL_DOC = ROOT / "docs" / "install.md"
SYSTEM_PATH = "/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"
_BLOCK = re.compile(r"^```bash\n# recipe: ([a-z-]+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
RECIPE_SECONDS = 900  # pip install and warm on a machine twice as slow


def recipe_blocks(doc: Path = INSTALL_DOC) -> dict[str, str]:
    """The recipe's blocks by name, in the docs' order."""
    blocks = {name: body for name, body in _BLOCK.findall(doc.read_text())}
    assert blocks, f"no `# recipe:` blocks in {doc}"
    return blocks


def settings_names(doc: Path = INSTALL_DOC) -> set[str]:
    """The variables the docs' settings block sets: the test must set each of them."""
    return set(re.findall(r"^([A-Z_]+)=", recipe_blocks(doc)["settings"], re.MULTILINE))


def _script(name: str) -> str:
    return "set -euo pipefail\n" + recipe_blocks()[name]


def run_block(
    name: str, env: Mapping[str, str], cwd: Path, timeout: float = RECIPE_SECONDS
) -> subprocess.CompletedProcess[str]:
    """Run the block `name` with bash; its output kept, a failure fails the test with it."""
    done = subprocess.run(
        ["/bin/bash", "-c", _script(name)], env=dict(env), cwd=cwd, capture_output=True,
        text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (
        f"the recipe's {name!r} block failed ({done.returncode}):\n"
        f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    )
    return done


def start_block(name: str, env: Mapping[str, str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    """Start the block `name` (a server) in a process group of its own, output to `log`."""
    with log.open("wb") as output:
        return subprocess.Popen(
            ["/bin/bash", "-c", _script(name)], env=dict(env), cwd=cwd, stdout=output,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to `start_block`'s process group, SIGKILL after 30 s."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()

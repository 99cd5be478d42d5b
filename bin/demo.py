"""The demo: untrusted code in WebAssembly, typed limits in, typed results out.

Run it through bin/demo, which sets everything up first. Each step prints what the guest did
and how the run ended; the runaway steps show a limit stopping the code while the next run in
the same sandbox works.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from sandbox_kernel import ExecutionPolicy, RuntimeType, SandboxResult, create_sandbox

STEPS: list[tuple[str, str]] = [
    (
        "pandas in the sandbox",
        "import pandas as pd\n"
        "df = pd.DataFrame({'city': ['Oslo', 'Lima', 'Pune'], 'temp_c': [4.5, 19.0, 31.2]})\n"
        "print(df.sort_values('temp_c').to_string(index=False))\n"
        "df.to_csv('/app/cities.csv', index=False)\n",
    ),
    (
        "an escape attempt",
        "for path in ('/etc/passwd', '/app/../../etc/passwd'):\n"
        "    try:\n"
        "        open(path).read()\n"
        "        print(path, '-> READ (bad)')\n"
        "    except OSError as e:\n"
        "        print(path, '->', type(e).__name__)\n"
        "import socket, subprocess\n"
        "for name, attempt in [\n"
        "    ('network', lambda: socket.create_connection(('127.0.0.1', 22), timeout=1)),\n"
        "    ('subprocess', lambda: subprocess.run(['ls', '/'])),\n"
        "]:\n"
        "    try:\n"
        "        attempt()\n"
        "        print(name, '-> ALLOWED (bad)')\n"
        "    except Exception as e:\n"
        "        print(name, '->', type(e).__name__)\n",
    ),
    ("a runaway loop (fuel)", "while True:\n    pass\n"),
    ("a long sleep (wall clock)", "import time\ntime.sleep(3600)\n"),
    ("a 1 GB allocation (memory)", "blob = bytearray(1 << 30)\n"),
    ("an output flood (output cap)", "for i in range(10**5):\n    print('spam', i)\n"),
    ("the same sandbox, afterwards", "print('still healthy:', sum(range(10)))\n"),
]


def show(title: str, result: SandboxResult) -> None:
    status = "ok" if result.success else f"stopped: {result.error}"
    if result.truncated:
        status += ", output cut"
    print(f"\n=== {title}  [{status}]")
    shown = result.stdout
    if len(shown) > 600:  # the head, and the omission notice at the end
        shown = shown[:200] + "\n  ...\n" + shown.rstrip().splitlines()[-1]
    if shown.strip():
        print(shown.rstrip())
    if result.stderr.strip() and not result.success:
        print("stderr:", result.stderr.strip().splitlines()[-1])
    print(
        f"    fuel {result.fuel_consumed:,}  memory {result.memory_used_bytes / 1e6:.0f} MB  "
        f"{result.duration_ms:.0f} ms  created {result.files_created}"
    )


def main() -> int:
    policy = ExecutionPolicy(
        fuel_budget=10_000_000_000,  # pandas' import alone takes ~4.3e9 instructions
        memory_bytes=256_000_000,
        timeout_seconds=3,
        stdout_max_bytes=4_000,
    )
    with tempfile.TemporaryDirectory(prefix="sandbox-kernel-demo-") as folder:
        python = create_sandbox(RuntimeType.PYTHON, policy=policy, workspace=Path(folder))
        for title, code in STEPS:
            show(title, python.execute(code))
        javascript = create_sandbox(RuntimeType.JAVASCRIPT, policy=policy, workspace=folder)
        show(
            "JavaScript (QuickJS-NG)", javascript.execute("console.log([1, 2, 3].map(x => x * x))")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

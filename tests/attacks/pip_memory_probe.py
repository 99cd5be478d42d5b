"""One `%pip install` resolution (WheelFetcher.resolve) in a process of its own, for the tests
that measure what a download costs the host: prints JSON with the refusal (if any), this
process's peak RSS before and after, its children's (pip's) peak, and the bytes left in the
wheel folder.

    python -m tests.attacks.pip_memory_probe INDEX_URL FOLDER MAX_BYTES SPEC...
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

from sandbox_kernel.host import GUEST_PYTHON
from sandbox_kernel.host.packages import PackageError, WheelFetcher, parse_pip_args


def main() -> int:
    index_url, folder, max_bytes, *specs = sys.argv[1:]
    request = parse_pip_args(specs)
    fetcher = WheelFetcher(
        Path(folder),
        python_version=GUEST_PYTHON,
        max_bytes=int(max_bytes),
        stop=lambda: False,
        deadline=time.monotonic() + 600,
        log=lambda line: None,
        index_url=index_url,
    )
    before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    error, wheels = None, []
    try:
        wheels = [w.model_dump() for w in fetcher.resolve(request, {}, {})]
    except PackageError as exc:
        error = str(exc)
    report = {
        "error": error,
        "wheels": wheels,
        "peak_before_kib": before_kib,
        "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "children_peak_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
        "folder_bytes": sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file()),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One worker process of the agent server (workers.py starts it; not a command for people).

    python -m sandbox_kernel.runner.worker

Reads JSON lines on stdin: first {"op": "settings"}, then runs and cancels; answers on the
stdout it was started with ("started" as it begins a run, "done" with its response). sys.stdout
is pointed at stderr first, so that nothing printed in this process (a library's warning, a
stray print) can be read as an answer. Warms the images (engine.warm_up) before it says it is
ready. Runs one run at a time, on a thread, so that a cancel can arrive while it runs. Ends
when stdin closes.

Must not import: anything Jupyter.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from typing import IO, Any

from sandbox_kernel.runner.api import run_request
from sandbox_kernel.runner.engine import Cancellation, warm_up
from sandbox_kernel.runner.settings import RunnerSettings


class _Answers:
    """The protocol's output: whole lines, one writer at a time."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, ensure_ascii=False).encode() + b"\n"
        with self._lock:
            self._out.write(line)
            self._out.flush()


def main() -> int:
    answers = _Answers(os.fdopen(os.dup(sys.stdout.fileno()), "wb"))
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # prints go to the log, never the pipe
    logging.basicConfig(level=logging.WARNING, format="worker %(process)d: %(message)s")
    lines = iter(sys.stdin.buffer.readline, b"")
    first = json.loads(next(lines))
    settings = RunnerSettings.model_validate(first["settings"])
    if settings.datasets.expanduser().exists():
        warm_up(settings)
    answers.send({"op": "ready"})
    running: dict[str, Cancellation] = {}
    lock = threading.Lock()

    def run(message: dict[str, Any]) -> None:
        run_id = str(message["id"])
        try:
            response = run_request(
                message["request"],
                settings=settings,
                cancellation=running[run_id],
                run_id=message.get("run_id"),
            )
            answers.send({"op": "done", "id": run_id, "response": response.model_dump(mode="json")})
        finally:
            with lock:
                running.pop(run_id, None)

    threads: list[threading.Thread] = []
    for line in lines:
        message = json.loads(line)
        if message.get("op") == "run":
            with lock:
                running[str(message["id"])] = Cancellation()
            # Before it begins: a worker lost before saying so never ran it (workers.py).
            answers.send({"op": "started", "id": str(message["id"])})
            thread = threading.Thread(target=run, args=(message,), name="sandbox-kernel-run")
            thread.start()
            threads = [t for t in threads if t.is_alive()] + [thread]
        elif message.get("op") == "cancel":
            with lock:
                cancellation = running.get(str(message["id"]))
            if cancellation is not None:
                cancellation.cancel()
    for thread in threads:  # stdin closed: finish what runs, then end
        thread.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())

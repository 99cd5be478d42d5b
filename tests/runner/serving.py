"""`sandbox-kernel serve` as a user starts it: a real process on 127.0.0.1 (port 0, so the
server picks one and prints its link), the project's example datasets, capsules in the test's
folder, and a scripted model whose rules turn the test questions into the golden queries.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.processes import stop, wait_until_up

REPO = Path(__file__).resolve().parents[2]
DATASETS = REPO / "datasets" / "datasets.toml"
GOLDEN = REPO / "datasets" / "golden"
TOKEN = "test-token-0123456789abcdef"
QUESTIONS = {  # what a user asks -> the golden file the scripted model answers with
    "Who are the best customers?": "retail.sql",
    "Show revenue by category with pandas": "retail.py",
    "Which countries had wet days?": "weather.sql",
    "Summarise each station in Python": "weather.py",
}
_LINK = re.compile(r"open (http://[^/\s]+)/\?token=(\S+)")


def model_rules(folder: Path) -> Path:
    """The scripted model's rules: each question to its golden query in a fenced block, and
    an answer without a code block for anything else."""
    rules = []
    for question, golden in QUESTIONS.items():
        language = "sql" if golden.endswith(".sql") else "python"
        code = (GOLDEN / golden).read_text()
        reply = f"Here is the query.\n```{language}\n{code}```\n"
        rules.append({"when": re.escape(question), "reply": reply})
    escape = "```python\nimport os\nresult = os.listdir('/')\n```"
    rules.append({"when": "list the host's files", "reply": escape})
    rules.append({"when": "run forever", "reply": "```python\nwhile True:\n    pass\n```"})
    rules.append({"reply": "I would rather not say."})
    path = folder / "model.json"
    path.write_text(json.dumps({"rule": rules}))
    return path


def expected(golden: str) -> dict[str, Any]:
    table: dict[str, Any] = json.loads((GOLDEN / "expected.json").read_text())[golden]
    return table


@dataclass
class Server:
    """A running `sandbox-kernel serve`."""

    url: str
    token: str
    capsules: Path
    process: subprocess.Popen[bytes]
    log: Path
    headers: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def client(self, **options: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=60, **options)

    def chat(self, message: str, dataset_id: str = "retail") -> list[tuple[str, Any]]:
        """The events of one chat turn, read to the end."""
        with self.client() as client:
            body = {"message": message, "dataset_id": dataset_id}
            with client.stream("POST", "/chat", json=body) as answer:
                assert answer.status_code == 200, answer.read()
                return list(read_events(answer.iter_lines()))

    def capsule_ids(self) -> list[str]:
        with self.client() as client:
            return [c["id"] for c in client.get("/capsules?limit=200").json()["capsules"]]

    def alive(self) -> bool:
        return self.process.poll() is None and httpx.get(f"{self.url}/healthz").text == "ok"


def read_events(lines: Iterator[str]) -> Iterator[tuple[str, Any]]:
    """Server-Sent Events as (event, data) pairs; comments are skipped."""
    name, data = "message", []
    for line in lines:
        if not line:
            if data:
                yield name, json.loads("\n".join(data))
            name, data = "message", []
        elif line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])


def names(events: list[tuple[str, Any]]) -> list[str]:
    return [name for name, _ in events]


def payload(events: list[tuple[str, Any]], wanted: str) -> Any:
    return next(data for name, data in events if name == wanted)


@dataclass
class Serving:
    """Starts servers and stops every one of them at the end."""

    folder: Path
    servers: list[Server] = field(default_factory=list)

    def start(self, *arguments: str, python: bool = True, name: str = "server") -> Server:
        home = self.folder / name
        home.mkdir()
        env = {
            **os.environ,
            "SANDBOX_KERNEL_DATASETS": str(DATASETS),
            "SANDBOX_KERNEL_CAPSULES": str(home / "capsules.sqlite3"),
            "ENABLE_PYTHON_EXECUTION": "1" if python else "0",
            "SANDBOX_KERNEL_LLM_PROVIDER": "scripted",
            "SANDBOX_KERNEL_LLM_SCRIPT": str(model_rules(home)),
        }
        env.pop("SANDBOX_KERNEL_SERVE_TOKEN", None)
        log = home / "server.log"
        log_file = log.open("wb")
        command = [str(Path(sys.executable).parent / "sandbox-kernel"), "serve", "--port", "0"]
        process = subprocess.Popen(
            [*command, "--token", TOKEN, *arguments],
            stdout=subprocess.PIPE,
            stderr=log_file,
            env=env,
            cwd=home,
        )
        log_file.close()  # the child has its own copy
        assert process.stdout is not None
        line = process.stdout.readline().decode()  # printed once the port is bound
        link = _LINK.search(line)
        assert link, f"no link printed: {line!r}; log: {log.read_text()}"
        server = Server(link.group(1), link.group(2), home / "capsules.sqlite3", process, log)
        self.servers.append(server)
        wait_until_up(  # the warm-up builds the warm image when the machine has none
            lambda: httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200,
            process, log, "the agent server", timeout=120,
        )  # fmt: skip
        return server

    def stop(self) -> None:
        for server in self.servers:
            if server.process.stdout is not None:
                server.process.stdout.close()
            stop(server.process)

"""Real servers from Debian that tests start for themselves: PostgreSQL and nginx.

    with postgres() as db:        a private cluster on 127.0.0.1 (trust auth), db.url
        db.restart(pause=2)             stop it (fast), wait, start it again on the same port
    with nginx(folder, [url1, url2]) as proxy_url:
        ...                             a reverse proxy spreading requests over the upstreams

bin/setup --tests installs both (apt-get: postgresql, nginx). A test that needs one and finds
it missing fails and says so; it never skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.processes import free_port


def _postgres_bin() -> Path:
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), reverse=True)
    assert candidates, "PostgreSQL is not installed: bin/setup --tests installs it (apt-get)"
    return candidates[0].parent


def _as_postgres_user() -> list[str]:
    """initdb and postgres refuse to run as root: as root, they run as Debian's `postgres`."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


@dataclass
class Postgres:
    folder: Path
    port: int
    bin: Path
    log: Path

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        command = [
            *_as_postgres_user(),
            str(self.bin / "pg_ctl"),
            "start",
            "-w",
            "-D",
            str(self.folder / "data"),
            "-l",
            str(self.log),
            "-o",
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off",
        ]
        subprocess.run(command, check=True, capture_output=True, timeout=60)

    def stop(self, mode: str = "fast") -> None:
        command = [
            *_as_postgres_user(),
            str(self.bin / "pg_ctl"),
            "stop",
            "-w",
            "-m",
            mode,
            "-D",
            str(self.folder / "data"),
        ]
        subprocess.run(command, capture_output=True, timeout=60)

    def restart(self, pause: float) -> None:
        """Stop the server (its connections cut), wait `pause` seconds, start it again."""
        self.stop()
        time.sleep(pause)
        self.start()

    def query(self, sql: str) -> list[tuple[object, ...]]:
        import psycopg

        with psycopg.connect(self.url) as connection:
            return list(connection.execute(sql).fetchall())  # type: ignore[arg-type]


@contextmanager
def postgres() -> Iterator[Postgres]:
    """A fresh PostgreSQL cluster on a free port, stopped and removed at the end. Its folder is
    a new one under the system's temporary folder (as root the server runs as `postgres`,
    which cannot enter pytest's private folders)."""
    folder = Path(tempfile.mkdtemp(prefix="sandbox-kernel-postgres-"))
    binaries = _postgres_bin()
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    data = folder / "data"
    subprocess.run(
        [*_as_postgres_user(), str(binaries / "initdb"), "-D", str(data), "-U", "postgres",
         "--auth=trust", "--no-sync", "-E", "UTF8"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    server = Postgres(folder, free_port(), binaries, folder / "postgres.log")
    server.start()
    try:
        yield server
    finally:
        server.stop("immediate")
        shutil.rmtree(folder, ignore_errors=True)


AGENTS_CONF = Path(__file__).resolve().parents[1] / "deploy" / "agent-server" / "agents.conf"
_NGINX_MAIN = """
worker_processes 1;
daemon off;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
{user}
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {folder}/body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
    include {folder}/agents.conf;
}}
"""


def _agents_conf(upstreams: list[str], port: int) -> str:
    """The deployment's own nginx file (deploy/agent-server/agents.conf), its two marked lines
    pointed at `upstreams` and at 127.0.0.1:`port`."""
    lines, replaced = [], 0
    for line in AGENTS_CONF.read_text().splitlines():
        marked = "replaced by the test" in line and not line.lstrip().startswith("#")
        if marked and line.strip().startswith("server "):
            lines += [f"    server {u.removeprefix('http://')} max_fails=0;" for u in upstreams]
        elif marked and line.strip().startswith("listen "):
            lines.append(f"    listen 127.0.0.1:{port};")
        else:
            lines.append(line)
        replaced += marked
    assert replaced == 2, "agents.conf lost its marked lines"
    text = "\n".join(lines) + "\n"
    return text


@contextmanager
def nginx(folder: Path, upstreams: list[str]) -> Iterator[str]:
    """nginx on a free port of 127.0.0.1 in front of `upstreams` ("http://127.0.0.1:P"),
    configured by the deployment's own file; its URL."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    assert Path(binary).exists(), "nginx is not installed: bin/setup --tests installs it"
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    (folder / "agents.conf").write_text(_agents_conf(upstreams, port))
    conf = folder / "nginx.conf"
    user = "user root;" if os.geteuid() == 0 else ""
    conf.write_text(_NGINX_MAIN.format(folder=folder, user=user))
    with (folder / "stderr.log").open("wb") as log:
        process = subprocess.Popen([binary, "-c", str(conf), "-p", str(folder)], stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                import socket

                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert process.poll() is None, (folder / "error.log").read_text()
                assert time.monotonic() < deadline, "nginx did not listen"
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)

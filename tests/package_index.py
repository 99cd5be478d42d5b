"""A real package index on 127.0.0.1 for the %pip tests: PEP 503 "simple" pages over HTTP,
serving wheels made here, so pip runs unchanged against it and no test needs the internet.

    index = PackageIndex()
    index.add("tinyjson", "1.0", {"tinyjson/__init__.py": "VALUE = 1\\n"}, requires=["six"])
    index.add("fastcore", "2.0", {...}, tag="cp311-cp311-manylinux_2_17_x86_64")  # compiled
    with index:
        env = index.pip_env()   # SANDBOX_KERNEL_PIP_INDEX_URL: the kernel's %pip reads it alone

A wheel is a zip with a .dist-info (METADATA, WHEEL, RECORD), as `pip wheel` makes one; the
index lists each file with its sha256 fragment, as PyPI does.
"""

from __future__ import annotations

import base64
import hashlib
import io
import time
import zipfile
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from tests.local_http import LocalHTTPServer


@dataclass
class PackageIndex:
    files: dict[str, bytes] = field(default_factory=dict)  # wheel file name -> bytes
    requests: list[str] = field(default_factory=list)  # paths asked for, in order
    slow: dict[str, float] = field(default_factory=dict)  # wheel file name -> seconds of delay

    def add(
        self,
        name: str,
        version: str,
        files: dict[str, str | bytes],
        *,
        requires: list[str] | None = None,
        tag: str = "py3-none-any",
        extra_members: dict[str, bytes] | None = None,
    ) -> str:
        """A wheel of `name` `version` holding `files`; its file name. `extra_members` are
        written into the zip as given (a hostile wheel's paths)."""
        dist = f"{name.replace('-', '_')}-{version}"
        metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        metadata += "".join(f"Requires-Dist: {req}\n" for req in requires or [])
        wheel_meta = f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: {tag}\n"
        members: dict[str, bytes] = {
            path: data.encode() if isinstance(data, str) else data for path, data in files.items()
        }
        members[f"{dist}.dist-info/METADATA"] = metadata.encode()
        members[f"{dist}.dist-info/WHEEL"] = wheel_meta.encode()
        record = "".join(
            f"{path},sha256={_digest(data)},{len(data)}\n" for path, data in members.items()
        )
        members[f"{dist}.dist-info/RECORD"] = (record + f"{dist}.dist-info/RECORD,,\n").encode()
        members.update(extra_members or {})
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for path, data in members.items():
                archive.writestr(path, data)
        filename = f"{dist}-{tag}.whl"
        self.files[filename] = buffer.getvalue()
        return filename

    def sha256(self, filename: str) -> str:
        return hashlib.sha256(self.files[filename]).hexdigest()

    @property
    def url(self) -> str:
        return f"{self._http.base}/simple/"

    def pip_env(self) -> dict[str, str]:
        """The kernel's variable that points its %pip at this index (the host's pip reads no
        configuration of its own for a guest)."""
        return {"SANDBOX_KERNEL_PIP_INDEX_URL": self.url}

    def __enter__(self) -> PackageIndex:
        self._http = LocalHTTPServer(self._handler())
        self._http.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.stop()

    def _page(self, project: str) -> bytes | None:
        links = [
            f'<a href="/files/{name}#sha256={self.sha256(name)}">{name}</a><br>'
            for name in sorted(self.files)
            if _normal(name.split("-")[0]) == project
        ]
        if not links:
            return None
        return f"<!DOCTYPE html><html><body>{''.join(links)}</body></html>".encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        index = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                index.requests.append(self.path)
                body: bytes | None = None
                kind = "text/html"
                if self.path.startswith("/simple/"):
                    body = index._page(_normal(self.path.strip("/").split("/")[-1]))
                elif self.path.startswith("/files/"):
                    name = self.path.removeprefix("/files/")
                    body = index.files.get(name)
                    kind = "application/octet-stream"
                    time.sleep(index.slow.get(name, 0.0))
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")

"""A real package index on 127.0.0.1 for the %pip tests: PEP 503 "simple" pages over HTTP,
serving wheels made here, so pip runs unchanged against it and no test needs the internet.

    index = PackageIndex()
    index.add("tinyjson", "1.0", {"tinyjson/__init__.py": "VALUE = 1\\n"}, requires=["six"])
    index.add("fastcore", "2.0", {...}, tag="cp311-cp311-manylinux_2_17_x86_64")  # compiled
    index.add_big("hugewheel", "1.0", 400 * 1024 * 1024)  # a valid wheel, made as it is sent
    with index:
        env = index.pip_env()   # SANDBOX_KERNEL_PIP_INDEX_URL: the kernel's %pip reads it alone

A wheel is a zip with a .dist-info (METADATA, WHEEL, RECORD), as `pip wheel` makes one; the
index lists each file with its sha256 fragment, as PyPI does. A big wheel (`add_big`) is a valid
zip whose one large member is zeros, written as it is sent: nothing of its size is held in
memory or on disk here, and it is listed without a hash (as some indexes list files).
"""

from __future__ import annotations

import base64
import hashlib
import io
import struct
import time
import zipfile
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import BinaryIO

from tests.local_http import LocalHTTPServer


@dataclass
class PackageIndex:
    files: dict[str, bytes] = field(default_factory=dict)  # wheel file name -> bytes
    requests: list[str] = field(default_factory=list)  # paths asked for, in order
    slow: dict[str, float] = field(default_factory=dict)  # wheel file name -> seconds of delay
    big: dict[str, BigWheel] = field(default_factory=dict)  # wheel file name -> its parts

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

    def add_big(self, name: str, version: str, size_bytes: int) -> str:
        """A valid wheel of `name` `version` with a member of `size_bytes` zeros; its file name."""
        dist = f"{name.replace('-', '_')}-{version}"
        metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        wheel = "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        small = {
            f"{dist}.dist-info/METADATA": metadata,
            f"{dist}.dist-info/WHEEL": wheel,
            f"{dist}.dist-info/RECORD": "",
        }
        filename = f"{dist}-py3-none-any.whl"
        self.big[filename] = BigWheel.make(
            {path: text.encode() for path, text in small.items()}, f"{name}/zeros.bin", size_bytes
        )
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
        ] + [
            f'<a href="/files/{name}">{name}</a><br>'
            for name in sorted(self.big)
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
                elif self.path.removeprefix("/files/") in index.big:
                    index.big[self.path.removeprefix("/files/")].send(self)
                    return
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


_CHUNK = b"\0" * (1024 * 1024)


@dataclass
class BigWheel:
    """A stored (uncompressed) zip: small members, then one member of zeros, sent in pieces."""

    head: bytes  # the small members and the big one's local header
    zeros: int
    tail: bytes  # the central directory

    @classmethod
    def make(cls, small: dict[str, bytes], big_name: str, zeros: int) -> BigWheel:
        head, central = b"", b""
        crc = 0
        for _ in range(zeros // len(_CHUNK)):
            crc = zlib.crc32(_CHUNK, crc)
        crc = zlib.crc32(_CHUNK[: zeros % len(_CHUNK)], crc)
        members = [(n, d, zlib.crc32(d), len(d)) for n, d in small.items()]
        members.append((big_name, b"", crc, zeros))
        for name, data, member_crc, size in members:
            raw = name.encode()
            fields = (0, 0, 0, 0x21, member_crc, size, size, len(raw))  # 0x21: 1980-01-01
            central += struct.pack("<IHH", 0x02014B50, 20, 20) + struct.pack("<HHHHIIIH", *fields)
            central += struct.pack("<HHHHII", 0, 0, 0, 0, 0, len(head)) + raw
            head += struct.pack("<IH", 0x04034B50, 20) + struct.pack("<HHHHIIIH", *fields)
            head += struct.pack("<H", 0) + raw + data
        end = struct.pack(
            "<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central),
            len(head) + zeros, 0,
        )  # fmt: skip
        return cls(head, zeros, central + end)

    def send(self, handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Content-Length", str(len(self.head) + self.zeros + len(self.tail)))
        handler.end_headers()
        out: BinaryIO = handler.wfile  # type: ignore[assignment]
        try:
            out.write(self.head)
            left = self.zeros
            while left:
                piece = min(left, len(_CHUNK))
                out.write(_CHUNK[:piece])
                left -= piece
            out.write(self.tail)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading: what a capped download does


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")

"""The guest images: found where the pinned packages put them, checked against their SHA256 pins."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from sandbox_kernel import GuestImageCorrupt, GuestImageNotFound
from sandbox_kernel.host import artifacts
from sandbox_kernel.host.artifacts import PYTHON_PINS, python_image, sha256_of


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache folder of the test's own, so hashed temp files leave no stamp in the real one."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("SANDBOX_KERNEL_CACHE", str(folder))
    return folder


def _hashlib_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@pytest.mark.parametrize(
    ("snapshot", "name"),
    [(True, "python-snapshot.wasm"), (False, "python.wasm")],
    ids=["snapshot", "plain"],
)
def test_the_default_python_image_is_pinned(snapshot: bool, name: str) -> None:
    image = python_image(snapshot=snapshot)
    assert image.pinned is True
    assert image.binary.name == name
    assert image.binary_sha256 == PYTHON_PINS[name]
    assert _hashlib_sha256(image.binary) == PYTHON_PINS[name]  # not just a remembered digest


def test_the_stdlib_folder_holds_only_the_zip() -> None:
    image = python_image()
    assert image.zip_name.startswith("python3") and image.zip_name.endswith(".zip")
    assert [p.name for p in image.lib_dir.iterdir()] == [image.zip_name]
    assert sha256_of(image.lib_dir / image.zip_name) == PYTHON_PINS["python-stdlib.zip"]


def test_a_missing_custom_binary_is_guest_image_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "missing.wasm"
    with pytest.raises(GuestImageNotFound) as caught:
        python_image(missing)
    assert isinstance(caught.value, FileNotFoundError)
    assert caught.value.path == missing
    assert str(missing) in str(caught.value)


def test_a_custom_binary_that_is_a_folder_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(GuestImageNotFound):
        python_image(tmp_path)


def test_sha256_of_matches_hashlib(private_cache: Path, tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(bytes(range(256)) * 5000)
    assert sha256_of(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert sha256_of(path) == hashlib.sha256(path.read_bytes()).hexdigest()  # the remembered one


def test_sha256_of_a_changed_file_is_its_new_digest(private_cache: Path, tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"first version")
    first = sha256_of(path)
    path.write_bytes(b"second version, longer")
    assert sha256_of(path) == hashlib.sha256(b"second version, longer").hexdigest() != first
    path.write_bytes(b"third  version")  # the same size as the first
    assert sha256_of(path) == hashlib.sha256(b"third  version").hexdigest()


def test_a_custom_binary_is_hashed_but_not_pinned(private_cache: Path, tmp_path: Path) -> None:
    copy = tmp_path / "tampered.wasm"
    copy.write_bytes(b"\0asm\1\0\0\0 not the pinned python")
    image = python_image(copy)
    assert image.pinned is False
    assert image.binary == copy
    assert image.binary_sha256 == hashlib.sha256(copy.read_bytes()).hexdigest()
    assert image.binary_sha256 not in PYTHON_PINS.values()


def test_a_pinned_file_with_the_wrong_digest_is_refused(
    private_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = PYTHON_PINS["python-snapshot.wasm"]
    monkeypatch.setitem(artifacts.PYTHON_PINS, "python-snapshot.wasm", "0" * 64)
    with pytest.raises(GuestImageCorrupt) as caught:
        python_image()
    assert caught.value.expected == "0" * 64
    assert caught.value.actual == real
    assert caught.value.path.name == "python-snapshot.wasm"


def test_a_tampered_stdlib_copy_in_the_cache_is_refused(private_cache: Path) -> None:
    image = python_image()
    target = image.lib_dir / image.zip_name
    target.unlink()  # the cache holds a hard link: replace it, do not write through it
    shutil.copyfile(Path(__file__), target)
    with pytest.raises(GuestImageCorrupt):
        python_image()

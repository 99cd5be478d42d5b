"""A session's memory image, patched with the pages each turn wrote, is the memory itself.

The rollback image after a turn is the previous image plus the pages the write watch saw
written (host/write_watch). These turns write memory every way a cell can: the interpreter's
own heap, a grown memory, the kernel reading a file into a guest buffer (WASI fd_read), a
turn that fails; after each one the patched image must be byte for byte what a full copy
would be. The same holds on a host that cannot watch writes (whole copies).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_kernel import ExecutionPolicy
from sandbox_kernel.host import memory_image
from sandbox_kernel.host import session as session_module
from sandbox_kernel.host.artifacts import python_image
from sandbox_kernel.host.memory_image import MemoryImage
from sandbox_kernel.host.session import GuestSession, SessionConfig, TurnLimits
from sandbox_kernel.host.wasi_config import Preopen
from sandbox_kernel.host.write_watch import PAGE_SIZE, WriteWatch
from sandbox_kernel.runtimes.base import limits_from_policy

LIMITS = TurnLimits(
    fuel=50_000_000_000, timeout_seconds=60, stdout_max_bytes=1 << 20, stderr_max_bytes=1 << 20
)
MEMORY_BYTES = 256 << 20

TURNS = [
    "x = 1",
    "names = {i: str(i) * 3 for i in range(20_000)}",
    "big = bytearray(40_000_000)",  # grows the memory
    "big[::4096] = b'z' * len(big[::4096])",
    "del big",
    "open('/app/data.bin', 'wb').write(bytes(range(256)) * 8_000)",
    "into = bytearray(2_048_000)\nwith open('/app/data.bin', 'rb') as f: f.readinto(into)",
    "1 / 0",  # fails: the turn still ran and wrote
    "names.clear()",
    "pass",
]


def new_session(workspace: Path) -> GuestSession:
    policy = ExecutionPolicy(mount_host_dir=workspace)
    config = SessionConfig(
        preopens=[Preopen(workspace, "/app", writable=True)],
        env={},
        memory_bytes=MEMORY_BYTES,
        guard=limits_from_policy(policy).guard,
    )
    return GuestSession(python_image(), config, door=None)


@pytest.fixture
def session(workspace: Path) -> Iterator[GuestSession]:
    made = new_session(workspace)
    yield made
    made.close()


def memory_now(session: GuestSession) -> bytes:
    size = session.memory_bytes()
    return (ctypes.c_char * size).from_address(session._base).raw


def turn(session: GuestSession, source: str) -> None:
    outcome = session.turn(source, LIMITS)
    assert not outcome.trapped, outcome.trap_message


def test_a_patched_image_is_the_memory_after_every_turn(session: GuestSession) -> None:
    image = session.capture()
    patched = 0
    for source in TURNS:
        turn(session, source)
        size = session.memory_bytes()
        image = session.capture(into=image)
        patched += session.last_capture_bytes < size
        assert image.memory().tobytes() == memory_now(session), (
            f"the image differs after {source!r}"
        )
    if session.watching:  # only pages written were copied, most of the time
        assert patched >= len(TURNS) - 2


def test_a_restored_image_is_patched_from_then_on(session: GuestSession) -> None:
    turn(session, "kept = list(range(1000))")
    image = session.capture()
    turn(session, "kept.append('lost'); lost = 1")
    session.restore(image)  # the rollback: a fresh instance holding the image
    turn(session, "assert kept[-1] == 999 and 'lost' not in globals(), kept[-1]")
    image = session.capture(into=image)
    assert image.memory().tobytes() == memory_now(session)
    turn(session, "kept.append('after')")
    image = session.capture(into=image)
    assert image.memory().tobytes() == memory_now(session)


def test_a_grown_memory_is_patched_in_its_image_buffer(session: GuestSession) -> None:
    """A memory that grows stays in its image's buffer (room for the memory's limit): only
    the pages written are copied, and the rollback restores it whole. A new buffer for each
    growth had every page copied and faulted in again (150 ms for a 300 MB memory, after
    every cell that grew it)."""
    image = session.capture()
    if not session.watching:
        pytest.skip("this host cannot watch writes: every capture is a whole copy")
    assert len(image.data) == MEMORY_BYTES and image.size == session.memory_bytes()
    turn(session, "big = bytearray(120_000_000)\nbig[::999_983] = b'w' * len(big[::999_983])")
    size = session.memory_bytes()
    assert size > image.size + 100_000_000
    grown = session.capture(into=image)
    assert grown.data is image.data and grown.size == size
    growth = size - image.size  # written by the guest's calloc; the rest mostly was not
    assert session.last_capture_bytes < growth + (16 << 20), "only the written pages are copied"
    assert grown.memory().tobytes() == memory_now(session)
    expected = grown.memory().tobytes()
    turn(session, "big[::7] = b'x' * len(big[::7]); del big")
    session.restore(grown)  # the rollback
    assert memory_now(session) == expected
    turn(session, "assert big[999_983] == ord('w') and big[7] == 0 and len(big) == 120_000_000")
    again = session.capture(into=grown)  # patched in place from then on
    assert again.data is image.data
    assert again.memory().tobytes() == memory_now(session)


def test_a_buffer_whose_room_cannot_be_reserved_is_the_images_size() -> None:
    """Where the room cannot be reserved (here: more address space than any machine has), the
    buffer is as long as the image, and growth takes a new one, as before rooms existed."""
    buffer = memory_image.image_buffer(64 * PAGE_SIZE, room=1 << 62)
    assert len(buffer) == 64 * PAGE_SIZE
    assert len(memory_image.image_buffer(PAGE_SIZE, room=8 * PAGE_SIZE)) == 8 * PAGE_SIZE


def test_another_image_is_copied_whole(session: GuestSession) -> None:
    first = session.capture()
    turn(session, "y = 2")
    stranger = MemoryImage(first.memory().tobytes(), first.flag_address)  # not the session's own
    image = session.capture(into=stranger)
    assert session.last_capture_bytes == session.memory_bytes()
    assert image.memory().tobytes() == memory_now(session)


def test_without_a_write_watch_every_capture_is_whole(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(WriteWatch, "open", classmethod(lambda cls, *args, **kwargs: None))
    session = new_session(workspace)
    try:
        image = session.capture()
        for source in TURNS[:4]:
            turn(session, source)
            image = session.capture(into=image)
            assert not session.watching
            assert session.last_capture_bytes == session.memory_bytes()
            assert image.memory().tobytes() == memory_now(session)
    finally:
        session.close()


def test_writable_pages_are_protected_again_past_the_limit(
    session: GuestSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = session.capture()
    if not session.watching:
        pytest.skip("this host cannot watch writes")
    monkeypatch.setattr(session_module, "REPROTECT_BYTES", 0)
    turn(session, "z = 3")
    image = session.capture(into=image)  # copies what `z = 3` wrote, then protects it
    image = session.capture(into=image)  # nothing written since: nothing copied
    assert session.last_capture_bytes == 0
    assert image.memory().tobytes() == memory_now(session)


def test_a_turn_past_the_floor_keeps_its_pages_writable_when_it_writes_them_every_time(
    session: GuestSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound follows what the session's turns write: a turn that writes a bit more than
    REPROTECT_BYTES (as an interrupted IPython cell does, its traceback's pages too) does not
    have its pages protected again after every capture, so that the next such turn does not
    fault on each of them. Past twice the floor, they are (the test above)."""
    image = session.capture()
    if not session.watching:
        pytest.skip("this host cannot watch writes")
    cell = "names = {i: str(i) for i in range(3_000)}"
    turn(session, cell)
    image = session.capture(into=image)  # everything was protected: this is the footprint
    footprint = session.last_capture_bytes
    assert footprint > 0
    monkeypatch.setattr(session_module, "REPROTECT_BYTES", footprint * 6 // 10)
    image = session.capture()  # a whole copy: all protected again
    turn(session, cell)
    image = session.capture(into=image)
    written = session.last_capture_bytes
    assert footprint * 6 // 10 < written <= footprint * 12 // 10, (footprint, written)
    image = session.capture(into=image)  # nothing written since, but its pages stayed writable
    assert session.last_capture_bytes >= written
    assert image.memory().tobytes() == memory_now(session)


def _anonymous_kib(address: int) -> int:
    """The private copies (Anonymous) in the mapping that holds `address`, from
    /proc/self/smaps (a file page only read stays the page cache's, not counted)."""
    current = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:
            start, end = (int(x, 16) for x in head.split("-"))
            current = start <= address < end
        elif current and line.startswith("Anonymous:"):
            return int(line.split()[1])
    raise AssertionError("no mapping holds the address")


def test_a_restore_writes_only_the_pages_that_differ(tmp_path: Path) -> None:
    """A page the image holds unchanged stays the shared one (copy-on-write, page cache): only
    the pages that differ become the session's own."""
    import mmap

    page = 4096
    initial = bytes(range(256)) * (64 * page // 256)  # 64 pages, as the instance starts
    (tmp_path / "initial").write_bytes(initial)
    image = bytearray(initial)
    for changed in (3, 10, 11, 12, 63):
        image[changed * page + 7] ^= 0xFF
    with (tmp_path / "initial").open("rb") as f:
        target = mmap.mmap(f.fileno(), len(initial), flags=mmap.MAP_PRIVATE)
    source = mmap.mmap(-1, len(image))
    source[:] = bytes(image)
    target_view = (ctypes.c_char * len(initial)).from_buffer(target)
    source_view = (ctypes.c_char * len(image)).from_buffer(source)
    address = ctypes.addressof(target_view)
    assert _anonymous_kib(address) == 0
    memory_image.copy_changed(address, ctypes.addressof(source_view), len(image))
    assert bytes(target) == bytes(image)
    assert _anonymous_kib(address) == 5 * page // 1024  # the five changed pages, no more
    del target_view, source_view


def _file_image(session: GuestSession, folder: Path) -> MemoryImage:
    """The session's memory saved to a file and loaded back as a warm image is: the buffer a
    copy-on-write mapping of the file, the file held open as the image's origin."""
    from sandbox_kernel.repl import warm

    path = folder / "image.mem"
    path.write_bytes(session.capture().memory().tobytes())
    data, origin = warm._map_private(path)
    assert origin is not None, "this host maps files copy-on-write"
    return MemoryImage(data, session.flag_address, origin=origin)


def test_a_file_image_is_mapped_shared_and_patched_pages_copied(
    session: GuestSession, tmp_path: Path
) -> None:
    """A restore maps the file over the new instance's memory: the memory is the image byte
    for byte, and none of its pages is the session's own until a turn writes it. After turns
    have patched the image, a restore (the rollback) copies exactly the patched pages."""
    turn(session, "kept = list(range(10_000))")
    image = _file_image(session, tmp_path)
    assert image.origin is not None
    session.restore(image)
    assert memory_now(session) == image.memory().tobytes()
    assert _anonymous_kib(session._base) < 64, "the restored pages are the file's, shared"

    for source in TURNS[:5]:  # heap writes, a grown memory, a bytearray freed
        turn(session, source)
        image = session.capture(into=image)
    assert image.origin is None or sum(image.origin.changed) > 0
    expected = image.memory().tobytes()
    turn(session, "kept.append('lost'); names = None; lost = bytearray(8_000_000)")
    session.restore(image)  # the rollback
    assert memory_now(session) == expected
    turn(session, "assert kept[-1] == 9_999 and 'lost' not in globals(), kept[-1]")


def test_a_grown_memory_keeps_the_file_under_its_image(
    session: GuestSession, tmp_path: Path
) -> None:
    """A memory that grew past its image is captured into a new buffer with the file mapped
    over its start again: the file's pages stay shared in the image and, after a rollback, in
    the memory; only the patched pages and the grown part are copied."""
    image = _file_image(session, tmp_path)
    session.restore(image)
    turn(session, "kept = 'k' * 10_000")
    image = session.capture(into=image)
    turn(session, "big = bytearray(b'g' * 60_000_000)")
    grown = session.capture(into=image)
    assert grown.origin is not None and grown.size > grown.origin.size
    assert grown.memory().tobytes() == memory_now(session)
    patched_kib = sum(grown.origin.changed) * 4  # what differs from the file: copied
    assert patched_kib * 1024 < grown.origin.size // 2
    with memory_image.address_of(grown.data) as address:
        assert _anonymous_kib(address) <= patched_kib, "the file's other pages are shared"
    expected = grown.memory().tobytes()
    turn(session, "del big; kept = None")
    session.restore(grown)  # the rollback
    assert memory_now(session) == expected
    assert _anonymous_kib(session._base) <= patched_kib, "the file's other pages are shared"
    turn(session, "assert kept == 'k' * 10_000 and len(big) == 60_000_000")
    again = session.capture(into=grown)  # patched in place from then on
    assert again.memory().tobytes() == memory_now(session)
    turn(session, "more = bytearray(b'm' * 30_000_000)")  # grows again: the same buffer
    more = session.capture(into=again)
    assert more.data is grown.data and more.size == session.memory_bytes() > grown.size
    assert more.memory().tobytes() == memory_now(session)


def test_without_file_mappings_a_file_image_is_copied(
    session: GuestSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host where the file cannot be mapped over the memory gets the same memory by copies."""
    monkeypatch.setattr(memory_image.ImageFile, "map_over", lambda self, address: False)
    turn(session, "kept = 'x' * 100_000")
    image = _file_image(session, tmp_path)
    session.restore(image)
    turn(session, "kept = None")
    session.restore(image)
    assert memory_now(session) == image.memory().tobytes()
    turn(session, "assert kept == 'x' * 100_000")


def test_the_patched_pages_are_the_union_of_every_run_marked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ImageFile.mark` skips runs it has marked before; what it reports is still every page
    of every run, across a full set of remembered runs and past the end of the file."""
    path = tmp_path / "image.bin"
    path.write_bytes(bytes(64 * PAGE_SIZE))
    fd = os.open(path, os.O_RDONLY)
    image_file = memory_image.ImageFile(fd, 64 * PAGE_SIZE)
    monkeypatch.setattr(memory_image, "_MARKED_RUNS", 3)
    batches = [
        [(0, PAGE_SIZE), (4 * PAGE_SIZE, 2 * PAGE_SIZE)],
        [(0, PAGE_SIZE), (4 * PAGE_SIZE, 2 * PAGE_SIZE)],  # the same again
        [(4 * PAGE_SIZE, 3 * PAGE_SIZE), (10 * PAGE_SIZE, 1)],  # a longer run from a known start
        [(0, PAGE_SIZE), (20 * PAGE_SIZE, PAGE_SIZE)],  # after the remembered set started again
        [(62 * PAGE_SIZE, 8 * PAGE_SIZE)],  # into a grown memory: only the file's pages count
    ]
    expected: set[int] = set()
    for runs in batches:
        image_file.mark(runs)
        for offset, length in runs:
            expected |= set(range(offset // PAGE_SIZE, -(-(offset + length) // PAGE_SIZE)))
        marked = {
            page
            for offset, length in image_file.changed_runs()
            for page in range(offset // PAGE_SIZE, (offset + length) // PAGE_SIZE)
        }
        assert marked == {page for page in expected if page < 64}
    assert len(image_file.changed) == 64

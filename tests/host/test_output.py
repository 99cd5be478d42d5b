"""CappedStream: keeps output up to a cap, counts the rest, never lets a listener reach wasmtime."""

from __future__ import annotations

import threading

import pytest

from sandbox_kernel.host.output import CappedStream


def test_output_under_the_cap_is_kept_whole() -> None:
    stream = CappedStream("stdout", 100)
    assert stream.write(b"hello ") == 6
    assert stream.write(bytearray(b"world\n")) == 6
    assert stream.data() == b"hello world\n"
    assert stream.text() == "hello world\n"
    assert stream.truncated is False
    assert stream.dropped_bytes == 0


@pytest.mark.parametrize(
    ("chunks", "kept", "dropped"),
    [
        ([b"x" * 15], b"x" * 10, 5),
        ([b"abcdef", b"ghijkl"], b"abcdefghij", 2),
        ([b"0123456789", b"more"], b"0123456789", 4),
        ([b"0123456789", b"", b"z"], b"0123456789", 1),
    ],
    ids=["one-chunk", "split-chunk", "exactly-full", "after-full"],
)
def test_bytes_past_the_cap_are_dropped_and_counted(
    chunks: list[bytes], kept: bytes, dropped: int
) -> None:
    stream = CappedStream("stdout", 10)
    for chunk in chunks:
        assert stream.write(chunk) == len(chunk)  # reported written: the guest must not retry
    assert stream.data() == kept
    assert stream.dropped_bytes == dropped
    assert stream.truncated is True


def test_write_accepts_a_memoryview() -> None:
    stream = CappedStream("stdout", 4)
    assert stream.write(memoryview(b"abcdef")) == 6
    assert stream.data() == b"abcd"


def test_the_notice_names_the_stream_the_count_and_the_cap() -> None:
    stream = CappedStream("stderr", 1024)
    stream.write(b"e" * 1_500_000)
    assert stream.notice() == (
        "[sandbox: 1,498,976 bytes of stderr omitted; the policy caps stderr at 1,024 bytes]\n"
    )
    text = stream.text()
    assert text == "e" * 1024 + "\n" + stream.notice()


def test_the_notice_starts_on_its_own_line() -> None:
    stream = CappedStream("stdout", 6)
    stream.write(b"abc\ndefgh")
    assert (
        stream.text()
        == "abc\nde\n[sandbox: 3 bytes of stdout omitted; the policy caps stdout at 6 bytes]\n"
    )
    ended = CappedStream("stdout", 4)
    ended.write(b"abc\nmore")
    assert ended.text() == "abc\n" + ended.notice()


def test_no_notice_without_truncation() -> None:
    stream = CappedStream("stdout", 4)
    stream.write(b"abcd")
    assert "omitted" not in stream.text()


def test_text_replaces_invalid_utf8() -> None:
    stream = CappedStream("stdout", 100)
    stream.write(b"ok \xff\xfe end")
    assert stream.text() == "ok \ufffd\ufffd end"


def test_a_cut_inside_a_character_does_not_raise() -> None:
    stream = CappedStream("stdout", 2)
    stream.write("é✓".encode())
    assert stream.text().startswith("é")


def test_the_listener_sees_each_kept_chunk() -> None:
    seen: list[bytes] = []
    stream = CappedStream("stdout", 8, seen.append)
    stream.write(b"abc")
    stream.write(b"defghij")
    stream.write(b"klm")
    assert seen == [b"abc", b"defgh"]  # only what was kept; nothing once the cap is full
    assert stream.listener_error is None


def test_a_listener_that_raises_is_detached_and_remembered() -> None:
    calls: list[bytes] = []

    def listener(chunk: bytes) -> None:
        calls.append(chunk)
        raise RuntimeError("listener broke")

    stream = CappedStream("stdout", 100, listener)
    assert stream.write(b"first") == 5
    assert stream.write(b"second") == 6
    assert calls == [b"first"]
    assert isinstance(stream.listener_error, RuntimeError)
    assert str(stream.listener_error) == "listener broke"
    assert stream.data() == b"firstsecond"  # output is still collected


def test_concurrent_writes_respect_the_cap() -> None:
    stream = CappedStream("stdout", 10_000)

    def writer() -> None:
        for _ in range(1000):
            stream.write(b"x" * 7)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(stream.data()) == 10_000
    assert stream.dropped_bytes == 8 * 1000 * 7 - 10_000

"""CappedStream: keeps output up to a cap, counts the rest, never lets a listener reach wasmtime."""

from __future__ import annotations

import threading

import pytest

from sandbox_kernel.core.output import CappedStream


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
    notice = stream.notice()
    assert notice == (
        "[sandbox: 1,499,083 bytes of stderr omitted; the policy caps stderr at 1,024 bytes, "
        "this notice included]\n"
    )
    text = stream.text()
    assert text == "e" * (1024 - len(notice) - 1) + "\n" + notice
    assert len(text.encode()) == 1024


@pytest.mark.parametrize("cap", [1, 10, 50, 100, 150, 200, 1000, 4096])
@pytest.mark.parametrize("payload", [b"x" * 5000, "é✓".encode() * 2000, b"line\n" * 2000])
def test_the_cap_is_the_cap_notice_included(cap: int, payload: bytes) -> None:
    stream = CappedStream("stdout", cap)
    stream.write(payload)
    text = stream.text()
    assert len(text.encode()) <= cap
    assert stream.truncated
    if cap >= 40:  # room for the short notice at least
        assert text.endswith("]\n") and payload.decode().startswith(text.split("\n[")[0])
    else:
        assert text == "[sandbox: stdout cut at"[:cap]


def test_the_notice_starts_on_its_own_line() -> None:
    stream = CappedStream("stdout", 300)
    stream.write(b"abc\n" + b"d" * 400)
    text = stream.text()
    body, notice = text.split("\n[sandbox: ")
    assert body.startswith("abc\nddd") and set(body[4:]) == {"d"}
    assert notice.endswith("this notice included]\n")
    assert len(text.encode()) <= 300


def test_no_notice_without_truncation() -> None:
    stream = CappedStream("stdout", 4)
    stream.write(b"abcd")
    assert stream.text() == "abcd"
    assert stream.notice() == ""


def test_text_replaces_invalid_utf8() -> None:
    stream = CappedStream("stdout", 100)
    stream.write(b"ok \xff\xfe end")
    assert stream.text() == "ok \ufffd\ufffd end"


def test_a_cut_inside_a_character_keeps_whole_characters() -> None:
    stream = CappedStream("stdout", 300)
    stream.write("é✓".encode() * 200)
    body = stream.text().split("\n[sandbox")[0]
    assert body and set(body) <= {"é", "✓"}


def test_the_listener_sees_what_text_returns() -> None:
    seen: list[bytes] = []
    stream = CappedStream("stdout", 1000, seen.append)
    stream.write(b"abc")
    assert seen == [b"abc"]  # far from the cap: at once
    stream.write(b"d" * 2000)
    stream.write(b"more")
    stream.close()
    assert b"".join(seen).decode() == stream.text()
    assert stream.listener_error is None


def test_the_listener_gets_the_held_tail_when_nothing_was_cut() -> None:
    seen: list[bytes] = []
    stream = CappedStream("stdout", 8, seen.append)
    stream.write(b"abcdefgh")  # exactly the cap: near it, so held until the end
    assert seen == []
    stream.close()
    stream.close()  # once only
    assert seen == [b"abcdefgh"] and stream.text() == "abcdefgh"


def test_a_listener_that_raises_is_detached_and_remembered() -> None:
    calls: list[bytes] = []

    def listener(chunk: bytes) -> None:
        calls.append(chunk)
        raise RuntimeError("listener broke")

    stream = CappedStream("stdout", 1000, listener)
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

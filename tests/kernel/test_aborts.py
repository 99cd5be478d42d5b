"""Arrivals (kernel/aborts.py) under every order of arrivals, failed replies and dispatches:
a request that arrives after a failed cell's reply went out is never aborted; one that arrived
before it and is dispatched after is."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sandbox_kernel.kernel.aborts import Arrivals


def wire(n: int) -> list[bytes]:
    return [b"client-identity", b"<IDS|MSG>", b"signature", f'{{"msg_id": "{n}"}}'.encode(), b"{}"]


@given(st.lists(st.sampled_from(["arrive", "fail", "dispatch"]), max_size=60))
def test_only_requests_that_came_before_a_failed_reply_are_aborted(steps: list[str]) -> None:
    arrivals = Arrivals()
    arrived: list[int] = []  # in order, not yet dispatched
    failures_seen: dict[int, int] = {}  # request -> failed replies sent before it arrived
    failures = 0
    for step in steps:
        if step == "arrive":
            n = len(failures_seen)
            failures_seen[n] = failures
            arrivals.stamp(wire(n))
            arrived.append(n)
        elif step == "fail":  # a failed cell's reply goes out, then ipykernel aborts
            arrivals.reply_going()
            arrivals.abort_queued()
            failures += 1
        elif arrived:
            n = arrived.pop(0)
            aborted = arrivals.aborts(arrivals.dispatched(wire(n)))
            assert aborted == (failures > failures_seen[n]), (n, steps)


def test_a_request_never_stamped_is_never_aborted() -> None:
    arrivals = Arrivals()
    arrivals.reply_going()
    arrivals.abort_queued()
    assert not arrivals.aborts(arrivals.dispatched(wire(1)))
    assert arrivals.dispatched([b"stop aborting"]) is None

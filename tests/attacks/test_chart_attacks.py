"""Attacks through a run's chart: whatever the guest sends as a chart (an SVG with script, HTML,
text that is not base64, a PNG over the cap) leaves the server only if it is a PNG within the
cap, as base64 the page puts in an <img> (tests/runner/test_chat_page.py renders a real one).
The guest's payload is not trusted: these are what a payload could carry.
"""

from __future__ import annotations

import base64

import pytest

from sandbox_kernel.runner import LimitHit
from sandbox_kernel.runner.api import PNG_SIGNATURE, checked_figure

SVG = (
    b'<svg xmlns="http://www.w3.org/2000/svg" onload="window.__pwned=1"><script>x()</script></svg>'
)


@pytest.mark.parametrize(
    "sent",
    [
        base64.b64encode(SVG).decode(),
        base64.b64encode(b"<img src=x onerror=alert(1)>").decode(),
        "data:image/png;base64," + base64.b64encode(PNG_SIGNATURE).decode(),
        "not base64 at all <script>",
        base64.b64encode(b"GIF89a" + PNG_SIGNATURE).decode(),
    ],
    ids=["svg-script", "html", "data-url", "not-base64", "png-signature-inside"],
)
def test_only_a_png_leaves_as_a_chart(sent: str) -> None:
    assert checked_figure(sent, 1_000_000) == (None, [])


def test_a_png_over_the_cap_is_left_out_and_said() -> None:
    big = base64.b64encode(PNG_SIGNATURE + bytes(5_000)).decode()
    assert checked_figure(big, 1_000) == (None, [LimitHit.MAX_FIGURE_BYTES])
    assert checked_figure(big, 10_000)[0] == big

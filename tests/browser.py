"""Debian's Chromium driven by Playwright, shared by the browser tests (JupyterLab's output
firewall, the agent server's page). Playwright never downloads a browser: bin/setup installs
Debian's chromium with apt-get, and a machine without it FAILS these tests with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = Path(os.environ.get("SANDBOX_KERNEL_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [  # no sandbox as root; none of Chromium's own calls to a closed network
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def chromium() -> Iterator[Any]:
    """A launched Chromium (Playwright's Browser), closed afterwards."""
    assert CHROMIUM.is_file(), (
        f"no Chromium at {CHROMIUM}: bin/setup installs Debian's chromium with apt-get "
        "(or set SANDBOX_KERNEL_CHROMIUM to a Chromium binary); this test does not skip"
    )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@contextmanager
def screenshot_on_failure(page: Any, folder: Path, name: str) -> Iterator[None]:
    """On a failure inside, a full-page screenshot in `folder` (its path is printed)."""
    try:
        yield
    except BaseException:
        shot = folder / f"{name}.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot of the failure: {shot}")
        raise

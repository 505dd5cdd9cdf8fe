"""A Chromium that never answers a close does not hang the run (tests/support/chromium.py).

Chromium is made unresponsive for real: SIGSTOP on every Chromium process this test process
started, as a hung browser would be. The close then waits, is cut off after its bound, the browser
is killed, and the next person gets a freshly launched browser."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
from support.chromium import ChromiumHung, chromium_pids, close_within


def test_a_close_chromium_never_answers_ends_after_its_bound_and_a_new_browser_follows(browser: Any) -> None:
    context = browser.new_context()
    page = context.new_page()
    page.goto("data:text/html,<p>hello</p>")
    first = browser.current()
    stopped = chromium_pids()
    assert stopped, "no Chromium process found below this test process"
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)

    started = time.monotonic()
    with pytest.warns(ChromiumHung, match="a browser context"):
        assert close_within(context.close, "a browser context", seconds=2) is False
    assert time.monotonic() - started < 20  # the bound, the kill and Playwright noticing it
    assert not first.is_connected()
    assert not set(stopped) & set(chromium_pids())  # every stopped process is gone

    again = browser.new_context()  # the module's browser is launched anew
    assert browser.current() is not first
    assert again.new_page().evaluate("6 * 7") == 42
    assert close_within(again.close, "a browser context") is True

"""Closing the browser tests' Chromium without ever hanging the test run.

Playwright's ``BrowserContext.close`` and ``Browser.close`` have no timeout: they wait for Chromium
to answer ``Target.disposeBrowserContext`` / ``Browser.close``. Once in about ten full runs the
Debian Chromium did not answer, and a CI run stood still in a test's teardown after every
assertion had passed (stop 13's note). ``close_within`` bounds that wait: if Chromium has not
answered after ``seconds``, the Chromium processes this test process started are killed, the
pending call returns with Playwright's ``TargetClosedError``, and a warning says so (the run goes
on, the test keeps its verdict: everything it checked had been checked). The next test that needs
a browser launches a new one (``Browsers`` in tests/system/browser/conftest.py).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable

from conftest import ROOT

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.server import process_tree  # noqa: E402 - the bench's /proc walk, one copy

CLOSE_WITHIN_S = 30.0


class ChromiumHung(UserWarning):
    """Chromium did not answer a close in time and was killed."""


def chromium_pids(root: int | None = None) -> list[int]:
    """The Chromium processes below ``root`` (default: this process; Playwright's driver is its
    child and Chromium the driver's)."""
    pids = []
    for pid in process_tree(os.getpid() if root is None else root):
        try:
            if os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("chromium"):
                pids.append(pid)
        except OSError:
            continue  # ended meanwhile
    return pids


def kill_chromium() -> int:
    killed = 0
    for pid in chromium_pids():
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            continue
    return killed


def close_within(close: Callable[[], object], what: str, seconds: float = CLOSE_WITHIN_S) -> bool:
    """Call a Playwright ``close``; True when Chromium answered, False when it had to be killed."""
    from playwright.sync_api import Error

    fired = threading.Event()

    def give_up() -> None:
        fired.set()
        kill_chromium()

    timer = threading.Timer(seconds, give_up)
    timer.daemon = True
    timer.start()
    try:
        close()
    except Error:
        if not fired.is_set():
            raise
    finally:
        timer.cancel()
    if fired.is_set():
        warnings.warn(
            f"Chromium did not close {what} within {seconds:.0f} s and was killed "
            "(a browser teardown hang; every check of the test had run)",
            ChromiumHung,
            stacklevel=2,
        )
        return False
    return True

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
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

CLOSE_WITHIN_S = 30.0


class ChromiumHung(UserWarning):
    """Chromium did not answer a close in time and was killed."""


def _children() -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # ended meanwhile
        parent = int(stat.rsplit(")", 1)[1].split()[1])  # after "(comm)": state, then the parent's pid
        found.setdefault(parent, []).append(int(entry))
    return found


def chromium_pids(root: int | None = None) -> list[int]:
    """The Chromium processes below ``root`` (default: this process; Playwright's driver is its
    child and Chromium the driver's)."""
    children = _children()
    below, todo = [], [os.getpid() if root is None else root]
    while todo:
        for child in children.get(todo.pop(), []):
            below.append(child)
            todo.append(child)
    pids = []
    for pid in below:
        try:
            if os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("chromium"):
                pids.append(pid)
        except OSError:
            continue
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

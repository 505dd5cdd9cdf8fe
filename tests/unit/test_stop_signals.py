"""grantd.web.stopping's hold on Sanic's start-up: Sanic's ``serve`` sets SIGTERM and SIGINT to
``SIG_IGN`` before it would install handlers of its own, and a signal then was discarded (stop 15).
The system tests send one from exactly there; these check the wrapper itself."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest
import sanic.server.runners as runners

from grantd.web import stopping


@pytest.fixture
def fresh_runners(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Sanic's own ``signal_func`` (restored afterwards), and this process's handlers put back."""
    monkeypatch.setattr(runners, "signal_func", signal.signal)
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_sanic_can_no_longer_ignore_the_stop_signals_and_everything_else_passes(fresh_runners: Any) -> None:
    def ours(signum: int, frame: Any) -> None:
        pass

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, ours)
    stopping.keep_sanic_from_ignoring_stop_signals()
    for signum in (signal.SIGTERM, signal.SIGINT):
        assert runners.signal_func(signum, signal.SIG_IGN) is ours
        assert signal.getsignal(signum) is ours  # still ours: the kernel never ignores them
    runners.signal_func(signal.SIGUSR1, signal.SIG_IGN)  # any other call is Sanic's as it was
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN
    runners.signal_func(signal.SIGTERM, signal.SIG_DFL)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_wrapping_twice_wraps_once(fresh_runners: Any) -> None:
    stopping.keep_sanic_from_ignoring_stop_signals()
    first = runners.signal_func
    stopping.keep_sanic_from_ignoring_stop_signals()
    assert runners.signal_func is first


def test_a_sanic_without_the_hook_stops_the_start_with_a_plain_reason(
    fresh_runners: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(runners, "signal_func")
    with pytest.raises(RuntimeError, match="signal_func"):
        stopping.keep_sanic_from_ignoring_stop_signals()

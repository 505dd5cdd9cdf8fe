"""SIGTERM and SIGINT stop a server process, however early or late in its start they come (D18).

One handler of ours owns the two signals from the end of the checks to the end of the process:
``EarlyStop`` holds a signal until the event loop runs, then ``Stopper`` takes them over and stops
the server. Sanic never handles them (``register_sys_signals=False``), and its start-up is kept
from ignoring them (``keep_sanic_from_ignoring_stop_signals``).

Why so much care: each window in which nothing of ours held the signals lost a stop in CI, and a
lost stop is a server that serves on after it was told to end (issues 12 and 20, stop 15):

- Sanic's ``serve`` sets SIGTERM and SIGINT to ``SIG_IGN`` and only then installs its own handlers
  (``sanic/server/runners.py``, ``_setup_system_signals``). The kernel discards a signal that comes
  while a signal is ignored. The window is two system calls wide, unless another thread holds the
  GIL then (up to the 5 ms switch interval): 1 in about 200 starts in CI was signalled there.
- uvloop hears a signal only while the loop runs (its self-pipe is the wakeup fd only then): one
  that came between two of Sanic's ``run_until_complete`` calls was parked and never acted on.
- Sanic's ``app.stop()`` is ``loop.stop()``; under uvloop one that lands while the after-start
  listeners run (inside ``run_until_complete``) is used up by that call, or ends it with "Event
  loop stopped before Future completed" (a failed start instead of a stop).

A Python-level handler runs between any two bytecodes of the main thread, whether or not the loop
runs, and hands the stop to the loop with ``call_soon_threadsafe``; the stop itself waits until the
last after-start listener has returned and is repeated until Sanic's shutdown has begun.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Callable
from typing import Any

from sanic import Sanic

from grantd.logs import LOGGER
from grantd.web.state import state_of

log = logging.getLogger(LOGGER)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# D18: grantd serve ends within its grace period (``server.graceful_shutdown_timeout``). Of that
# budget, in-flight requests get all but STOP_MARGIN, which is kept for ending the process after
# them (closing the storage, the sequencer's lease, Sanic's own clean-up: ~0.3 s measured).
STOP_MARGIN = 0.5


def drain_time(grace: float) -> float:
    """What in-flight requests get of a stop's ``grace`` (Sanic's GRACEFUL_SHUTDOWN_TIMEOUT)."""
    return max(0.0, grace - STOP_MARGIN)


def kill_after(grace: float) -> float:
    """When, after the stop signal, whatever of the server still runs is killed."""
    return max(grace, STOP_MARGIN)


def keep_sanic_from_ignoring_stop_signals() -> None:
    """Sanic's ``serve`` calls ``signal_func(SIGTERM, SIG_IGN)`` (and SIGINT) unconditionally, even
    with ``register_sys_signals=False``; the handler of ours in place then must stay, or a signal
    in that window is discarded by the kernel. Sanic offers no setting for this, so its module's
    ``signal_func`` is wrapped to leave those two alone (every other call passes through). If a
    Sanic release no longer has it, the start fails here, loudly, instead of losing stops again."""
    from sanic.server import runners

    current = getattr(runners, "signal_func", None)
    if current is None:
        raise RuntimeError(
            "this Sanic release has no sanic.server.runners.signal_func: grantd cannot keep its start-up "
            "from ignoring SIGTERM (grantd.web.stopping); install the Sanic version grantd was tested with"
        )
    if getattr(current, "keeps_stop_signals", False):
        return

    def signal_func(signum: int, handler: Any) -> Any:
        if signum in STOP_SIGNALS and handler == signal.SIG_IGN:
            return signal.getsignal(signum)
        return current(signum, handler)

    signal_func.keeps_stop_signals = True  # type: ignore[attr-defined]
    setattr(runners, "signal_func", signal_func)  # noqa: B010 - a module global of Sanic's, typed as signal.signal


def exit_now(signum: int) -> None:
    """A second stop signal: this process ends at once (the processes it started get SIGTERM from the
    kernel, ``PR_SET_PDEATHSIG``). What it wrote is safe: every write is a database transaction."""
    log.warning("second stop signal: exiting now, without a graceful stop")
    os._exit(128 + signum)


def expected_twice(signum: int) -> None:
    """A second stop signal to one of the *other* server processes of a group is expected, not a
    hurry: systemd's control-group stop and a terminal's Ctrl-C signal every process of the group,
    and the first process then sends its own SIGTERM. Only the first process's second signal kills
    (and it kills these too)."""


class EarlyStop:
    """This process's stop signals, from the end of the checks to its end. Until the server's loop
    runs (``Stopper`` takes them over then) a signal is held: the default action would end this
    process in the middle of its start (its other processes or the sequencer half started); a held
    signal stops the start instead. ``on_second``: what a second signal does, whenever it comes."""

    def __init__(self, on_second: Callable[[int], None] = exit_now) -> None:
        self.requested = False
        self.on_second = on_second
        keep_sanic_from_ignoring_stop_signals()
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._hold)

    def _hold(self, signum: int, frame: Any) -> None:
        if self.requested:  # a second one: the start (a long migration, a slow plugin) is not waited for
            self.on_second(signum)
            return
        self.requested = True


class Stopper:
    """SIGTERM/SIGINT stop one single-process Sanic server (``app.prepare(...,
    register_sys_signals=False)``); a second signal calls ``early.on_second``.

    The first after-start listener takes the signals over from ``early`` (and stops at once if it
    held one). A stop that comes while the after-start listeners still run (a plugin's, or the
    storage's) is held until the last of them has returned (issue 20 item 2), then repeated every
    ``RETRY`` s until Sanic's shutdown has begun (the first before-stop listener says so): a
    ``loop.stop()`` can be used up by a ``run_until_complete`` of Sanic's start under uvloop."""

    RETRY = 0.25

    def __init__(self, app: Any, *, early: EarlyStop, grace: float = 0.0):
        self.app = app
        self.early = early
        self.grace = grace
        self.signals = 0
        self.requested = False
        self.shutting_down = False
        self.started = False  # every after-start listener has returned
        self.loop: Any = None
        # grantd.web.app.GrantdApp.stop (code that stops the app) asks us
        state_of(app).stopper = self
        # Priorities: take the signals before any other after-start listener runs, learn when the
        # last one has returned, and learn that the shutdown began before any other before-stop
        # listener awaits.
        app.after_server_start(self._take_signals, priority=10_000)
        app.after_server_start(self._after_start_done, priority=-10_000)
        app.before_server_stop(self._shutdown_began, priority=10_000)

    async def _take_signals(self, app: Any) -> None:
        import asyncio

        self.loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._os_signal)
        if self.early.requested:  # held until now
            log.info("stop signal received while starting: stopping")
            self.stop()

    async def _after_start_done(self, app: Any) -> None:
        self.started = True
        if self.requested:  # held while the after-start listeners ran
            self._stop_until_it_stops()

    async def _shutdown_began(self, app: Any) -> None:
        self.shutting_down = True

    def _os_signal(self, signum: int, frame: Any) -> None:
        """The process's handler (between two bytecodes of the main thread, the loop running or
        not): a second signal acts at once, the first is handed to the loop."""
        self.signals += 1
        if self.signals > 1 or self.early.requested:  # a second one (the first may have been held)
            self.early.on_second(signum)
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: the process is ending anyway
            self.loop.call_soon_threadsafe(self.on_signal, signum)

    def on_signal(self, signum: int) -> None:
        """The first stop signal, on the loop."""
        log.info(
            "received %s: stopping (in-flight requests get %s s)", signal.Signals(signum).name, self.grace
        )
        self.stop()

    def stop_asked(self) -> None:
        """``app.stop()``: code that stops the app."""
        if not self.requested:
            log.info("stop requested: stopping (in-flight requests get %s s)", self.grace)
        self.stop()

    def stop(self) -> None:
        """Stop the server (also when not asked by a signal: the group stops itself this way)."""
        if self.requested:
            return  # already repeating until the shutdown begins (or held until the start is done)
        self.requested = True
        if self.started:
            self._stop_until_it_stops()

    def _stop_until_it_stops(self) -> None:
        import asyncio

        if self.shutting_down:
            return
        Sanic.stop(self.app, terminate=False)
        (self.loop or asyncio.get_event_loop()).call_later(self.RETRY, self._stop_until_it_stops)

"""A plugin that sends SIGTERM to the first server process at the moment Sanic's start-up sets
SIGTERM and SIGINT to ``SIG_IGN`` (``sanic/server/runners.py``, ``_setup_system_signals``, through
its module's ``signal_func``), before Sanic would install handlers of its own: a signal then was
discarded by the kernel and the server served on (1 start in about 200 in CI; grantd.web.stopping).
Only the first process (``grantd serve``, not one of the processes it starts) signals itself, once,
and says so in the log so that a test cannot pass without the signal having been sent."""

from __future__ import annotations

import logging
import os
import signal
import sys

import sanic.server.runners as runners

from grantd.hookspecs import hookimpl

_sent = False


def _wrap(inner):  # type: ignore[no-untyped-def]
    def signal_func(signum, handler):  # type: ignore[no-untyped-def]
        global _sent
        result = inner(signum, handler)
        if (
            signum == signal.SIGTERM
            and handler == signal.SIG_IGN
            and not _sent
            and "--ready-fd" not in sys.argv
        ):
            _sent = True
            logging.getLogger("grantd").warning("test plugin: SIGTERM sent where Sanic ignores it")
            os.kill(os.getpid(), signal.SIGTERM)
        return result

    signal_func.wrapped_by_test_plugin = True
    return signal_func


@hookimpl
def register_routes(app, config):
    # Wrapped outermost (after grantd.web.stopping's own wrapper, made before the app): Sanic's call
    # is seen as Sanic makes it.
    if not getattr(runners.signal_func, "wrapped_by_test_plugin", False):
        runners.signal_func = _wrap(runners.signal_func)

"""A plugin that sends SIGTERM to the first server process from inside Sanic's "Worker ready" log
call (tests/system/test_stop_signals.py). That call sits between the last ``run_until_complete`` of
the start and ``run_forever``: the event loop is not running, the moment where uvloop parked a
signal and the server then served on (grantd.web.stopping.Stopper). Only the first process
(``grantd serve``, not one of the processes it starts) signals itself, once."""

from __future__ import annotations

import logging
import os
import signal
import sys

from grantd.hookspecs import hookimpl


class _SignalOnReady(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("Worker ready") and "--ready-fd" not in sys.argv:
            os.kill(os.getpid(), signal.SIGTERM)
        return True


_FILTER = _SignalOnReady()


@hookimpl
def register_routes(app, config):
    server_log = logging.getLogger("sanic.server")
    if _FILTER not in server_log.filters:
        server_log.addFilter(_FILTER)

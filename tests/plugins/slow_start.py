"""A plugin that makes the start slow (tests/system/test_stop_signals.py): while the app is made
it writes ``slow-start-PID`` beside the config and sleeps ``SLEEP`` s, as a long migration or a slow
plugin would. A stop signal then is held until the server runs (grantd.web.stopping.EarlyStop); a
second one ends the process at once."""

from __future__ import annotations

import os
import time
from pathlib import Path

from grantd.hookspecs import hookimpl

SLEEP = 30.0


@hookimpl
def register_routes(app, config):
    (Path(config.base_dir) / f"slow-start-{os.getpid()}").write_text("")
    time.sleep(SLEEP)

"""A plugin whose after-start listener takes a while (tests/system/test_stop_signals.py): it writes
``after-start-PID`` beside the config when it begins, then sleeps ``SLEEP`` s. A stop signal that
lands in that sleep is one that lands while Sanic still runs its after-start listeners, the moment
where a stop used to be used up (grantd.web.stopping.Stopper)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from grantd.hookspecs import hookimpl

SLEEP = 1.0


@hookimpl
def register_routes(app, config):
    @app.after_server_start
    async def slow_after_start(app):
        (Path(config.base_dir) / f"after-start-{os.getpid()}").write_text("")
        await asyncio.sleep(SLEEP)

"""A plugin with a route that takes ``SLEEP`` s to answer (tests/system/test_stop_signals.py): an
in-flight request that a graceful stop waits for, up to ``graceful_shutdown_timeout``. The handler
writes ``slow-route-PID`` beside the config when it begins."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from sanic.response import json

from grantd.hookspecs import hookimpl

SLEEP = 60.0


@hookimpl
def register_routes(app, config):
    @app.get("/slow-route/sleep")
    async def sleep(request):
        (Path(config.base_dir) / f"slow-route-{os.getpid()}").write_text("")
        await asyncio.sleep(SLEEP)
        return json({"slept": SLEEP})

"""A third-party plugin as an operator would write one, loaded through `[plugins] modules`.

It proves that external plugins are imported from the config, registered, and that their hooks
are called: `startup` records a marker file; `register_routes` adds a route.
"""

from __future__ import annotations

import os
from pathlib import Path

from sanic.response import json

from grantd.hookspecs import hookimpl

__version__ = "1.2.3"


@hookimpl
def register_routes(app, config):
    @app.get("/sample-plugin/ping")
    async def ping(request):
        return json({"plugin": "sample", "issuer": config.server.issuer})


@hookimpl
async def startup(app, config):
    marker = Path(config.base_dir) / "sample-plugin-started"
    with open(marker, "a") as fh:
        fh.write(f"{os.getpid()}\n")

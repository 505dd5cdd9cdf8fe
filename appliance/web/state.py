"""The typed state of one server process: what used to be untyped attributes of Sanic's ``app.ctx``.

The app is made with ``ctx=ProcessState(...)``; routes reach it through ``state_of(request)`` (and
the services through ``grantd.web.api.common.services_of``). What the services need (the store,
caches, the federation providers, ...) is in ``grantd.services.context.Services``; what only the web
layer holds is here: the metrics of this process and the SP login's caches (grantd.sp sits above
the services, so the services never hold it).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pluggy
from sanic import Request, Sanic

from grantd.config import Config

if TYPE_CHECKING:  # only types: these modules import this one
    from grantd.services.context import Services
    from grantd.sp.login import SpLogin
    from grantd.web.api.metrics import Metrics
    from grantd.web.stopping import Stopper


@dataclass(eq=False)
class ProcessState:
    config: Config
    pm: pluggy.PluginManager
    services: Services | None = None  # opened before the server starts (create_app's open_storage)
    metrics: Metrics | None = None  # [metrics] enabled: this process's counters
    metrics_streams: asyncio.Task[None] | None = None  # the task following the open-stream gauge
    sp_login: SpLogin | None = None  # [sp] enabled: made on the first login (its caches)
    sweeper: asyncio.Task[None] | None = None  # the expiry sweep of this process
    notifier: asyncio.Task[None] | None = None  # the notification delivery worker of this process (D15)
    stopper: Stopper | None = None  # grantd.web.processes: how a signal stops this process
    process_group_watch: asyncio.Task[None] | None = None  # the first process watching the others
    orphan_check: asyncio.Task[None] | None = None  # another process watching for the first one's end
    # False: `grantd serve` runs the decision log's sequencer in a process of its own (grantd.web.sequencer)
    inline_sequencer: bool = True
    sequencer_watch: asyncio.Task[None] | None = None  # the first process watching that process


def state_of(app_or_request: Sanic | Request) -> ProcessState:
    app = app_or_request.app if isinstance(app_or_request, Request) else app_or_request
    state = app.ctx
    if not isinstance(state, ProcessState):
        raise TypeError("not a grantd app (its ctx is not a ProcessState)")
    return state

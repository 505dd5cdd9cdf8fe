"""``GET /metrics``: Prometheus text format (issue 12), off unless ``[metrics] enabled = true``.

What is exported (``grantd_`` prefix):

- ``http_requests_total{route, method, status}`` and ``http_request_duration_seconds{route, method}``
  (a histogram): ``route`` is the route's pattern (``/api/grants/<grant_id:str>``), never the path a
  client sent, so a scan of random URLs cannot create series (unmatched requests are ``route="-"``);
- ``grants{status}`` and ``oldest_pending_grant_age_seconds``: read from the store at scrape time
  (``store.grants.summary``: index counts, no rows loaded), as every reader sees them (lapsed grants
  count as ``expired``);
- ``event_streams``: open ``GET /api/grants/events`` streams, summed over live processes;
- ``rate_limit_refusals_total{limit}``: 429s of the abuse limits (D12), by limit.

Several worker processes: a scrape reaches one worker, so counters live in prometheus-client's
multiprocess mode: ``grantd serve`` makes a private (0700) directory, points
``PROMETHEUS_MULTIPROC_DIR`` at it before any worker starts, and removes it on exit; each process
writes its values into memory-mapped files there and a scrape adds them up. One process (the
bundle, ``workers = 1``) keeps them in memory. docs/operations.md has the measured cost.

With ``[metrics] token`` set, a scrape needs ``Authorization: Bearer <token>`` (compared in
constant time); without it the endpoint is open to whoever reaches the port — bind it to a
private network or put the token on.

prometheus-client is imported only when metrics are on.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import shutil
import tempfile
import time
from typing import Any

from sanic import Blueprint, Request, Sanic
from sanic.response import HTTPResponse, raw

from grantd.config import Config
from grantd.core.errors import Problem
from grantd.web.api.common import services_of
from grantd.web.state import state_of

bp = Blueprint("metrics")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
DIR_PREFIX = "grantd-metrics-"
STREAMS_REFRESH = 1.0  # seconds between updates of this process's open-stream gauge
# Request latency buckets (seconds): grantd answers most requests in well under a millisecond of CPU.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
UNMATCHED = "-"


def prepare_process_dir(config: Config, *, multiprocess: bool) -> str | None:
    """Before workers start (in the process that spawns them): a fresh private directory for the
    workers' metric files, named in the environment they inherit. None when there is nothing to do."""
    if not (config.metrics.enabled and multiprocess):
        return None
    directory = tempfile.mkdtemp(prefix=DIR_PREFIX)  # mode 0700, owned by us
    os.environ[MULTIPROC_ENV] = directory
    return directory


def process_gone(pid: int) -> None:
    """A server process ended without its own clean-up (killed, crashed): its live gauges leave the
    sums. Called by the first process, which sees the others end (grantd.web.processes)."""
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)


def remove_process_dir(directory: str | None) -> None:
    if directory:
        shutil.rmtree(directory, ignore_errors=True)
        if os.environ.get(MULTIPROC_ENV) == directory:
            del os.environ[MULTIPROC_ENV]


class Metrics:
    """The metrics of one server process."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.multiprocess = bool(os.environ.get(MULTIPROC_ENV))
        # One registry per app (an in-process test server may build several apps in one process);
        # in multiprocess mode the values themselves live in the shared directory's files.
        self.own = CollectorRegistry()
        own = self.own
        self.requests = Counter(
            "grantd_http_requests_total",
            "HTTP requests answered, by route pattern, method and status.",
            ["route", "method", "status"],
            registry=own,
        )
        self.latency = Histogram(
            "grantd_http_request_duration_seconds",
            "Time from request to response (not streamed bodies), by route pattern.",
            ["route", "method"],
            buckets=BUCKETS,
            registry=own,
        )
        self.refusals = Counter(
            "grantd_rate_limit_refusals_total",
            "Requests refused with 429 by an abuse limit (D12), by limit.",
            ["limit"],
            registry=own,
        )
        self.streams = Gauge(
            "grantd_event_streams",
            "Open GET /api/grants/events streams (all server processes).",
            multiprocess_mode="livesum",
            registry=own,
        )
        self._registry: Any = None
        self._children: dict[tuple[str | None, str, int], tuple[Any, Any]] = {}

    def observe(self, request: Request, status: int) -> None:
        route = request.route
        key = (
            route.path if route is not None else None,
            request.method if route is not None else UNMATCHED,
            status,
        )
        children = self._children.get(key)
        if children is None:  # once per (route pattern, method, status): a bounded set
            pattern = "/" + key[0] if key[0] is not None else UNMATCHED
            children = self._children[key] = (
                self.requests.labels(pattern, key[1], str(status)),
                self.latency.labels(pattern, key[1]),
            )
        children[0].inc()
        started = getattr(request.ctx, "started", None)
        if started is not None:
            children[1].observe(time.perf_counter() - started)

    def refused(self, limit: str) -> None:
        self.refusals.labels(limit).inc()

    def registry(self) -> Any:
        """What a scrape reads: every process's files (multiprocess mode) or this process's values."""
        if self._registry is None:
            from prometheus_client import CollectorRegistry
            from prometheus_client.multiprocess import MultiProcessCollector

            if self.multiprocess:
                self._registry = CollectorRegistry()
                MultiProcessCollector(self._registry)
            else:
                self._registry = self.own
        return self._registry


async def _store_lines(request: Request) -> str:
    """The store's figures, read now, in the text format."""
    services = services_of(request)
    counts, oldest = await services.store.grants.summary(services.grant_lapse())
    lines = [
        "# HELP grantd_grants Grants by status, as clients read them (lapsed ones count as expired).",
        "# TYPE grantd_grants gauge",
    ]
    for status in sorted({"pending", "approved", "denied", "revoked", "consumed", "expired", *counts}):
        lines.append(f'grantd_grants{{status="{_label(status)}"}} {int(counts.get(status, 0))}')
    age = max(0.0, (services.clock.now_ms() - oldest) / 1000) if oldest is not None else 0.0
    lines += [
        "# HELP grantd_oldest_pending_grant_age_seconds Age of the oldest pending grant (0 when none waits).",
        "# TYPE grantd_oldest_pending_grant_age_seconds gauge",
        f"grantd_oldest_pending_grant_age_seconds {age:.3f}",
    ]
    return "\n".join(lines) + "\n"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _authorized(request: Request, token: str) -> bool:
    header = request.headers.get("authorization", "")
    scheme, _, presented = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode())


@bp.get("/metrics")
async def metrics(request: Request) -> HTTPResponse:
    state = state_of(request)
    config, collected = state.config, state.metrics
    if not config.metrics.enabled or collected is None:
        raise Problem(404, "no such route")
    token = config.metrics.token
    if token and not _authorized(request, token):
        raise Problem(
            401, "metrics need the [metrics] token", headers={"WWW-Authenticate": 'Bearer realm="metrics"'}
        )
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    body = generate_latest(collected.registry()) + (await _store_lines(request)).encode()
    return raw(body, content_type=CONTENT_TYPE_LATEST, headers={"Cache-Control": "no-store"})


def install(app: Sanic, config: Config) -> None:
    """Count every answer and the limits' refusals in this process (no-op when metrics are off)."""
    if not config.metrics.enabled:
        return
    collected = Metrics()
    state = state_of(app)
    state.metrics = collected

    @app.on_response(priority=95)  # type: ignore[call-arg]
    async def count_response(request: Request, response: HTTPResponse) -> None:
        collected.observe(request, response.status)

    @app.after_server_start
    async def follow_streams(app: Sanic) -> None:
        services = state.services
        assert services is not None  # opened before the server starts
        services.limits.on_refused = collected.refused
        state.metrics_streams = asyncio.get_running_loop().create_task(
            _follow_streams(services, collected), name="metrics-streams"
        )

    @app.before_server_stop
    async def stop_following(app: Sanic) -> None:
        task = state.metrics_streams
        if task is not None:
            task.cancel()
        if collected.multiprocess:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(os.getpid())  # this process's live gauge leaves the sums


async def _follow_streams(services: Any, collected: Metrics) -> None:
    while True:
        collected.streams.set(len(services.events.subscribers))
        await asyncio.sleep(STREAMS_REFRESH)

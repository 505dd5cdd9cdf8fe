"""Sanic app factory and server runner."""

from __future__ import annotations

import asyncio
import logging
import re
import sys
import time
import uuid
from functools import partial
from typing import Any

import pluggy
from sanic import Request, Sanic
from sanic.exceptions import SanicException
from sanic.response import HTTPResponse, json
from sanic.worker.loader import AppLoader

from grantd.client_address import client_address
from grantd.config import Config, load
from grantd.core.clock import SYSTEM_CLOCK, Clock
from grantd.core.errors import Problem
from grantd.logs import ACCESS_LOGGER, LOGGER, log_config
from grantd.plugin_manager import build_federation_providers, build_plugin_manager, call_async_hook
from grantd.services.context import Services, open_services
from grantd.services.grants import sweep_expired

log = logging.getLogger(LOGGER)
access_log = logging.getLogger(ACCESS_LOGGER)

_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
PROBLEM_JSON = "application/problem+json"
APP_NAME = "grantd"


def is_frozen() -> bool:
    return bool(getattr(sys, "frozen", False))


def problem_response(problem: Problem, request_id: str | None = None) -> HTTPResponse:
    headers = dict(problem.headers)
    if request_id:
        headers["X-Request-ID"] = request_id
    return json(problem.body(), status=problem.status, headers=headers, content_type=PROBLEM_JSON)


def _problem_from_exception(request: Request, exc: Exception) -> Problem:
    if isinstance(exc, Problem):
        return exc
    if isinstance(exc, SanicException):
        status = int(getattr(exc, "status_code", 500) or 500)
        if status >= 500:
            return Problem(status, "internal server error")
        detail = {
            404: "no such route",
            405: f"method {request.method} not allowed here",
            413: "request body too large",
            408: "request timed out",
        }.get(status, str(exc.args[0]) if exc.args else "bad request")
        headers = {k: v for k, v in (getattr(exc, "headers", None) or {}).items() if k.lower() == "allow"}
        return Problem(status, detail, headers=headers)
    return Problem(500, "internal server error")


def create_app(config: Config, pm: pluggy.PluginManager | None = None, clock: Clock = SYSTEM_CLOCK) -> Sanic:
    """The server app. ``clock`` is the source of time for everything it decides (tests pass a
    ManualClock to an in-process server)."""
    pm = pm or build_plugin_manager(config)
    app = Sanic(APP_NAME, log_config=log_config(config.log.level, config.log.format), env_prefix=None)
    app.config.update(
        {
            "REQUEST_MAX_SIZE": config.server.max_body_bytes,
            "REQUEST_TIMEOUT": config.server.request_timeout,
            "GRACEFUL_SHUTDOWN_TIMEOUT": config.server.graceful_shutdown_timeout,
            "ACCESS_LOG": False,  # our own access line below carries the request id
            "MOTD": False,
            "TOUCHUP": not is_frozen(),
            "NOISY_EXCEPTIONS": False,
            "FALLBACK_ERROR_FORMAT": "json",
            "KEEP_ALIVE_TIMEOUT": 30,
        }
    )
    app.ctx.config = config
    app.ctx.pm = pm
    app.ctx.federation = build_federation_providers(pm, config)  # a bad provider table stops the start here

    from grantd.web.api import admin, agents, delegations, federation, grants, health, wellknown

    for module in (health, wellknown, agents, admin, grants, delegations, federation):
        app.blueprint(module.bp)
    pm.hook.register_routes(app=app, config=config)

    @app.before_server_start
    async def open_storage(app: Sanic) -> None:
        app.ctx.services = await open_services(config, pm, clock)
        await call_async_hook(pm.hook.startup, app=app, config=config)

    @app.after_server_start
    async def start_background_work(app: Sanic) -> None:
        services = app.ctx.services
        services.store.serving()
        services.events.start()
        app.ctx.sweeper = asyncio.get_running_loop().create_task(_sweep_forever(services), name="expiry-sweeper")

    @app.before_server_stop
    async def stop_background_work(app: Sanic) -> None:
        services = getattr(app.ctx, "services", None)
        if services is None:
            return
        sweeper = getattr(app.ctx, "sweeper", None)
        if sweeper is not None:
            sweeper.cancel()
        await services.events.close()  # open event streams end now instead of holding up the shutdown

    @app.after_server_stop
    async def close_storage(app: Sanic) -> None:
        services = getattr(app.ctx, "services", None)
        if services is not None:
            services.store.close()

    @app.on_request(priority=100)  # type: ignore[call-arg]
    async def start_request(request: Request) -> None:
        incoming = request.headers.get("x-request-id", "")
        request.ctx.request_id = incoming if _REQUEST_ID_RE.match(incoming) else uuid.uuid4().hex
        request.ctx.started = time.perf_counter()
        request.ctx.client_ip = client_address(request.ip, request.headers.get("x-forwarded-for"), config.server.trusted_proxies)

    @app.on_response(priority=100)  # type: ignore[call-arg]
    async def finish_request(request: Request, response: HTTPResponse) -> None:
        request_id = getattr(request.ctx, "request_id", None) or uuid.uuid4().hex
        headers = response.headers
        headers.setdefault("X-Request-ID", request_id)
        headers.setdefault("X-Content-Type-Options", "nosniff")
        headers.setdefault("Referrer-Policy", "strict-origin-when-cross-origin")
        headers.setdefault("X-Frame-Options", "DENY")
        headers.setdefault("Content-Security-Policy", "frame-ancestors 'none'")
        if request.path.startswith("/api/"):
            headers.setdefault("Cache-Control", "no-store")
        if config.log.access:
            started = getattr(request.ctx, "started", None)
            duration = round((time.perf_counter() - started) * 1000, 2) if started else None
            access_log.info(
                "%s %s %s %sms",
                request.method,
                request.path,
                response.status,
                duration,
                extra={
                    "request_id": request_id,
                    "method": request.method,
                    "path": request.path,
                    "status": response.status,
                    "duration_ms": duration,
                    "remote": getattr(request.ctx, "client_ip", request.ip),
                },
            )

    @app.exception(Exception)
    async def render_error(request: Request, exc: Exception) -> HTTPResponse:
        problem = _problem_from_exception(request, exc)
        request_id = getattr(request.ctx, "request_id", None) if request else None
        if problem.status >= 500:
            log.error("unhandled error on %s %s", request.method, request.path, exc_info=exc, extra={"request_id": request_id})
        return problem_response(problem, request_id)

    return app


async def _sweep_forever(services: Services) -> None:
    """Persist expiries so that clients following events learn of them (every process sweeps;
    the conditional update makes each expiry happen once)."""
    interval = services.config.grants.expiry_sweep_interval
    while True:
        await asyncio.sleep(interval)
        try:
            await sweep_expired(services)
        except Exception:
            log.exception("expiry sweep failed; retrying")


def create_app_from_path(config_path: str) -> Sanic:
    """Factory used by each worker process (it re-reads the config; secrets come from files/env)."""
    return create_app(load(config_path))


async def prepare_storage(config: Config, pm: pluggy.PluginManager) -> dict[str, Any]:
    """Run migrations and make sure a signing key exists, once, before workers start."""
    services = await open_services(config, pm)
    try:
        return {"schema_version": services.store.schema_version(), "kid": (await services.keyring.signing_key()).kid}
    finally:
        services.store.close()


def serve(config: Config) -> None:
    pm = build_plugin_manager(config)
    asyncio.run(prepare_storage(config, pm))
    workers = config.server.workers
    single = is_frozen() or workers == 1
    if is_frozen() and workers > 1:
        log.warning("the bundle serves in one process; [server] workers = %d is ignored", workers)
    assert config.path is not None
    loader = AppLoader(factory=partial(create_app_from_path, str(config.path)))
    app = loader.load()
    app.prepare(
        host=config.server.host,
        port=config.server.port,
        workers=1 if single else workers,
        single_process=single,
        access_log=False,
        motd=False,
    )
    log.info(
        "grantd listening on http://%s:%s (issuer %s, %d process%s)",
        config.server.host,
        config.server.port,
        config.server.issuer,
        1 if single else workers,
        "" if single else "es",
    )
    if single:
        Sanic.serve_single(primary=app)
    else:
        Sanic.serve(primary=app, app_loader=loader)

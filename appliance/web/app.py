"""Sanic app factory and server runner."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
import time
from typing import Any

import pluggy
from sanic import Request, Sanic
from sanic.exceptions import BadRequest, SanicException
from sanic.models.server_types import ConnInfo
from sanic.response import HTTPResponse, json

from grantd.client_address import client_address, shared_address_warning
from grantd.config import Config
from grantd.core import json_codec
from grantd.core.clock import SYSTEM_CLOCK, Clock
from grantd.core.errors import Problem
from grantd.logs import ACCESS_LOGGER, LOGGER, log_config
from grantd.plugin_manager import (
    build_federation_providers,
    build_plugin_manager,
    call_async_hook,
    load_with_plugins,
)
from grantd.services.context import Services, open_services
from grantd.services.grant_sweeps import sweep_expired
from grantd.services.notify_delivery import DeliveryWorker
from grantd.web import csrf, lean_headers
from grantd.web.api import audit as audit_api
from grantd.web.api import metrics as metrics_api
from grantd.web.api.common import clear_stale_session_cookie
from grantd.web.state import ProcessState, state_of
from grantd.web.stopping import drain_time
from grantd.web.views import error_page

log = logging.getLogger(LOGGER)
access_log = logging.getLogger(ACCESS_LOGGER)

_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
# Set on every answer unless the route chose its own value.
SECURITY_HEADERS = (
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "strict-origin-when-cross-origin"),
    ("X-Frame-Options", "DENY"),
    ("Content-Security-Policy", "frame-ancestors 'none'"),
)
PROBLEM_JSON = "application/problem+json"
QUIET_PEERS_KEPT = 4096  # addresses remembered as needing no shared-address warning (then forgotten)
APP_NAME = "grantd"


class GrantdApp(Sanic):
    """Sanic, whose ``stop`` goes through the process's stopper when it has one
    (``grantd.web.stopping.Stopper``): a plain ``loop.stop()`` while Sanic still starts can be used
    up by one of its ``run_until_complete`` calls, and the server then serves on."""

    def stop(self, terminate: bool = True, unregister: bool = False) -> None:
        stopper = self.ctx.stopper if isinstance(self.ctx, ProcessState) else None
        if stopper is not None and not unregister:
            stopper.stop_asked()
            return
        super().stop(terminate=terminate, unregister=unregister)


def is_frozen() -> bool:
    return bool(getattr(sys, "frozen", False))


def problem_response(problem: Problem, request_id: str | None = None) -> HTTPResponse:
    headers = dict(problem.headers)
    if request_id:
        headers["X-Request-ID"] = request_id
    return json(problem.body(), status=problem.status, headers=headers, content_type=PROBLEM_JSON)


_UNPARSABLE_URL_BYTES = re.compile(rb"[\x00-\x20\x7f-\xff]")
_REPEATED_SLASHES = re.compile(rb"//+")


def collapse_slashes(url_bytes: bytes) -> bytes:
    """``//api//grants?x=a//b`` -> ``/api/grants?x=a//b``: repeated slashes in the path become one
    (clients that join a base URL ending in ``/`` send ``//api/...``, D6); the query string and
    anything that is not an origin-form path are left exactly as sent."""
    if not url_bytes.startswith(b"/") or b"//" not in url_bytes:
        return url_bytes
    cut = min((i for i in (url_bytes.find(b"?"), url_bytes.find(b"#")) if i >= 0), default=len(url_bytes))
    return _REPEATED_SLASHES.sub(b"/", url_bytes[:cut]) + url_bytes[cut:]


class MalformedURL(BadRequest):
    """A request line whose URL does not parse (its text is not echoed: it may hold anything)."""


class GrantdRequest(Request):
    """Sanic's request, made safe for a malformed request line.

    When a request line's URL does not parse (a raw ESC, NUL or space in the path), Sanic builds a
    stand-in request (method ``NONE``) for its error response from the same URL, fails again and
    drops the connection with a traceback in the log. The stand-in gets the URL with those bytes
    percent-encoded instead, so the client gets a 400 problem and the log one access line."""

    def __init__(self, url_bytes: bytes, *args: Any, **kwargs: Any) -> None:
        url_bytes = collapse_slashes(url_bytes)  # before routing: the router only sees the clean path
        try:
            super().__init__(url_bytes, *args, **kwargs)
        except BadRequest:
            if kwargs.get("method") != "NONE":
                raise MalformedURL("malformed request URL") from None
            escaped = _UNPARSABLE_URL_BYTES.sub(lambda m: b"%%%02X" % m[0][0], url_bytes)
            super().__init__(escaped, *args, **kwargs)
        if kwargs.get("method") == "NONE" and kwargs.get("transport") is not None:
            self.conn_info = ConnInfo(kwargs["transport"])  # so the error's access line names the client


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


def _wants_a_page(request: Request) -> bool:
    """A browser asking for a page (``Accept`` names text/html) outside the JSON API: it gets an
    HTML error page for an unknown route; API clients keep their problem+json."""
    accept = (request.headers.get("accept") or "").lower()
    return "text/html" in accept and not request.path.startswith("/api/")


STORE_RETRY_AFTER = 5  # seconds a client is asked to wait when the database does not answer
STORE_PING_TIMEOUT = 2.0


async def _store_answers(app: Sanic) -> bool:
    """After an unexpected error: does the database still answer (``store.ping``, bounded)?"""
    services = state_of(app).services
    if services is None:
        return True
    try:
        async with asyncio.timeout(STORE_PING_TIMEOUT):
            return bool(await services.store.ping())
    except Exception:  # noqa: BLE001 - a ping that fails or hangs is a database that does not answer
        return False


def create_app(config: Config, pm: pluggy.PluginManager | None = None, clock: Clock = SYSTEM_CLOCK) -> Sanic:
    """The server app. ``clock`` is the source of time for everything it decides (tests pass a
    ManualClock to an in-process server)."""
    pm = pm or build_plugin_manager(config)
    lean_headers.install(
        [
            *SECURITY_HEADERS,
            ("Cache-Control", "no-store"),
            ("content-type", "application/json"),
            ("content-type", PROBLEM_JSON),
        ]
    )
    providers = build_federation_providers(pm, config)  # a bad provider table stops the start here
    app = GrantdApp(
        APP_NAME,
        log_config=log_config(config.log.level, config.log.format),
        env_prefix=None,
        request_class=GrantdRequest,
        ctx=ProcessState(config, pm),
        dumps=json_codec.dumps_bytes,  # every JSON answer (orjson; issue 27)
        loads=json_codec.loads_strict,  # every JSON body: json.loads' answers and errors, NaN refused
    )
    app.config.update(
        {
            "REQUEST_MAX_SIZE": config.server.max_body_bytes,
            "REQUEST_TIMEOUT": config.server.request_timeout,
            "GRACEFUL_SHUTDOWN_TIMEOUT": drain_time(config.server.graceful_shutdown_timeout),
            "ACCESS_LOG": False,  # our own access line below carries the request id
            "MOTD": False,
            "TOUCHUP": not is_frozen(),
            "NOISY_EXCEPTIONS": False,
            "FALLBACK_ERROR_FORMAT": "json",
            "KEEP_ALIVE_TIMEOUT": 30,
        }
    )
    from grantd.web import openapi, pages, review_links
    from grantd.web.api import (
        admin,
        agents,
        ciba,
        delegations,
        device,
        federation,
        grants,
        health,
        mcp,
        notify,
        oauth,
        people_admin,
        sp,
        webauthn,
        wellknown,
    )

    for module in (
        health,
        wellknown,
        agents,
        admin,
        audit_api,
        people_admin,
        grants,
        notify,
        delegations,
        federation,
        webauthn,
        oauth,
        mcp,
        ciba,
        device,
        sp,
        pages,
        review_links,
        openapi,
        metrics_api,
    ):
        app.blueprint(module.bp)
    metrics_api.install(app, config)  # counts every answer when [metrics] enabled
    pm.hook.register_routes(app=app, config=config)

    @app.before_server_start
    async def open_storage(app: Sanic) -> None:
        _quiet_interrupts(asyncio.get_running_loop())
        state_of(app).services = await open_services(config, pm, clock, providers)
        await call_async_hook(pm.hook.startup, app=app, config=config)

    @app.after_server_start
    async def start_background_work(app: Sanic) -> None:
        state = state_of(app)
        services = state.services
        assert services is not None  # opened before the server starts
        services.store.serving()
        services.events.start()
        if services.audit is not None and state.inline_sequencer:
            services.audit.start()
        state.sweeper = asyncio.get_running_loop().create_task(
            _sweep_forever(services), name="expiry-sweeper"
        )
        # D15, D16: this process's share of delivering the outbox (notices and CIBA pings: a ping
        # needs no configured channel, so every server delivers)
        worker = DeliveryWorker(services)
        services.notify_wake = worker.wake
        state.notifier = asyncio.get_running_loop().create_task(worker.run_forever(), name="notify-delivery")

    @app.before_server_stop
    async def stop_background_work(app: Sanic) -> None:
        state = state_of(app)
        services = state.services
        if services is None:
            return
        for task in (state.sweeper, state.notifier):
            if task is not None:
                task.cancel()
        if services.audit is not None:
            await services.audit.close()
        await services.events.close()  # open event streams end now instead of holding up the shutdown

    @app.after_server_stop
    async def close_storage(app: Sanic) -> None:
        services = state_of(app).services
        if services is not None:
            services.store.close()

    # Read once: the config of a running app does not change (issue 14: no per-request work that can be done once).
    trusted_proxies = config.server.trusted_proxies
    # D12: without trusted proxies, the first request that looks like it came through one warns once.
    proxy_warned: list[str] = ["trusted proxies are configured"] if trusted_proxies else []
    access_log_on = bool(config.log.access)

    # Peers whose plain requests (no proxy header) were checked for the shared-address warning and
    # needed none: the answer depends on the address alone, so each is parsed once, not per request.
    quiet_peers: set[str] = set()
    origins = csrf.own_origins(config.server.issuer, config.webauthn.origin)

    # One request and one response middleware (issue 27: each middleware is a call and an await
    # per request); the order inside each is the order the separate ones had.
    @app.on_request(priority=100)  # type: ignore[call-arg]
    async def start_request(request: Request) -> None:
        headers, ctx = request.headers, request.ctx
        incoming = headers.get("x-request-id", "")
        # 128 random bits as 32 hex digits (what uuid4().hex gave, at a third of its cost)
        ctx.request_id = incoming if incoming and _REQUEST_ID_RE.match(incoming) else os.urandom(16).hex()
        ctx.started = time.perf_counter()
        forwarded = headers.get("x-forwarded-for")
        peer = request.ip
        # client_address answers the peer itself unless a trusted proxy forwarded the request, so
        # without proxies or without the header there is nothing to parse.
        ctx.client_ip = (
            client_address(peer, forwarded, trusted_proxies) if trusted_proxies and forwarded else peer
        )
        if not proxy_warned:
            proxy_headers = bool(forwarded or headers.get("forwarded") or headers.get("x-real-ip"))
            if proxy_headers or peer not in quiet_peers:
                warning = shared_address_warning(peer, proxy_headers)
                if warning is not None:
                    proxy_warned.append(warning)  # once per process: the first such request says it
                    log.warning("%s", warning)
                elif not proxy_headers:
                    if len(quiet_peers) >= QUIET_PEERS_KEPT:
                        quiet_peers.clear()
                    quiet_peers.add(peer)
        csrf.check(request, origins)  # D8: cookie-authenticated state changes from our origin, as JSON

    @app.on_response(priority=100)  # type: ignore[call-arg]
    async def finish_request(request: Request, response: HTTPResponse) -> None:
        clear_stale_session_cookie(request, response)
        request_id = getattr(request.ctx, "request_id", None) or os.urandom(16).hex()
        headers = response.headers
        headers.setdefault("X-Request-ID", request_id)
        for name, value in SECURITY_HEADERS:
            headers.setdefault(name, value)
        if request.path.startswith("/api/"):
            headers.setdefault("Cache-Control", "no-store")
        if access_log_on:
            started = getattr(request.ctx, "started", None)
            duration = round((time.perf_counter() - started) * 1000, 2) if started else None
            access_log.info(
                "%s %s %s %sms",
                request.method,
                logged_path(request.path),
                response.status,
                duration,
                extra={
                    "request_id": request_id,
                    "method": request.method,
                    "path": logged_path(request.path),
                    "status": response.status,
                    "duration_ms": duration,
                    "remote": getattr(request.ctx, "client_ip", request.ip),
                },
            )

    @app.exception(Exception)
    async def render_error(request: Request, exc: Exception) -> HTTPResponse:
        problem = _problem_from_exception(request, exc)
        if (
            problem.status == 500
            and not isinstance(exc, Problem | SanicException)
            and not await _store_answers(app)
        ):
            # The database is down (e.g. PostgreSQL restarting): a 503 to retry, as /readyz says, not a 500.
            problem = Problem(
                503, "database unreachable; retry later", headers={"Retry-After": str(STORE_RETRY_AFTER)}
            )
        request_id = getattr(request.ctx, "request_id", None) if request else None
        if problem.status in (404, 405) and isinstance(exc, SanicException) and _wants_a_page(request):
            title = "Page not found" if problem.status == 404 else "Not allowed here"
            page = error_page(
                None,
                problem.status,
                title,
                "There is no page at this address." if problem.status == 404 else problem.detail,
            )
            page.headers.update(problem.headers)
            return page
        if problem.status >= 500:
            log.error(
                "unhandled error on %s %s",
                request.method,
                logged_path(request.path),
                exc_info=exc,
                extra={"request_id": request_id},
            )
        return problem_response(problem, request_id)

    return app


# Paths whose segment after the prefix is a secret (a review or deny link's token, D15; an MCP
# consent's poll secret, D17): the logs show the route, never the secret. (Query strings, where
# registration tokens, codes and user codes travel, are never logged: ``request.path`` has none.)
_SECRET_PATH = re.compile(r"^(/r/|/authorize/poll/)[^/]+")


def logged_path(path: str) -> str:
    """``path`` as the logs may show it: a secret segment replaced by ``[secret]``."""
    return _SECRET_PATH.sub(r"\1[secret]", path, count=1)


def _quiet_interrupts(loop: asyncio.AbstractEventLoop) -> None:
    """Sanic stops a worker with SIGINT; a request task that the interrupt lands in then ends with
    KeyboardInterrupt, which asyncio would log as "Task exception was never retrieved" with a
    traceback. That is the stop we asked for, not an error: say nothing of it, report the rest."""
    previous = loop.get_exception_handler()

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if isinstance(context.get("exception"), KeyboardInterrupt):
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handle)


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
    """Factory used by each worker process (it re-reads the config, with the sections its plugins
    declare; secrets come from files/env)."""
    return create_app(load_with_plugins(config_path))


async def prepare_storage(config: Config, pm: pluggy.PluginManager) -> dict[str, Any]:
    """Run migrations and make sure a signing key exists, once, before workers start."""
    services = await open_services(config, pm)
    try:
        return {
            "schema_version": services.store.schema_version(),
            "kid": (await services.keyring.signing_key()).kid,
        }
    finally:
        services.store.close()


class StartupError(Exception):
    """grantd cannot start; the message is the one line `grantd serve` prints."""


def describe_startup_error(exc: BaseException) -> str:
    """One line for an operator from whatever stopped the start: a StartupError or StoreError as it
    is, an OSError with its file, anything else (a storage plugin's driver error, e.g. a database
    server that cannot be reached) as ``Type: first line``. Never a traceback."""
    from grantd.config import ConfigError
    from grantd.store import StoreError

    if isinstance(exc, ConfigError):
        text = f"configuration invalid in {exc.path}: {'; '.join(exc.problems)}"
    elif isinstance(exc, StartupError | StoreError):
        text = str(exc)
    elif isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        text = f"{exc.strerror or exc}{where}"
        if isinstance(exc, PermissionError):
            text += " (check the owner and mode of the database directory and files, and [storage] path)"
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join(lines) or type(exc).__name__


def check_listen_address(host: str, port: int) -> None:
    """Bind the address once, as Sanic will, so that a port in use (or one below 1024 without the
    privilege) is a StartupError before the banner, not a traceback from the worker manager."""
    import errno
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror or exc} ([server] host)") from None
    family, kind, proto, _, address = infos[0]
    try:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            why = "the address is already in use (another grantd, or another program, listens there)"
        elif exc.errno == errno.EACCES:
            why = "permission denied (ports below 1024 need privileges: use a port above 1024 behind a proxy)"
        else:
            why = exc.strerror or str(exc)
        raise StartupError(f"cannot listen on {host}:{port}: {why}") from None


def preflight(config: Config) -> dict[str, Any]:
    """Everything that can stop a start, checked in this process before any banner: the storage
    opens (migrations, a signing key) and the listening address is free. Raises; the caller prints
    ``describe_startup_error``."""
    pm = build_plugin_manager(config)
    prepared = asyncio.run(prepare_storage(config, pm))
    check_listen_address(config.server.host, config.server.port)
    return prepared

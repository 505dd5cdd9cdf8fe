"""Keeps the console in step with the server: the grant event stream, reconnects, and polling.

Connected, grant changes arrive as Server-Sent Events. When the stream breaks, it reconnects with
`Last-Event-ID` (so the server replays what was missed) after a growing backoff; every (re)connect
also reloads the list so nothing is missed even if the server could not replay. A server without
an event stream is polled instead, and the stream is tried again now and then.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence

import httpx

from grantd.tui.client import ApiError, EventsUnavailable, GrantSource, grant_of_event
from grantd.tui.messages import ConnectionState
from grantd.tui.models import Grant

BACKOFF = (0.5, 1.0, 2.0, 4.0, 8.0)


class StreamEnded(Exception):
    """The server closed the stream (restart, proxy timeout): reconnect."""


class GrantFeed:
    def __init__(
        self,
        client: GrantSource,
        *,
        on_grant: Callable[[str, Grant], Awaitable[None]],
        on_state: Callable[[ConnectionState], None],
        reload: Callable[[], Awaitable[None]],
        poll_interval: float = 5.0,
        retry_events_after: float = 60.0,
        backoff: Sequence[float] = BACKOFF,
    ) -> None:
        self.client = client
        self.on_grant = on_grant
        self.on_state = on_state
        self.reload = reload
        self.poll_interval = poll_interval
        self.retry_events_after = retry_events_after
        self.backoff = tuple(backoff)
        self.last_event_id: str | None = None
        self.failures = 0
        self.server_retry: float | None = None
        self._early: asyncio.Task[None] | None = None

    async def _opened(self) -> None:
        self.failures = 0
        self._cancel_early_reload()
        await self.reload()
        self.on_state(ConnectionState("live"))

    async def _early_reload(self) -> None:
        # A server may hold the stream's headers back until its first event or heartbeat; the list
        # should not wait that long. Errors are the stream's to report.
        with contextlib.suppress(ApiError, httpx.HTTPError):
            await self.reload()

    def _cancel_early_reload(self) -> None:
        if self._early is not None and not self._early.done():
            self._early.cancel()
        self._early = None

    def _delay(self) -> float:
        delay = self.backoff[min(self.failures - 1, len(self.backoff) - 1)]
        return max(delay, self.server_retry or 0.0)

    async def run(self) -> None:
        """Run until cancelled."""
        while True:
            self.on_state(ConnectionState("connecting" if self.failures == 0 else "reconnecting"))
            self._early = asyncio.create_task(self._early_reload())
            try:
                async for event in self.client.events(self.last_event_id, on_open=self._opened):
                    if event.id:
                        self.last_event_id = event.id
                    if event.retry_ms is not None:
                        self.server_retry = event.retry_ms / 1000
                    grant = grant_of_event(event)
                    if grant is not None:
                        await self.on_grant(event.event, grant)
                raise StreamEnded
            except EventsUnavailable as exc:
                self._cancel_early_reload()
                await self._poll(exc.detail)
                continue
            except ApiError as exc:
                self.failures += 1
                mode = "unauthorised" if exc.status in (401, 403) else "reconnecting"
                detail = f"{exc.status} {exc.detail}"
            except (httpx.HTTPError, StreamEnded) as exc:
                self.failures += 1
                mode = "reconnecting"
                detail = _describe(exc)
            finally:
                self._cancel_early_reload()
            delay = self._delay()
            self.on_state(ConnectionState(mode, detail, retry_in=delay))
            await asyncio.sleep(delay)

    async def _poll(self, why: str) -> None:
        """Poll the list for a while, then let the caller try the event stream again."""
        loop = asyncio.get_running_loop()
        until = loop.time() + self.retry_events_after
        while loop.time() < until:
            try:
                await self.reload()
                self.failures = 0
                self.on_state(ConnectionState("polling", f"every {self.poll_interval:g}s ({why})"))
            except (ApiError, httpx.HTTPError) as exc:
                self.failures += 1
                down = "unauthorised" if isinstance(exc, ApiError) and exc.status in (401, 403) else "offline"
                self.on_state(ConnectionState(down, _describe(exc), retry_in=self.poll_interval))
            await asyncio.sleep(self.poll_interval)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, StreamEnded):
        return "the server closed the stream"
    if isinstance(exc, ApiError):
        return f"{exc.status} {exc.detail}"
    if isinstance(exc, httpx.ConnectError):
        return "cannot connect"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return type(exc).__name__

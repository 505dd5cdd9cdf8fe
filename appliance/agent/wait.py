"""Waiting for a decision: the grant event stream, ETag polling, and riding out a restarting IdP."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import quote

import httpx

from grantd.agent.api import Api, expect_json, problem_text
from grantd.agent.errors import EXIT_PENDING, CliError
from grantd.agent.output import shown
from grantd.client.sse import SseComment, SseDecoder

POLL_INTERVAL = 3.0


# -- waiting -----------------------------------------------------------------------------------------


class EventsUnavailable(Exception):
    pass


def transient(exc: CliError) -> bool:
    """A failure that goes away by itself: the IdP restarting, or a proxy in front of it."""
    return exc.kind == "unreachable" or (exc.kind == "http" and exc.extra.get("status") in (502, 503, 504))


class Waiter:
    """Waits for a decision: follows GET /api/grants/events, re-checks the grant with ETag polling
    after connecting and on every heartbeat, and falls back to polling when there is no stream."""

    def __init__(
        self,
        api: Api,
        grant_id: str,
        *,
        timeout: float,
        interval: float = POLL_INTERVAL,
        progress: Any = None,
    ):
        self.api = api
        self.grant_id = grant_id
        self.deadline = time.monotonic() + timeout
        self.interval = interval
        self.etag: str | None = None
        self.grant: dict[str, Any] | None = None
        self.last_event_id: str | None = None
        self.progress = progress

    def poll(self) -> dict[str, Any]:
        headers = {"If-None-Match": self.etag} if self.etag and self.grant else {}
        response = self.api.call("GET", f"/api/grants/{quote(self.grant_id, safe='')}", headers=headers)
        if response.status_code == 304 and self.grant is not None:
            return self.grant
        self.grant = expect_json(response, what=f"grant {self.grant_id}")
        self.etag = response.headers.get("etag")
        return self.grant

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def pause(self, seconds: float) -> None:
        time.sleep(min(seconds, max(self.remaining(), 0)))

    def wait(self) -> dict[str, Any]:
        grant = self.poll()  # an IdP that cannot be reached at all is an error at once
        if grant.get("status") != "pending":
            return grant
        use_events = True
        backoff = 1.0
        outage = False
        while self.remaining() > 0:
            try:
                if use_events:
                    try:
                        found = self.follow_events()
                        if found is not None:
                            return found
                    except EventsUnavailable:
                        use_events = False
                        if self.progress:
                            self.progress("no event stream; polling")
                    except httpx.HTTPError:
                        self.pause(1.0)  # reconnect after a short pause
                else:
                    self.pause(self.interval)
                grant = self.poll()
                if grant.get("status") != "pending":
                    return grant
                outage, backoff = False, 1.0
            except CliError as exc:
                # A restarting IdP (refused connections, 502/503/504 from it or a proxy) is waited out
                # until the deadline; anything else (401, 403, 404, ...) ends the wait.
                if not transient(exc):
                    raise
                if not outage and self.progress:
                    self.progress(f"{exc.message}; retrying until the wait times out")
                outage = True
                self.pause(backoff)
                backoff = min(backoff * 2, 10.0)
        raise CliError(
            f"grant {shown(self.grant_id)} is still pending",
            kind="pending",
            exit_code=EXIT_PENDING,
            grant=self.grant,
        )

    def follow_events(self) -> dict[str, Any] | None:
        headers = {"Last-Event-ID": self.last_event_id} if self.last_event_id else {}
        read_timeout = max(min(40.0, self.remaining()), 0.5)
        with self.api.stream("/api/grants/events", headers=headers, read_timeout=read_timeout) as response:
            if response.status_code in (404, 405, 406, 501) or (
                response.status_code == 200
                and "text/event-stream" not in response.headers.get("content-type", "")
            ):
                raise EventsUnavailable()
            if response.status_code != 200:
                response.read()
                raise CliError(
                    f"event stream: {problem_text(response)}", kind="http", status=response.status_code
                )
            # Subscribed: a decision made before this point is seen by this check, later ones as events.
            grant = self.poll()
            if grant.get("status") != "pending":
                return grant
            decoder = SseDecoder(self.last_event_id)
            for event in decoder.read(response.iter_lines()):
                if self.remaining() <= 0:
                    return None
                if isinstance(
                    event, SseComment
                ):  # heartbeat: a cheap ETag check covers anything a proxy dropped
                    grant = self.poll()
                    if grant.get("status") != "pending":
                        return grant
                    continue
                self.last_event_id = event.id
                try:
                    payload = json.loads(event.data or "{}")
                except ValueError:
                    continue
                changed = payload.get("grant") if isinstance(payload, dict) else None
                if (
                    isinstance(changed, dict)
                    and changed.get("id") == self.grant_id
                    and changed.get("status") != "pending"
                ):
                    return self.poll()
        return None

"""Helpers for the grant tests: requests as agents and admins, AuthZ-JWT checks against the JWKS,
and an event-stream reader running in a thread."""

from __future__ import annotations

import json
import queue
import threading
import time
from typing import Any

import httpx
import jwt

from conftest import Agent, Server

COMMAND = ["systemctl", "restart", "nginx"]


def grant_body(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "target_host": "web-1",
        "audience": "escapes",
        "command": COMMAND,
        "reason": "deploy",
    }
    body.update(fields)
    return {k: v for k, v in body.items() if v is not None}


def request_grant(server: Server, agent: Agent, expect: int = 201, **fields: Any) -> dict[str, Any]:
    with server.client(agent.token) as http:
        r = http.post("/api/grants", json=grant_body(**fields))
    assert r.status_code == expect, r.text
    return r.json()  # type: ignore[no-any-return]


def admin_post(server: Server, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
    with server.admin() as http:
        return http.post(path, json=body if body is not None else {})


def approve(server: Server, grant_id: str, **override: Any) -> dict[str, Any]:
    r = admin_post(server, f"/api/grants/{grant_id}/approve", override)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def consume(server: Server, grant_id: str, token: str) -> httpx.Response:
    with server.client(token) as http:
        return http.post(f"/api/grants/{grant_id}/consume")


def decode_authz(server: Server, token: str) -> dict[str, Any]:
    """Verify an AuthZ-JWT the way a target does: the key from the JWKS by kid, issuer and audience."""
    header = jwt.get_unverified_header(token)
    with server.client() as http:
        keys = http.get("/.well-known/jwks.json").json()["keys"]
    jwk = next(k for k in keys if k["kid"] == header["kid"])
    unverified = jwt.decode(token, options={"verify_signature": False})
    return jwt.decode(
        token,
        jwt.PyJWK(jwk).key,
        algorithms=["EdDSA"],
        issuer=server.url,
        audience=unverified["aud"],
        options={"require": ["exp", "iat", "iss", "sub", "aud", "jti"]},
    )


class EventReader:
    """Follows GET /api/grants/events in a thread; events land in a queue as dicts."""

    def __init__(self, server: Server, token: str, last_event_id: str | None = None):
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.comments: list[str] = []
        self.status: int | None = None
        self.headers: httpx.Headers | None = None
        self._opened = threading.Event()
        self._stop = False
        headers = {"Authorization": f"Bearer {token}"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        self._thread = threading.Thread(target=self._run, args=(server.url, headers), daemon=True)
        self._thread.start()
        assert self._opened.wait(15), "the event stream did not open"

    def _run(self, url: str, headers: dict[str, str]) -> None:
        try:
            with (
                httpx.Client(base_url=url, timeout=httpx.Timeout(10, read=60)) as http,
                http.stream("GET", "/api/grants/events", headers=headers) as response,
            ):
                self.status = response.status_code
                self.headers = response.headers
                self._opened.set()
                event: dict[str, Any] = {}
                for line in response.iter_lines():
                    if self._stop:
                        return
                    if line.startswith(":"):
                        self.comments.append(line[1:].strip())
                    elif line == "":
                        if "data" in event:
                            event["grant"] = json.loads(event.pop("data"))["grant"]
                            self.events.put(event)
                        event = {}
                    else:
                        name, _, value = line.partition(":")
                        event[name] = value.removeprefix(" ")
        except httpx.HTTPError:
            pass
        finally:
            self._opened.set()

    def next(self, timeout: float = 10.0) -> dict[str, Any]:
        return self.events.get(timeout=timeout)

    def until(self, predicate: Any, timeout: float = 15.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("expected event did not arrive")
            event = self.events.get(timeout=left)
            if predicate(event):
                return event

    def drain(self, quiet: float = 0.5) -> list[dict[str, Any]]:
        found = []
        while True:
            try:
                found.append(self.events.get(timeout=quiet))
            except queue.Empty:
                return found

    def close(self) -> None:
        self._stop = True

"""Helpers for the OAuth provider tests: PKCE pairs, driving /authorize with a person's session
cookie (the browser part without a browser), the consent POST, and the code exchange."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
from people_support import SESSION_COOKIE, create_person, start_session

APES_REDIRECT = "http://localhost:9876/callback"
WIKI = "https://wiki.example.com/cb"
TOOL = "https://tool.example.com/cb"
WIKI_SECRET = "wiki-secret-0123456789abcdef"


def wiki_and_tool_clients(wiki_name: str = "Team wiki") -> str:
    """Two configured clients: "wiki", confidential (its secret in the file wiki-secret, see
    ``start_with_secrets``), and "tool", public with access to grantd's API."""
    return f"""
[[oauth.clients]]
client_id = "wiki"
name = "{wiki_name}"
redirect_uris = ["{WIKI}"]
client_secret = "file:wiki-secret"

[[oauth.clients]]
client_id = "tool"
name = "A tool with API access"
redirect_uris = ["{TOOL}"]
api_access = true
"""


def start_with_secrets(directory: Any, extra: str, secrets_by_file: dict[str, str]) -> Any:
    """An in-process server whose config names client secrets by file: each written 0600 first."""
    from inproc import InProcessServer

    directory.mkdir(parents=True, exist_ok=True)
    for name, secret in secrets_by_file.items():
        (directory / name).write_text(secret + "\n")
        (directory / name).chmod(0o600)
    return InProcessServer(directory, extra=extra).start()


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def authorize_params(
    client_id: str | None = "apes-cli",
    redirect_uri: str | None = APES_REDIRECT,
    challenge: str | None = None,
    **extra: Any,
) -> dict[str, str]:
    """The parameters apes sends; ``None`` (positional or keyword) leaves a parameter out."""
    extra = {"client_id": client_id, "redirect_uri": redirect_uri, **extra}
    params = {
        "response_type": "code",
        "code_challenge": challenge or pkce()[1],
        "code_challenge_method": "S256",
        "state": "st-" + secrets.token_hex(4),
        "nonce": "n-" + secrets.token_hex(4),
        "scope": "openid email profile offline_access",
    }
    params.update({k: v for k, v in extra.items() if v is not None})
    for key in [k for k, v in extra.items() if v is None]:
        params.pop(key, None)
    return params


def ticket_of(page: str) -> str | None:
    """The one-time approval ticket of a consent page (clients that are asked every time), or None."""
    found = re.search(r'data-ticket="([A-Za-z0-9_-]+)"', page)
    return found.group(1) if found else None


def query_of(location: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query, keep_blank_values=True).items()}


class Person:
    """A person with a live session on ``srv`` (an InProcessServer)."""

    def __init__(self, srv: Any, email: str | None = None, **fields: Any):
        self.srv = srv
        self.record = create_person(srv, email, **fields)
        self.email = self.record["email"]
        self.cookie = start_session(srv, self.email)

    def http(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.srv.url, cookies={SESSION_COOKIE: self.cookie}, timeout=10, follow_redirects=False
        )

    def authorize(self, params: dict[str, str]) -> httpx.Response:
        with self.http() as http:
            return http.get("/authorize?" + urlencode(params))

    def consent(self, query: str, approve: bool = True, ticket: str | None = None) -> httpx.Response:
        body: dict[str, Any] = {"request": query, "approve": approve}
        if ticket is not None:
            body["ticket"] = ticket
        with self.http() as http:
            return http.post("/authorize/consent", json=body, headers={"Origin": self.srv.url})

    def code_for(self, params: dict[str, str]) -> str:
        """Authorize, consenting if asked; the code the client receives."""
        answer = self.authorize(params)
        if answer.status_code == 200 and "data-consent" in answer.text:
            answer = self.consent(urlencode(params), ticket=ticket_of(answer.text))
            assert answer.status_code == 200, answer.text
            location = answer.json()["location"]
        else:
            assert answer.status_code == 302, (answer.status_code, answer.text[:500])
            location = answer.headers["location"]
        found = query_of(location)
        assert "code" in found, location
        assert found.get("state") == params.get("state")
        return found["code"]


def exchange(
    srv: Any,
    code: str,
    verifier: str,
    *,
    client_id: str = "apes-cli",
    redirect_uri: str = APES_REDIRECT,
    as_json: bool = False,
    **extra: Any,
) -> httpx.Response:
    body = {
        "grant_type": "authorization_code",
        "code": code,
        "code_verifier": verifier,
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        **extra,
    }
    body = {k: v for k, v in body.items() if v is not None}
    with httpx.Client(base_url=srv.url, timeout=10) as http:
        return http.post("/token", json=body) if as_json else http.post("/token", data=body)


def token_post(srv: Any, body: dict[str, Any], **kwargs: Any) -> httpx.Response:
    with httpx.Client(base_url=srv.url, timeout=10) as http:
        return http.post("/token", data=body, **kwargs)


def login(
    srv: Any, person: Person, *, client_id: str = "apes-cli", redirect_uri: str = APES_REDIRECT, **extra: Any
) -> dict[str, Any]:
    """The whole code flow: the token answer."""
    verifier, challenge = pkce()
    code = person.code_for(authorize_params(client_id, redirect_uri, challenge, **extra))
    answer = exchange(srv, code, verifier, client_id=client_id, redirect_uri=redirect_uri)
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


class MetadataServer:
    """A real HTTP server on 127.0.0.1 playing an SP: /.well-known/oauth-client-metadata as told
    (``mode`` = "ok" (``document``), "redirect", "huge", "status"; ``hits`` counts those requests),
    and /api/callback, its redirect URI (``callbacks`` keeps the paths with their queries)."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.document: dict[str, Any] = {}
        self.hits = 0
        self.hosts: list[str] = []
        self.paths: list[str] = []  # of the requests ``hits`` counts
        self.callbacks: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.startswith("/api/callback"):  # the SP's redirect URI: what reached the client
                    owner.callbacks.append(self.path)
                    body = b"<!doctype html><title>callback</title><p>signed in</p>"
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                owner.hits += 1
                owner.hosts.append(self.headers.get("Host", ""))
                owner.paths.append(self.path)
                if owner.mode == "redirect":
                    self.send_response(302)
                    self.send_header("Location", f"http://127.0.0.1:{owner.port}/elsewhere")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if owner.mode == "status":
                    self.send_response(500)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps(owner.document).encode()
                if owner.mode == "nested":  # deep enough to break a recursive parser, small enough to be read
                    body = b"[" * 30000 + b"]" * 30000
                if owner.mode == "huge":
                    body = json.dumps({**owner.document, "padding": "x" * 200_000}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if owner.mode != "chunkless":
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.client_id = f"127.0.0.1:{self.port}"
        self.redirect_uri = f"http://127.0.0.1:{self.port}/api/callback"
        self.document = {
            "client_id": self.client_id,
            "client_name": "Tiny SP",
            "redirect_uris": [self.redirect_uri],
            "client_uri": f"http://127.0.0.1:{self.port}/",
        }
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class DrippingServer:
    """A real HTTP server on 127.0.0.1 that answers 200 with a promised body and then sends one byte
    of it every ``every`` seconds, as long as the reader stays (a per-read timeout never fires)."""

    def __init__(self, every: float = 1.0) -> None:
        self.every = every
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.open = 0
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: Any) -> None:
        self.open += 1
        try:
            conn.settimeout(5)
            conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n"
            )
            while not self._stop.is_set():
                conn.sendall(b" ")
                time.sleep(self.every)
        except OSError:
            pass  # the reader went away: what grantd must do
        finally:
            self.open -= 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self.sock.close()

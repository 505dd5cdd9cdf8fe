"""No input makes a 5xx (D2, D12): a property test that drives every route of the app.

The routes come from the Sanic router of a real in-process server, so a route added later is driven
too. For each route, hypothesis sends bodies (arbitrary JSON with deep nesting, lone surrogates,
huge and non-finite numbers, wrong types, and route-shaped objects with the real field names and
real values), query strings, headers and path parameters (real ids, garbage, percent-encoded
surrogates and control bytes), as each kind of caller: nobody, a garbage bearer, an expired-looking
JWT, the management token, an agent, another agent, and an AuthZ-JWT used as bearer. Every answer
must be below 500, every error under /api/ problem+json, and the server's log must hold no
traceback afterwards. Deterministic (derandomize, no example database) and bounded in time.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inproc import InProcessServer

from grantd.config import SCHEMA
from grantd.logs import TextFormatter

from conftest import Agent, signed_in
from dns_server import TxtDnsServer
from grants_support import grant_body

EXAMPLES_PER_ROUTE = 40
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
LIMITS_OFF = [
    "authenticate_per_agent",
    "authenticate_per_address",
    "enroll_per_address",
    "failed_bearer_per_address",
    "grants_per_agent",
    "pending_per_agent",
    "pending_per_owner",
    "agents_per_person",
    "verify_per_address",
    "device_code_per_address",
    "sp_login_per_address",
]
LOGGERS = [
    "grantd",
    "grantd.access",
    "sanic.root",
    "sanic.error",
    "sanic.server",
    "sanic.websockets",
    "asyncio",
    "",
]


class LogCapture(logging.Handler):
    """Everything the server logs, formatted as the text log would be."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(TextFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def text(self) -> str:
        return "\n".join(self.lines)


@dataclass
class World:
    server: InProcessServer
    log: LogCapture
    agent: Agent
    other: Agent
    callers: dict[str, str | None] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def expired_looking_jwt(kid: str, email: str) -> str:
    header = _b64(json.dumps({"alg": "EdDSA", "typ": "JWT", "kid": kid}).encode())
    claims = _b64(
        json.dumps({"sub": email, "act": "agent", "iat": 1, "exp": 2, "aud": "apes-cli", "jti": "x"}).encode()
    )
    signature = _b64(bytes(64))
    return f"{header}.{claims}.{signature}"


def federate_to_itself(srv: InProcessServer) -> None:
    """A [[federation.providers]] table "self" whose upstream is the server itself (federated sign-in)."""
    (srv.directory / "self-client-secret").write_text("no5xx-client-secret\n")
    (srv.directory / "self-client-secret").chmod(0o600)
    with srv.config_path.open("a") as config:
        config.write(
            f'\n[[federation.providers]]\nid = "self"\ntype = "oidc"\nissuer = "{srv.url}"\n'
            'client_id = "no5xx"\nclient_secret = "file:self-client-secret"\n'
        )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    directory = tmp_path_factory.mktemp("no5xx")
    # Abuse limits off (where this version has them): a garbage bearer would otherwise soon turn every
    # request from 127.0.0.1 into a 429 and the routes behind the limit would go untested.
    limits = "".join(f"{key} = 0\n" for key in LIMITS_OFF if key in SCHEMA.get("limits", {}))
    # SP login on, asking a local DNS server that knows no domain: its routes are driven too (D9)
    dns = TxtDnsServer({}).__enter__()
    sp = f'\n[sp]\nenabled = true\nnameservers = ["{dns.address}"]\n'
    # an MCP resource with a grant-gated scope (D17): /introspect and the grant-gated consent are driven
    mcp = (
        '\n[[mcp.resources]]\nresource = "https://mcp.example.com/mcp"\nname = "MCP"\n'
        'scopes = ["tools:read", "tools:deploy"]\ncredential = "file:mcp-secret"\n'
        '[mcp.resources.grant_scopes]\n"tools:deploy" = { grant_type = "once" }\n'
    )
    srv = InProcessServer(
        directory / "srv", extra=f"\n[grants]\nevents_heartbeat = 1\n\n[limits]\n{limits}{sp}{mcp}"
    )
    (srv.directory / "mcp-secret").write_text("no5xx-mcp-secret-0123456789\n")
    (srv.directory / "mcp-secret").chmod(0o600)
    # X-Forwarded-For is parsed only from a trusted proxy: trust the test client so it is driven too.
    srv.config_path.write_text(
        srv.config_path.read_text().replace(
            "workers = 1\n", 'workers = 1\ntrusted_proxies = ["127.0.0.1"]\n', 1
        )
    )
    federate_to_itself(srv)  # a federation provider "self": /auth/federated/self runs a real sign-in start
    with srv.config_path.open("a") as config:  # notification channels (D15) to nowhere: rows are written
        config.write(
            '\n[[notify.channels]]\nid = "mail"\ntype = "smtp"\nhost = "127.0.0.1"\nport = 9\n'
            'starttls = false\nfrom = "grantd@example.com"\n'
            '\n[[notify.channels]]\nid = "phone"\ntype = "ntfy"\nurl = "http://127.0.0.1:9"\ndeny_from_chat = true\n'
        )
    capture = LogCapture()
    srv.start()
    for name in LOGGERS:  # after start: the app's logging config is in place, ours is added to it
        logging.getLogger(name).addHandler(capture)
    try:
        agent = signed_in(srv, directory / "keys")  # type: ignore[arg-type]
        other = signed_in(srv, directory / "keys-other")  # type: ignore[arg-type]
        with srv.client(agent.token) as http:
            pending = http.post("/api/grants", json=grant_body()).json()["id"]
            to_approve = http.post("/api/grants", json=grant_body(reason="approve me")).json()["id"]
        with srv.admin() as http:
            authz = http.post(f"/api/grants/{to_approve}/approve", json={}).json()["authz_jwt"]
            delegation = http.post(
                "/api/delegations", json={"delegate": other.email, "audience": "elsewhere"}
            ).json()["id"]
            kid = http.get("/.well-known/jwks.json").json()["keys"][0]["kid"]
        # D16: a token in which the agent acts for a person (token exchange of a delegation token)
        from people_support import create_person

        from server.test_token_exchange_flow import delegate, exchange

        person = create_person(srv, admin=True)
        made = delegate(srv, person, agent)  # type: ignore[arg-type]
        acting = exchange(srv, agent, made["delegation_token"]).json()["access_token"]  # type: ignore[arg-type]
        world = World(srv, capture, agent, other)
        world.callers = {
            "acting": acting,
            "nobody": None,
            "garbage": "garbage\u00e9",
            "expired-jwt": expired_looking_jwt(kid, agent.email),
            "management": srv.token,
            "agent": agent.token,
            "other-agent": other.token,
            "authz-jwt": authz,
        }
        world.ids = [pending, to_approve, delegation, agent.agent_id, agent.email, other.agent_id, "self"]
        yield world
    finally:
        for name in LOGGERS:
            logging.getLogger(name).removeHandler(capture)
        srv.stop()
        dns.__exit__(None, None, None)


# -- what hypothesis sends -------------------------------------------------------------------------

FIELDS = [
    "agent_id",
    "id",
    "challenge",
    "signature",
    "email",
    "name",
    "publicKey",
    "public_key",
    "owner",
    "approver",
    "status",
    "isActive",
    "target_host",
    "audience",
    "grant_type",
    "command",
    "permissions",
    "duration",
    "reason",
    "run_as",
    "requester",
    "token",
    "operations",
    "action",
    "delegate",
    "delegator",
    "scopes",
    "scope",
    "approval",
    "expires_at",
    "authorization_details",
    "execution_context",
    "cmd_hash",
    "user_code",
    "approve",
    "client_id",
    "device_code",  # the device grant
    "decision",
    "via",  # a vote (D13)
    "channels",
    "credential",
    "endpoint",
    "keys",
    "expirationTime",  # notifications, review links, push subscriptions (D15)
    "resource",  # RFC 8707 at /authorize, /token and /bc-authorize (D17; issue 26)
]
SPECIAL_TEXT = [
    "",
    " ",
    "once",
    "timed",
    "always",
    "approve",
    "deny",
    "revoke",
    "active",
    "disabled",
    "root",
    "root\n",
    "\x00",
    "\x1b[31m",
    "\u202e",
    "\u200b",
    "\ufeff",
    "\u00b2",
    "1" * 23,
    "9" * 400,
    "*",
    "command:*",
    "ssh-ed25519 AAAA",
    "2999-01-01T00:00:00Z",
    "1970-01-01T00:00:00",
    "a@b",
    "x" * 300,
    "../../etc/passwd",
    "%00",
]
surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
any_text = st.one_of(
    st.text(max_size=30),
    st.lists(st.one_of(st.characters(), surrogates), max_size=8).map("".join),
    st.sampled_from(SPECIAL_TEXT),
)
numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 10**30, 2**63, 86400 * 365 * 100]),
    st.floats(allow_nan=True, allow_infinity=True),
)
leaves = st.one_of(st.none(), st.booleans(), numbers, any_text)
json_values = st.recursive(
    leaves,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(any_text, children, max_size=4),
    max_leaves=10,
)


def real_values(world: World) -> st.SearchStrategy[Any]:
    agent = world.agent
    return st.sampled_from(
        [
            agent.email,
            world.other.email,
            agent.agent_id,
            agent.public_key,
            world.server.token,
            *world.ids,
            ["ls", "-l"],
            ["deploy:web"],
            "https://mcp.example.com/mcp",  # the MCP resource (D17) and its grant-gated scope
            "openid tools:deploy",
            [{"type": "mcp_tool_call", "scope": "tools:deploy", "tool": "deploy"}],
            [{"id": world.ids[0], "action": "deny"}],
            [{"type": "x"}],
            {"cwd": "/"},
            "admin@example.com",
            "root@example.com",
            "web-1",
            "escapes",
        ]
    )


def shaped_body(world: World, route_name: str) -> st.SearchStrategy[dict[str, Any]]:
    """A body with the route's real field names: a valid base the drawn fields then change."""
    agent = world.agent
    bases = {
        "create": grant_body(),
        "batch": {"operations": [{"id": world.ids[0], "action": "approve"}]},
        "review": {"decision": "approve", "reason": "ok"},
        "challenge": {"agent_id": agent.email},
        "authenticate": {"agent_id": agent.email, "challenge": "0" * 64, "signature": "AAAA"},
        "enroll": {"email": "new@example.com", "name": "n", "publicKey": agent.public_key},
        "create_agent": {"email": "new@example.com", "name": "n", "publicKey": agent.public_key},
        "update_agent": {"name": "renamed"},
        "validate": {"delegate": world.other.email, "audience": "elsewhere", "scope": "x"},
        "verify": {"token": world.callers["authz-jwt"]},
        "decide": {"user_code": "BCDF-GHJK", "approve": True},
        "device_authorization": {"client_id": "grantd-cli", "scope": "openid"},
        # CIBA (D16): the real parameter names and a grantd_command detail
        "bc_authorize": {
            "scope": "openid",
            "login_hint": "policy",
            "binding_message": "deploy",
            "authorization_details": [
                {
                    "type": "grantd_command",
                    "locations": ["web-1"],
                    "actions": ["execute"],
                    "command": ["true"],
                    "audience": "escapes",
                    "grant_type": "once",
                }
            ],
            "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
            "client_assertion": "eyJhbGciOiJFZERTQSJ9.eyJpc3MiOjF9.AAAA",
        },
        # the OAuth provider (grantd.web.api.oauth)
        "token": {
            "grant_type": "authorization_code",
            "code": "x" * 43,
            "code_verifier": "v" * 43,
            "client_id": "apes-cli",
            "redirect_uri": "http://localhost:9876/callback",
        },
        "consent": {
            "request": "response_type=code&client_id=apes-cli&redirect_uri=http%3A%2F%2Flocalhost%3A9876%2Fcallback"
            "&code_challenge=E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM&code_challenge_method=S256",
            "approve": True,
        },
        "revoke": {"token": "x", "token_type_hint": "refresh_token"},
        "userinfo": {"access_token": "a.b.c"},
        "introspect": {"token": "a.b.c", "token_type_hint": "access_token"},
        # the decision log (D14)
        "hosts": {"host": "web-1", "publicKey": agent.public_key},
        "receipts": {
            "receipt": "eyJhbGciOiJFZERTQSIsInR5cCI6ImdyYW50ZC1yZWNlaXB0K2p3dCJ9.eyJpc3MiOiJob3N0OndlYi0xIn0.AAAA"
        },
    }
    base = next((b for key, b in bases.items() if route_name.split(".")[-1].startswith(key)), {})
    if route_name.endswith("delegations.create"):
        base = {"delegate": world.other.email, "audience": "x"}
    value = st.one_of(json_values, real_values(world))
    drawn = st.dictionaries(st.sampled_from(FIELDS), value, max_size=6)
    operations = st.lists(
        st.dictionaries(
            st.sampled_from(["id", "action", "grant_type", "duration", "reason"]), value, max_size=4
        ),
        max_size=4,
    )
    return st.one_of(
        drawn.map(lambda extra: {**base, **extra}),
        drawn,
        operations.map(lambda ops: {**base, "operations": ops}),
    )


def raw_bodies(world: World, route_name: str) -> st.SearchStrategy[bytes | None]:
    return st.one_of(
        st.none(),
        shaped_body(world, route_name).map(
            lambda b: json.dumps(b).encode()
        ),  # surrogates become \ud800 escapes
        json_values.map(lambda v: json.dumps(v).encode()),
        st.integers(20, 3000).map(lambda n: b"[" * n + b"]" * n),
        st.integers(20, 3000).map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
        st.binary(max_size=40),
        st.sampled_from(
            [b"", b"{", b'{"a": NaN}', b'{"a": 1e999}', b'{"a": "\\udfff"}', b"\xef\xbb\xbf{}", b"1" * 5000]
        ),
        # form-encoded (the OAuth endpoints): real names, repeats, bad escapes, non-UTF-8
        st.sampled_from(
            [
                b"client_id=grantd-cli&scope=openid",
                b"client_id=grantd-cli&client_id=x",
                b"a=%zz&&=",
                b"client_id=%ff%fe",
                b"grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code"
                b"&device_code=x&client_id=grantd-cli",
                b"=" * 3000,
                b"grant_type=refresh_token&refresh_token=x&client_id=apes-cli&scope=openid%20x",
                b"grant_type=client_credentials&client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-"
                b"type%3Ajwt-bearer&client_assertion=eyJhbGciOiJFZERTQSJ9.eyJpc3MiOjF9.AAAA",
                b"grant_type=authorization_code&code=x&client_id=127.0.0.1%3A1&code_verifier=%00",
                b"grant_type=urn%3Aopenid%3Aparams%3Agrant-type%3Aciba&auth_req_id=x&client_assertion_type="
                b"urn%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-type%3Ajwt-bearer&client_assertion=a.b.c",
                b"scope=openid&login_hint=policy&binding_message=%07&authorization_details=%5B%7B%7D%5D",
                b"scope=openid&login_hint=policy&login_hint=x&authorization_details=null",
                b"scope=openid%20tools%3Adeploy&login_hint=policy&resource=https%3A%2F%2Fmcp.example.com%2Fmcp"
                b"&authorization_details=%5B%7B%22type%22%3A%22mcp_tool_call%22%7D%5D",
            ]
        ),
    )


header_text = st.one_of(
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=30),
    st.sampled_from(
        [
            "1",
            "0",
            "\u00b2",
            "1" * 30,
            "*",
            'W/"x"',
            '"abc", W/"d"',
            "application/json",
            "text/plain; charset=utf-8",
            "application/x-www-form-urlencoded",
            "1.2.3.4",
            "1.2.3.4, 10.0.0.1",
            "::1",
            "garbage, ,",
            "-1",
        ]
    ),
).map(lambda s: s.strip().encode("latin-1"))
headers = st.fixed_dictionaries(
    {},
    optional={
        name: header_text
        for name in [
            "Last-Event-ID",
            "If-None-Match",
            "Content-Type",
            "X-Forwarded-For",
            "X-Request-ID",
            "Accept",
            "Origin",
            "DPoP",
        ]
    },
)
queries = st.dictionaries(
    st.sampled_from(
        [
            "limit",
            "cursor",
            "status",
            "requester",
            "last_event_id",
            "token",
            "x",
            "user_code",
            "next",
            "state",
            "code",
            "error",
            "client_id",
            "redirect_uri",
            "response_type",
            "code_challenge",
            "code_challenge_method",
            "scope",
            "prompt",
            "login_hint",
            "nonce",
            "authorization_details",
            "start",
            "end",
            "index",
            "size",
            "from",
            "to",
        ]
    ),
    st.one_of(any_text, st.integers(-(10**20), 10**20).map(str)),
    max_size=4,
)


def path_values(world: World) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(world.ids).map(lambda v: quote(v, safe="")),
        any_text.filter(bool).map(lambda v: quote(v, safe="", errors="surrogatepass")),
        st.sampled_from(["%ED%A0%80", "%00", "%1b%5b31m", "..%2f..", "%", "%zz", "a" * 300, "%C0%AF", "%FF"]),
    )


def build_path(route_path: str, params: dict[str, str]) -> str:
    path = "/" + route_path
    for name, value in params.items():
        path = path.replace(f"<{name}:str>", value).replace(f"<{name}>", value)
    return path


# -- the test ------------------------------------------------------------------------------------


def check(response: httpx.Response, method: str, path: str) -> None:
    where = f"{method} {path} -> {response.status_code}: {response.text[:300]}"
    assert response.status_code < 500, where
    if response.status_code >= 400 and path.startswith("/api/"):
        assert response.headers.get("content-type", "").startswith("application/problem+json"), where
        if method != "HEAD":
            body = response.json()
            assert {"type", "title", "status", "detail"} <= set(body) and body[
                "status"
            ] == response.status_code, where


def send(
    http: httpx.Client,
    method: str,
    path: str,
    query: dict[str, str],
    head: dict[str, bytes],
    body: bytes | None,
    bearer: str | None,
) -> None:
    qs = "&".join(f"{quote(k)}={quote(v, safe='', errors='surrogatepass')}" for k, v in query.items())
    url = path + ("?" + qs if qs else "")
    all_headers: dict[str, Any] = dict(head)
    if bearer is not None:
        all_headers["Authorization"] = f"Bearer {bearer}".encode()
    if path.endswith("/events") and method == "GET":  # a stream: the status, then hang up at once
        with http.stream(method, url, headers=all_headers, content=body) as response:
            if response.status_code >= 400:
                response.read()
                check(response, method, path)
            else:
                assert response.headers["content-type"].startswith("text/event-stream"), response.headers
        return
    check(http.request(method, url, headers=all_headers, content=body), method, path)


def routes_in_order(world: World) -> list[Any]:
    """Every route; the ones that can take the callers' agents away (delete, update) run last."""
    routes = list(world.server.app.router.routes)
    return sorted(
        routes,
        key=lambda r: (
            "admin/agents/<" in r.path and r.methods & {"DELETE", "PUT"} != set(),
            r.path,
            sorted(r.methods),
        ),
    )


def driver(world: World, http: httpx.Client, route: Any) -> Any:
    """A hypothesis test for one route (methods and path parameters from the router)."""
    methods = sorted(route.methods)
    param_names = sorted({p.name for p in route.params.values()})

    def drive(data: st.DataObject) -> None:
        # now and then a method the route does not serve: 405, still problem+json
        method = data.draw(
            st.sampled_from(methods) if data.draw(st.integers(0, 9)) else st.sampled_from(METHODS),
            label="method",
        )
        params = {name: data.draw(path_values(world), label=name) for name in param_names}
        caller = data.draw(st.sampled_from(sorted(world.callers)), label="caller")
        send(
            http,
            method,
            build_path(route.path, params),
            data.draw(queries, label="query"),
            data.draw(headers, label="headers"),
            data.draw(raw_bodies(world, route.name), label="body"),
            world.callers[caller],
        )

    # derandomize seeds from the function's digest: without the route in it, every route would get
    # the same examples
    drive._hypothesis_internal_add_digest = f"{route.name} {methods}".encode()  # type: ignore[attr-defined]
    return settings(
        max_examples=EXAMPLES_PER_ROUTE,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )(given(data=st.data())(drive))


def test_every_route_answers_below_500_to_anything(world: World) -> None:
    routes = routes_in_order(world)
    assert len(routes) >= 30, [r.path for r in routes]
    started = time.monotonic()
    with httpx.Client(base_url=world.server.url, timeout=httpx.Timeout(10, read=5)) as http:
        for route in routes:
            driver(world, http, route)()
    elapsed = time.monotonic() - started
    time.sleep(0.2)  # let the server finish what hung-up streams leave behind
    log = world.log.text()
    assert "grantd.access: POST /api/grants" in log  # the capture sees the server's log
    assert "Traceback" not in log, log[-6000:]
    assert elapsed < 120, f"{len(routes)} routes took {elapsed:.1f}s"


def test_the_route_list_is_the_apps(world: World) -> None:
    """The router lists what the app serves: a route the property test would miss cannot hide."""
    paths = {"/" + r.path for r in world.server.app.router.routes}
    assert {
        "/api/grants",
        "/api/grants/events",
        "/api/delegations/<delegation_id:str>/validate",
        "/api/admin/agents/<ident:str>",
        "/healthz",
    } <= paths

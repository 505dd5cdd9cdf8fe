"""One representative request per route of the authorisation matrix, and how an answer is checked
against its cell (tests/system/test_authz_matrix.py)."""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from authz_world import SESSION_COOKIE, World, fresh_email, new_public_key

# -- one representative request per route -----------------------------------------------------------

Request = Callable[[World, str], httpx.Response]


SESSION_ENDING = ("/api/logout", "/api/webauthn/register/verify", "/api/webauthn/login/verify")


def _call(
    w: World, column: str, method: str, path: str, *, binding: str | None = None, **kwargs: Any
) -> httpx.Response:
    """``binding``: the passkey ceremony's browser binding (the ``grantd_passkey`` cookie of the
    options answer), which a browser sends back with verify (D8)."""
    with w.http_for(column) as http:
        if binding is not None:
            http.cookies.set("grantd_passkey", binding)
        response = http.request(method, path, **kwargs)
    if column in w.cookies and path in SESSION_ENDING:  # logout or a new sign-in ended the column's
        # session: the next cell gets a fresh one
        w.cookies[column] = w.guest_session() if column == "guest" else w.session(w.persons[column])
    return response


def _get(path: str) -> Request:
    return lambda w, c: _call(w, c, "GET", path)


def _challenge(path: str) -> Request:
    return lambda w, c: _call(w, c, "POST", path, json={"agent_id": w.agents["self"].email})


def _authenticate(path: str) -> Request:
    def run(w: World, c: str) -> httpx.Response:
        agent = w.agents["self"]
        with w.http() as http:
            challenge = http.post("/api/agent/challenge", json={"agent_id": agent.email}).json()["challenge"]
        signature = base64.b64encode(agent.key.sign(challenge.encode())).decode()
        return _call(
            w, c, "POST", path, json={"agent_id": agent.email, "challenge": challenge, "signature": signature}
        )

    return run


def _enroll(path: str) -> Request:
    def run(w: World, c: str) -> httpx.Response:
        _, public = new_public_key()
        return _call(
            w, c, "POST", path, json={"email": fresh_email("agent"), "name": "new", "publicKey": public}
        )

    return run


def _pending(w: World) -> str:
    return str(w.grant(w.agents["self"])["id"])


def _review_link(w: World, action: str = "review", *, passkey: bool = False) -> str:
    """A review link (D15) to a fresh pending grant of the requesting agent, for the `owner` column
    (``passkey``: who has a passkey here by then, whatever cells ran before)."""
    from grantd.services import review_links

    grant = w.srv.call(w.srv.services.store.grants.get(_pending(w)))
    owner = w.persons["owner"]
    if passkey and not w.srv.call(w.srv.services.store.credentials.list_for(owner["person_id"])):
        from people_support import add_passkey

        add_passkey(w.srv, owner["person_id"], str(w.srv.services.config.webauthn.rp_id))
    created = review_links.create(w.srv.services, grant, owner["email"], owner["person_id"], action)
    return str(w.srv.call(created))


def _on_pending(verb: str) -> Request:
    return lambda w, c: _call(w, c, "POST", f"/api/grants/{_pending(w)}/{verb}", json={})


def _consume(w: World, c: str) -> httpx.Response:
    token, grant_id = w.authz(c)
    with w.http_for(c) if c in w.cookies else w.http(token) as http:
        return http.post(f"/api/grants/{grant_id}/consume")


def _verify(w: World, c: str) -> httpx.Response:
    token, _ = w.authz(c)
    with w.http_for(c) if c in w.cookies else w.http() as http:
        return http.post("/api/grants/verify", json={"token": token} if token is not None else {})


def _events(w: World, c: str) -> httpx.Response:
    bearer = w.bearer(c)
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    if c in w.cookies:
        headers["Cookie"] = f"{SESSION_COOKIE}={w.cookies[c]}"
    with (
        httpx.Client(base_url=w.srv.url, timeout=10) as http,
        http.stream("GET", "/api/grants/events", headers=headers) as r,
    ):
        if r.status_code != 200:
            r.read()
        return r


def _new_grant(w: World, c: str) -> httpx.Response:
    body = {
        "target_host": "web-1",
        "audience": "escapes",
        "command": ["true"],
        "grant_type": "once",
        "requester": w.agents["self"].email,
    }
    return _call(w, c, "POST", "/api/grants", json=body)


def _logged(w: World) -> None:
    """Wait until a signed checkpoint covers at least one leaf (the sequencer works off the request path)."""
    deadline = time.monotonic() + 10
    with w.http() as http:
        while time.monotonic() < deadline:
            r = http.get("/api/audit/checkpoint")
            if r.status_code == 200 and int(r.text.split("\n")[1]) >= 1:
                return
            time.sleep(0.05)
    raise AssertionError("no checkpoint with a leaf")


def _audit(path: str) -> Request:
    def run(w: World, c: str) -> httpx.Response:
        _logged(w)
        return _call(w, c, "GET", path)

    return run


def _receipt(w: World, c: str) -> httpx.Response:
    from grantd.core.tlog.receipts import build_receipt

    token = build_receipt(
        Ed25519PrivateKey.generate(),
        host="never-enrolled",
        audience=w.srv.url,
        grant_id="gr_x",
        authz_jti="j",
        cmd_hash="sha256:00",
        run_as="root",
        result="refused",
        exit_code=None,
        started_at=1,
        ended_at=1,
        duration_ms=0,
        issued_at=int(time.time()),
    )
    return _call(w, c, "POST", "/api/audit/receipts", json={"receipt": token})


def _host(w: World, c: str) -> httpx.Response:
    from grantd.core.tlog.receipts import host_public_key_line

    name = "host-" + fresh_email("h").split("@")[0].replace("+", "-").replace(".", "-")[-40:]
    return _call(
        w,
        c,
        "POST",
        "/api/hosts",
        json={"host": name, "publicKey": host_public_key_line(Ed25519PrivateKey.generate())},
    )


REQUESTS: dict[str, Request] = {
    "GET /api/audit/checkpoint": _audit("/api/audit/checkpoint"),
    "GET /api/audit/key": _get("/api/audit/key"),
    "GET /api/audit/entries": _audit("/api/audit/entries?start=0"),
    "GET /api/audit/proof/inclusion": _audit("/api/audit/proof/inclusion?index=0&size=1"),
    "GET /api/audit/proof/consistency": _audit("/api/audit/proof/consistency?from=0&to=1"),
    "GET /api/audit/grants/:grant_id": lambda w, c: _call(w, c, "GET", f"/api/audit/grants/{_pending(w)}"),
    "POST /api/audit/receipts": _receipt,
    "POST /api/hosts": _host,
    "GET /healthz": _get("/healthz"),
    "GET /readyz": _get("/readyz"),
    "GET /.well-known/jwks.json": _get("/.well-known/jwks.json"),
    "GET /.well-known/openid-configuration": _get("/.well-known/openid-configuration"),
    "GET /api/federation/providers": _get("/api/federation/providers"),
    "GET /openapi.json": _get("/openapi.json"),
    "GET /metrics": _get("/metrics"),  # [metrics] is off on the matrix server: off is 404 for everyone
    "POST /api/agent/challenge": _challenge("/api/agent/challenge"),
    "POST /api/auth/challenge": _challenge("/api/auth/challenge"),
    "POST /api/agent/authenticate": _authenticate("/api/agent/authenticate"),
    "POST /api/auth/authenticate": _authenticate("/api/auth/authenticate"),
    "POST /api/agent/enroll": _enroll("/api/agent/enroll"),
    "POST /api/auth/enroll": _enroll("/api/auth/enroll"),
    "GET /api/me": _get("/api/me"),
    "GET /api/admin/agents": _get("/api/admin/agents"),
    "POST /api/admin/agents": _enroll("/api/admin/agents"),
    "GET /api/admin/agents/:ident": lambda w, c: _call(
        w, c, "GET", f"/api/admin/agents/{w.agents['self'].agent_id}"
    ),
    "PUT /api/admin/agents/:ident": lambda w, c: _call(
        w, c, "PUT", f"/api/admin/agents/{w.enroll('throwaway').agent_id}", json={"name": "renamed"}
    ),
    "DELETE /api/admin/agents/:ident": lambda w, c: _call(
        w, c, "DELETE", f"/api/admin/agents/{w.enroll('throwaway').agent_id}"
    ),
    "POST /api/grants": _new_grant,
    "GET /api/grants": _get("/api/grants"),
    "GET /api/grants/:grant_id": lambda w, c: _call(w, c, "GET", f"/api/grants/{_pending(w)}"),
    "POST /api/grants/:grant_id/approve": _on_pending("approve"),
    "POST /api/grants/:grant_id/deny": _on_pending("deny"),
    "GET /api/grants/:grant_id/notifications": lambda w, c: _call(
        w, c, "GET", f"/api/grants/{_pending(w)}/notifications"
    ),
    "GET /api/grants/:grant_id/reviewers": lambda w, c: _call(
        w, c, "GET", f"/api/grants/{_pending(w)}/reviewers"
    ),
    "POST /api/policies/evaluate": lambda w, c: _call(
        w,
        c,
        "POST",
        "/api/policies/evaluate",
        json={
            "requester": w.agents["self"].email,
            "target_host": "web-1",
            "audience": "escapes",
            "command": ["ls"],
        },
    ),
    "POST /api/grants/:grant_id/review": lambda w, c: _call(
        w, c, "POST", f"/api/grants/{_pending(w)}/review", json={"decision": "approve"}
    ),
    "POST /api/grants/:grant_id/revoke": _on_pending("revoke"),
    "POST /api/grants/:grant_id/token": lambda w, c: _call(
        w, c, "POST", f"/api/grants/{w.approved(w.agents['self'])[1]}/token"
    ),
    "POST /api/grants/:grant_id/consume": _consume,
    "POST /api/grants/verify": _verify,
    "POST /api/grants/batch": lambda w, c: _call(
        w, c, "POST", "/api/grants/batch", json={"operations": [{"id": _pending(w), "action": "approve"}]}
    ),
    "GET /api/grants/events": _events,
    "POST /api/delegations": lambda w, c: _call(
        w,
        c,
        "POST",
        "/api/delegations",
        json={
            "delegate": w.agents["self"].email,
            "audience": "matrix-only",
            "approval": "once",
            "duration": 600,
        },
    ),
    "GET /api/delegations": _get("/api/delegations"),
    "DELETE /api/delegations/:delegation_id": lambda w, c: _call(
        w, c, "DELETE", f"/api/delegations/{w.delegation(w.agents['self'])['id']}"
    ),
    "POST /api/delegations/:delegation_id/validate": lambda w, c: _call(
        w,
        c,
        "POST",
        f"/api/delegations/{w.delegation(w.agents['self'])['id']}/validate",
        json={"delegate": w.agents["self"].email, "audience": "matrix-only"},
    ),
    # people (docs/api.md): the admin API
    "GET /api/admin/users": _get("/api/admin/users"),
    "POST /api/admin/users": lambda w, c: _call(
        w, c, "POST", "/api/admin/users", json={"email": fresh_email("user")}
    ),
    "GET /api/admin/users/:ident": lambda w, c: _call(
        w, c, "GET", f"/api/admin/users/{w.persons['person']['email']}"
    ),
    "PATCH /api/admin/users/:ident": lambda w, c: _call(
        w, c, "PATCH", f"/api/admin/users/{w.person('throwaway')['email']}", json={"name": "renamed"}
    ),
    "DELETE /api/admin/users/:ident": lambda w, c: _call(
        w, c, "DELETE", f"/api/admin/users/{w.person('throwaway')['person_id']}"
    ),
    "GET /api/admin/users/:ident/credentials": lambda w, c: _call(
        w, c, "GET", f"/api/admin/users/{w.persons['person']['email']}/credentials"
    ),
    "GET /api/admin/sessions": _get("/api/admin/sessions"),
    "DELETE /api/admin/sessions/:family_id": lambda w, c: _call(
        w, c, "DELETE", f"/api/admin/sessions/{w.throwaway_session_family()}"
    ),
    "DELETE /api/admin/sessions/user/:ident": lambda w, c: _call(
        w, c, "DELETE", f"/api/admin/sessions/user/{w.person('throwaway')['email']}"
    ),
    "GET /api/admin/registration-urls": _get("/api/admin/registration-urls"),
    "POST /api/admin/registration-urls": lambda w, c: _call(
        w, c, "POST", "/api/admin/registration-urls", json={"email": fresh_email("invitee")}
    ),
    "DELETE /api/admin/registration-urls/:ident": lambda w, c: _call(
        w, c, "DELETE", f"/api/admin/registration-urls/{w.throwaway_registration()}"
    ),
}


def _registration_token(w: World) -> str:
    from support.soft_webauthn import make_registration

    return make_registration(w.srv, fresh_email("person"))


def _register_verify(w: World, c: str) -> httpx.Response:
    from support.soft_webauthn import SoftAuthenticator

    token = _registration_token(w)
    with w.http() as http:
        answer = http.post("/api/webauthn/register/options", json={"token": token})
    response = SoftAuthenticator().create(answer.json(), w.srv.url)
    return _call(
        w,
        c,
        "POST",
        "/api/webauthn/register/verify",
        json={"token": token, "response": response},
        binding=answer.cookies["grantd_passkey"],
    )


def _login_verify(w: World, c: str) -> httpx.Response:
    from support.soft_webauthn import SoftAuthenticator

    if "passkey" not in w.__dict__:
        authenticator, token = SoftAuthenticator(), _registration_token(w)
        with w.http() as http:
            options = http.post("/api/webauthn/register/options", json={"token": token}).json()
            r = http.post(
                "/api/webauthn/register/verify",
                json={"token": token, "response": authenticator.create(options, w.srv.url)},
            )
        assert r.status_code == 200, r.text
        w.__dict__["passkey"] = authenticator
    with w.http() as http:
        answer = http.post("/api/webauthn/login/options", json={})
    response = w.__dict__["passkey"].get(answer.json(), w.srv.url)
    return _call(
        w,
        c,
        "POST",
        "/api/webauthn/login/verify",
        json={"response": response},
        binding=answer.cookies["grantd_passkey"],
    )


REQUESTS.update(
    {
        # The browser pages (grantd.web.pages): read-only GETs; redirects are not followed.
        "GET /": _get("/"),
        "GET /login": _get("/login"),
        "GET /register": lambda w, c: _call(w, c, "GET", f"/register?token={_registration_token(w)}"),
        "GET /account": _get("/account"),
        "GET /grants": _get("/grants"),
        "GET /grant-approval": lambda w, c: _call(w, c, "GET", f"/grant-approval?grant_id={_pending(w)}"),
        "GET /enroll": _get("/enroll?name=bot&key=ssh-ed25519%20AAAA"),
        "GET /admin": _get("/admin"),
        "GET /static/:name": _get("/static/grantd.js"),
        "GET /sw.js": _get("/sw.js"),
    }
)


def _user_code(w: World) -> str:
    """A fresh pending device authorization's user code."""
    with w.http() as http:
        r = http.post("/device_authorization", data={"client_id": "grantd-cli"})
    assert r.status_code == 200, r.text
    return str(r.json()["user_code"])


def _bc_authorize(w: World) -> dict[str, str]:
    """A CIBA request of the `self` agent with a fresh client assertion (D16)."""
    import json as jsonlib
    import uuid

    agent = w.agents["self"]
    now = w.srv.clock.now_s()
    assertion = jwt.encode(
        {"iss": agent.email, "sub": agent.email, "aud": w.srv.url, "exp": now + 60, "jti": str(uuid.uuid4())},
        agent.key,
        algorithm="EdDSA",
    )
    detail = {
        "type": "grantd_command",
        "locations": ["web-1"],
        "actions": ["execute"],
        "command": ["true"],
        "audience": "escapes",
        "grant_type": "once",
    }
    return {
        "scope": "openid",
        "login_hint": "policy",
        "authorization_details": jsonlib.dumps([detail]),
        "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
        "client_assertion": assertion,
    }


REQUESTS.update(
    {
        # CIBA (grantd.web.api.ciba, D16).
        "POST /bc-authorize": lambda w, c: _call(w, c, "POST", "/bc-authorize", data=_bc_authorize(w)),
        # The device grant (grantd.web.api.device).
        "POST /device_authorization": lambda w, c: _call(
            w, c, "POST", "/device_authorization", data={"client_id": "grantd-cli"}
        ),
        "GET /device": lambda w, c: _call(w, c, "GET", f"/device?user_code={_user_code(w)}"),
        "POST /api/device/decide": lambda w, c: _call(
            w, c, "POST", "/api/device/decide", json={"user_code": _user_code(w), "approve": True}
        ),
    }
)


def _passkey_of(w: World, c: str) -> Any:
    """A SoftAuthenticator holding a passkey of the column's person (registered once through an
    ``add-device`` registration URL), or None for a column that is no person."""
    from support.soft_webauthn import SoftAuthenticator, make_registration

    if c not in w.persons:
        return None
    held = w.__dict__.setdefault("person_passkeys", {})
    if c not in held:
        authenticator, token = (
            SoftAuthenticator(),
            make_registration(w.srv, w.persons[c]["email"], purpose="add-device"),
        )
        with w.http() as http:
            options = http.post("/api/webauthn/register/options", json={"token": token}).json()
            r = http.post(
                "/api/webauthn/register/verify",
                json={"token": token, "response": authenticator.create(options, w.srv.url)},
            )
        assert r.status_code == 200, r.text
        held[c] = authenticator
    return held[c]


def _reauth(w: World, c: str) -> httpx.Response:
    _passkey_of(w, c)
    return _call(w, c, "POST", "/api/webauthn/credentials/add/reauth", json={})


def _confirmed_add_options(w: World, c: str) -> httpx.Response:
    """add/reauth, the person's passkey signs it (user verified), add/options with that assertion
    (a column refused the reauth posts an empty response: it is refused before the body is read)."""
    authenticator = _passkey_of(w, c)
    with w.http_for(c) as http:
        reauth = http.post("/api/webauthn/credentials/add/reauth", json={})
    assertion = authenticator.get(reauth.json(), w.srv.url) if reauth.status_code == 200 else {}
    return _call(w, c, "POST", "/api/webauthn/credentials/add/options", json={"response": assertion})


def _add_passkey(w: World, c: str) -> httpx.Response:
    """add/reauth, add/options, add/verify with a new software authenticator, as the column's caller."""
    from support.soft_webauthn import SoftAuthenticator

    options = _confirmed_add_options(w, c)
    response = SoftAuthenticator().create(options.json(), w.srv.url) if options.status_code == 200 else {}
    return _call(w, c, "POST", "/api/webauthn/credentials/add/verify", json={"response": response})


def _end_own_session(w: World, c: str) -> httpx.Response:
    """End another session of the column's person (a second browser), by its id from the list."""
    family = "fam_not-yours"
    if c in w.persons:
        other = w.session(w.persons[c])
        with httpx.Client(base_url=w.srv.url, cookies={SESSION_COOKIE: other}, timeout=10) as http:
            family = next(s["id"] for s in http.get("/api/sessions").json()["data"] if s["current"])
    return _call(w, c, "DELETE", f"/api/sessions/{family}")


def _spare_passkey(w: World, c: str) -> str:
    """A passkey of the column's person that is not their last one (two added if need be)."""
    if c not in w.cookies or c == "guest":
        return "some-credential"
    for _ in range(2):
        r = _add_passkey(w, c)
        assert r.status_code == 201, r.text
    return str(r.json()["credential"]["id"])


REQUESTS.update(
    {
        "POST /api/webauthn/register/options": lambda w, c: _call(
            w, c, "POST", "/api/webauthn/register/options", json={"token": _registration_token(w)}
        ),
        "POST /api/webauthn/register/verify": _register_verify,
        "POST /api/webauthn/login/options": lambda w, c: _call(
            w, c, "POST", "/api/webauthn/login/options", json={}
        ),
        "POST /api/webauthn/login/verify": _login_verify,
        "GET /api/webauthn/credentials": _get("/api/webauthn/credentials"),
        "POST /api/webauthn/credentials/add/reauth": _reauth,
        "POST /api/webauthn/credentials/add/options": _confirmed_add_options,
        "GET /api/sessions": _get("/api/sessions"),
        "DELETE /api/sessions/:session_id": _end_own_session,
        "POST /api/webauthn/credentials/add/verify": lambda w, c: _add_passkey(w, c),
        "DELETE /api/webauthn/credentials/:credential_id": lambda w, c: _call(
            w, c, "DELETE", f"/api/webauthn/credentials/{_spare_passkey(w, c)}"
        ),
        "POST /api/logout": lambda w, c: _call(w, c, "POST", "/api/logout", json={}),
    }
)

REQUESTS.update(
    {
        # SP login (D9): the matrix server is its own IdP for matrix.test (a DDISA record on a local DNS server)
        "POST /api/login": lambda w, c: _call(
            w, c, "POST", "/api/login", json={"email": "someone@matrix.test"}
        ),
        "GET /api/callback": _get("/api/callback?code=not-a-code&state=not-a-state"),  # -> /?error=...
        "GET /auth/federated/:provider_id": _get("/auth/federated/self?next=/account"),
        "GET /auth/federated/:provider_id/callback": _get(
            "/auth/federated/self/callback?code=x&state=not-a-state"
        ),
        "GET /.well-known/oauth-client-metadata": _get("/.well-known/oauth-client-metadata"),
        "GET /.well-known/auth.md": _get("/.well-known/auth.md"),
        "GET /.well-known/grantd.json": _get("/.well-known/grantd.json"),
        "GET /.well-known/service.json": _get("/.well-known/service.json"),
    }
)


def _remember_consent(w: World, c: str) -> None:
    """The column's person has consented to apes-cli before (so /authorize answers with a code)."""
    if c in w.persons:
        now = w.srv.clock.now_ms()
        w.srv.call(
            w.srv.services.store.consents.remember(
                {
                    "person_id": w.persons[c]["person_id"],
                    "client_id": "apes-cli",
                    "scope": "openid email profile offline_access",
                    "created_at": now,
                    "updated_at": now,
                }
            )
        )


def _apes_authorize(challenge: str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM") -> str:
    from urllib.parse import urlencode

    return urlencode(
        {
            "response_type": "code",
            "client_id": "apes-cli",
            "redirect_uri": "http://localhost:9876/callback",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": "matrix",
            "scope": "openid email profile offline_access",
        }
    )


def _consent_ticket(w: World, c: str) -> str | None:
    """The one-time ticket of the consent page the column's person is shown for apes-cli (None for
    columns without a session: their POST is refused before any ticket is looked at)."""
    if c not in w.cookies:
        return None
    from oauth_support import ticket_of

    with httpx.Client(base_url=w.srv.url, cookies={SESSION_COOKIE: w.cookies[c]}, timeout=10) as http:
        return ticket_of(http.get("/authorize?" + _apes_authorize()).text)


def _consent(w: World, c: str) -> httpx.Response:
    return _call(
        w,
        c,
        "POST",
        "/authorize/consent",
        json={"request": _apes_authorize(), "approve": True, "ticket": _consent_ticket(w, c)},
    )


def _code_exchange(w: World) -> dict[str, str]:
    """A fresh code of the `person` column for apes-cli, as /token form fields."""
    from urllib.parse import parse_qs, urlsplit

    verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    _remember_consent(w, "person")
    with httpx.Client(base_url=w.srv.url, cookies={SESSION_COOKIE: w.cookies["person"]}, timeout=10) as http:
        # apes-cli is asked every time (RFC 8252 §8.6): the consent page's approval gives the code
        ticket = _consent_ticket(w, "person")
        location = http.post(
            "/authorize/consent",
            json={"request": _apes_authorize(), "approve": True, "ticket": ticket},
            headers={"Origin": w.srv.url},
        ).json()["location"]
    code = parse_qs(urlsplit(location).query)["code"][0]
    return {
        "grant_type": "authorization_code",
        "code": code,
        "code_verifier": verifier,
        "client_id": "apes-cli",
        "redirect_uri": "http://localhost:9876/callback",
    }


def _withdraw_consent(w: World, c: str) -> httpx.Response:
    _remember_consent(w, c)
    return _call(w, c, "DELETE", "/api/account/consents/apes-cli")


REQUESTS.update(
    {
        # The OAuth provider (grantd.web.api.oauth)
        "GET /authorize": lambda w, c: (
            _remember_consent(w, c),
            _call(w, c, "GET", "/authorize?" + _apes_authorize()),
        )[1],
        "POST /authorize/consent": _consent,
        "POST /token": lambda w, c: _call(w, c, "POST", "/token", data=_code_exchange(w)),
        "POST /revoke": lambda w, c: _call(w, c, "POST", "/revoke", data={"token": "not-a-token-of-ours"}),
        "GET /.well-known/oauth-authorization-server": _get("/.well-known/oauth-authorization-server"),
        "POST /introspect": lambda w, c: _call(w, c, "POST", "/introspect", data={"token": "not-a-token"}),
        "GET /authorize/poll/:secret": _get("/authorize/poll/" + "p" * 43),
        "GET /userinfo": _get("/userinfo"),
        "POST /userinfo": lambda w, c: _call(w, c, "POST", "/userinfo"),
        "GET /api/account/consents": _get("/api/account/consents"),
        "GET /api/account/notifications": _get("/api/account/notifications"),
        "GET /r/:token": lambda w, c: _call(w, c, "GET", f"/r/{_review_link(w)}"),
        "GET /api/push/vapid": _get("/api/push/vapid"),
        "GET /api/push/subscriptions": _get("/api/push/subscriptions"),
        "POST /api/push/subscriptions": lambda w, c: _call(
            w,
            c,
            "POST",
            "/api/push/subscriptions",
            json={"endpoint": "https://fcm.googleapis.com/x", "keys": {"p256dh": "A", "auth": "A"}},
        ),
        "DELETE /api/push/subscriptions/:subscription_id": lambda w, c: _call(
            w, c, "DELETE", "/api/push/subscriptions/sub_nobodys"
        ),
        "POST /r/:token/options": lambda w, c: _call(
            w, c, "POST", f"/r/{_review_link(w, passkey=True)}/options", json={}
        ),
        "POST /r/:token": lambda w, c: _call(
            w, c, "POST", f"/r/{_review_link(w)}", json={"decision": "approve"}
        ),
        "POST /r/:token/deny": lambda w, c: _call(w, c, "POST", f"/r/{_review_link(w, 'deny')}/deny"),
        "PUT /api/account/notifications": lambda w, c: _call(
            w, c, "PUT", "/api/account/notifications", json={"channels": {}}
        ),
        "DELETE /api/account/consents/:client_id": _withdraw_consent,
    }
)


def check(response: httpx.Response, expected: str) -> None:
    status_text, _, marker = expected.partition(" ")
    status = int(status_text)
    body = response.text if response.is_stream_consumed or response.status_code != 200 else ""
    assert response.status_code == status, f"expected {expected}, got {response.status_code}: {body[:300]}"
    if marker == "login":  # a page (or /) sends a visitor without a session to sign in
        assert response.headers["location"].startswith("/login"), response.headers
        return
    if marker == "page":  # an HTML page (errors too: pages never answer problem+json)
        assert response.headers["content-type"].startswith("text/html"), response.headers
        return
    if marker in ("oauth", "basic"):  # /token, /revoke, /userinfo, /introspect errors: {error,
        # error_description} (D2), not problem+json; /introspect asks for HTTP Basic
        assert response.headers["content-type"].startswith("application/json"), response.headers
        assert "error" in response.json() and response.headers["cache-control"].startswith("no-store")
        if status == 401:
            scheme = "Basic" if marker == "basic" else "Bearer"
            assert response.headers.get("www-authenticate", "").startswith(scheme), response.headers
        return
    if status == 401:
        assert response.headers.get("www-authenticate", "").startswith("Bearer"), response.headers
    if status >= 400:
        assert response.headers["content-type"].startswith("application/problem+json"), response.headers
        assert json.loads(body)["status"] == status
    if not marker:
        return
    answer = response.json()
    if marker in ("valid", "invalid") and "valid" in answer:
        assert answer["valid"] is (marker == "valid"), answer
    elif marker in ("consumed", "valid"):
        assert answer.get("status") == marker and "error" not in answer, answer
    elif marker == "revoked":
        assert answer.get("error") == "revoked", answer
    elif marker.startswith("op:"):
        [result] = answer["results"]
        if marker == "op:ok":
            assert result["success"] is True, result
        else:
            assert result["success"] is False and result["error"]["status"] == int(marker[3:]), result
    else:
        raise AssertionError(f"unknown marker {marker!r} in the table")


def route_keys(app: Any) -> set[str]:
    """Every (method, path) the app's router serves, in the table's spelling (`:name` parameters)."""

    keys = set()
    for route in app.router.routes:
        path = "/" + re.sub(r"<([A-Za-z_][A-Za-z0-9_]*)(?::[^>]*)?>", r":\1", route.path)
        for method in route.methods:
            if method not in ("HEAD", "OPTIONS"):
                keys.add(f"{method} {path}")
    return keys

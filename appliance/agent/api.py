"""The IdP over HTTP with the agent's token: challenge-response sign-in (D5), renewal, problems read."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from grantd.agent.errors import CliError
from grantd.agent.state import State, load_private_key
from grantd.client.problems import read_problem
from grantd.core.display import escape_text

RELOGIN_MARGIN = 60  # seconds before exp at which a token counts as expired
HTTP_TIMEOUT = float(os.environ.get("GRANTD_HTTP_TIMEOUT") or 15)


# -- HTTP --------------------------------------------------------------------------------------------


def problem_text(response: httpx.Response) -> str:
    """The server's words (escaped, D18), else ``HTTP 502 Bad Gateway``."""
    return read_problem(response).text


class Api:
    """The IdP with the agent's token: renews the token silently before it expires or after a 401."""

    def __init__(self, idp: str, state: State | None = None, *, timeout: float = HTTP_TIMEOUT):
        self.idp = idp.rstrip("/")
        self.state = state
        self.client = httpx.Client(base_url=self.idp, timeout=timeout, headers={"User-Agent": "grantd-agent"})
        self.nonce: str | None = None  # the server's last DPoP-Nonce (RFC 9449 §8)

    def proof(
        self, method: str, path: str, access_token: str | None = None, *, url: str | None = None
    ) -> str:
        """A DPoP proof made with the agent's key for ``method`` at the issuer's ``path`` (the
        server checks `htu` against its issuer, not against the address the agent reached)."""
        return dpop_proof(
            self.key_path(), method, url or self.issuer + path.split("?", 1)[0], access_token, self.nonce
        )

    def key_path(self) -> str:
        if self.state is None or not self.state.key_path:
            raise CliError("no agent key is known: run grantd agent login again", kind="auth")
        return self.state.key_path

    def auth_headers(self, method: str, path: str, *, force: bool = False) -> dict[str, str]:
        token = self.token(force=force)
        assert self.state is not None
        if self.state.token_type == "DPoP":  # noqa: S105 - a token type
            return {"Authorization": f"DPoP {token}", "DPoP": self.proof(method, path, token)}
        return {"Authorization": f"Bearer {token}"}

    def took_nonce(self, response: httpx.Response) -> bool:
        """Whether the answer asks for a (new) DPoP nonce; it is remembered for the next proof."""
        nonce = response.headers.get("dpop-nonce")
        if nonce and nonce != self.nonce and response.status_code in (400, 401):
            self.nonce = nonce
            return True
        return False

    def close(self) -> None:
        self.client.close()

    @property
    def issuer(self) -> str:
        """The server's issuer, the base of every link printed for a person (D18): the agent may reach
        the server at another address (``--idp http://127.0.0.1:8000`` for ``http://localhost:8000``),
        where passkeys do not work. From the token's ``iss``, else from discovery, else the IdP URL."""
        state = self.state
        if state is not None and state.idp == self.idp:
            if not state.issuer and state.token:
                state.issuer = issuer_of(state.token)
            if state.issuer:
                return state.issuer
        try:
            answer = self.client.get(
                "/.well-known/openid-configuration", headers={"Accept": "application/json"}
            )
            found = answer.json().get("issuer") if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            found = None
        return (
            found.rstrip("/")
            if isinstance(found, str) and found.startswith(("http://", "https://"))
            else self.idp
        )

    def _transport_error(self, exc: Exception) -> CliError:
        if isinstance(exc, httpx.TimeoutException):
            return CliError(
                f"the IdP {self.idp} did not answer in time ({exc.__class__.__name__})", kind="unreachable"
            )
        return CliError(f"cannot reach the IdP {self.idp}: {escape_text(str(exc))}", kind="unreachable")

    def raw(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self.client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None

    def token(self, *, force: bool = False) -> str:
        state = self.state
        if state is None or not state.email:
            raise CliError(
                "not logged in: run grantd agent login --idp URL --key FILE --email E", kind="auth"
            )
        if not force and state.token and state.expires_at - time.time() > RELOGIN_MARGIN:
            return state.token
        if not state.key_path:
            raise CliError(
                "the agent token expired and no key is known: run grantd agent login again", kind="auth"
            )
        login(self, state.email, state.key_path)
        return state.token

    def call(
        self, method: str, path: str, *, headers: dict[str, str] | None = None, **kwargs: Any
    ) -> httpx.Response:
        all_headers = {"Content-Type": "application/json", "Accept": "application/json", **(headers or {})}
        response = self.raw(
            method, path, headers={**all_headers, **self.auth_headers(method, path)}, **kwargs
        )
        if self.took_nonce(response):  # the server wants a fresh DPoP nonce: the same token again
            response = self.raw(
                method, path, headers={**all_headers, **self.auth_headers(method, path)}, **kwargs
            )
        if response.status_code == 401:  # e.g. the server's keys rotated: one fresh sign-in, then give up
            response = self.raw(
                method,
                path,
                headers={**all_headers, **self.auth_headers(method, path, force=True)},
                **kwargs,
            )
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.call(method, path, **kwargs)
        return expect_json(response, what=f"{method} {path}")

    @contextlib.contextmanager
    def stream(self, path: str, *, headers: dict[str, str], read_timeout: float) -> Iterator[httpx.Response]:
        timeout = httpx.Timeout(HTTP_TIMEOUT, read=read_timeout)
        all_headers = {"Accept": "text/event-stream", **self.auth_headers("GET", path), **headers}
        with self.client.stream("GET", path, headers=all_headers, timeout=timeout) as response:
            yield response


def expect_json(response: httpx.Response, *, what: str) -> Any:
    if response.status_code >= 400:
        kind = {401: "auth", 403: "forbidden", 404: "not_found"}.get(response.status_code, "http")
        raise CliError(
            f"{problem_text(response)} ({what}: HTTP {response.status_code})",
            kind=kind,
            status=response.status_code,
        )
    try:
        return response.json()
    except ValueError:
        raise CliError(
            f"{what}: the IdP answered HTTP {response.status_code} without JSON", kind="http"
        ) from None


def wants_dpop() -> bool:
    """The agent asks for DPoP-bound tokens unless GRANTD_AGENT_DPOP=off (a server with
    ``agent_dpop = "off"`` ignores the proof and answers a bearer token)."""
    return os.environ.get("GRANTD_AGENT_DPOP", "on").lower() not in ("off", "0", "no", "false")


def dpop_proof(key_path: str, method: str, url: str, access_token: str | None, nonce: str | None) -> str:
    import uuid

    from grantd.dpop import make_proof

    return make_proof(
        load_private_key(key_path),
        method=method,
        url=url,
        iat=int(time.time()),
        jti=str(uuid.uuid4()),
        access_token=access_token,
        nonce=nonce,
    )


def claims_of(token: str) -> dict[str, Any]:
    """A JWT's claims, read without checking the signature (the agent only looks at its own tokens)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, UnicodeDecodeError):
        return {}
    return claims if isinstance(claims, dict) else {}


def grant_line(api: Api, authz_jwt: str) -> str:
    """What `grantd elevate` reads: the bare AuthZ-JWT, or for a DPoP-bound one (``cnf``) the JSON
    line ``{authz_jwt, dpop}`` with a fresh proof for POST {iss}/api/grants/{id}/consume (D16)."""
    claims = claims_of(authz_jwt)
    if not isinstance(claims.get("cnf"), dict):
        return authz_jwt
    from urllib.parse import quote

    url = f"{claims.get('iss')}/api/grants/{quote(str(claims.get('grant_id')), safe='')}/consume"
    proof = dpop_proof(api.key_path(), "POST", url, authz_jwt, None)
    return json.dumps({"authz_jwt": authz_jwt, "dpop": proof}, separators=(",", ":"))


def issuer_of(token: str) -> str:
    """The ``iss`` claim of a JWT, read without checking the signature: the agent only prints links on
    it (the server that issued the token is the one the agent already talks to)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, UnicodeDecodeError):
        return ""
    iss = claims.get("iss") if isinstance(claims, dict) else None
    return iss.rstrip("/") if isinstance(iss, str) and iss.startswith(("http://", "https://")) else ""


def login(api: Api, email: str, key_path: str) -> State:
    """Challenge-response (D5): sign the challenge string with the agent's Ed25519 key."""
    key = load_private_key(key_path)
    response = api.raw("POST", "/api/agent/challenge", json={"agent_id": email})
    if response.status_code == 404:
        raise CliError(
            f"{email} is not enrolled at {api.idp} (ask an admin to enrol the public key)", kind="auth"
        )
    challenge = expect_json(response, what="challenge").get("challenge")
    if not isinstance(challenge, str):
        raise CliError("the IdP sent no challenge", kind="http")
    signature = base64.b64encode(key.sign(challenge.encode())).decode()
    headers = {}
    if wants_dpop():  # D16: the token is bound to this key, so a copy of it is useless elsewhere
        headers["DPoP"] = dpop_proof(
            key_path, "POST", api.issuer + "/api/agent/authenticate", None, api.nonce
        )
    response = api.raw(
        "POST",
        "/api/agent/authenticate",
        json={"agent_id": email, "challenge": challenge, "signature": signature},
        headers=headers,
    )
    if headers and api.took_nonce(response):  # a server nonce is required: once more, with it
        return login(api, email, key_path)
    if response.status_code in (400, 401, 403):
        raise CliError(
            f"sign-in refused for {email}: {problem_text(response)} (is {key_path} the enrolled key?)",
            kind="auth",
        )
    answer = expect_json(response, what="authenticate")
    state = api.state or State()
    state.idp, state.email, state.key_path = api.idp, email, str(Path(key_path).resolve())
    state.token = answer["token"]
    state.token_type = "DPoP" if answer.get("token_type") == "DPoP" else "Bearer"
    state.issuer = issuer_of(state.token) or state.issuer
    state.agent_id = answer.get("agent_id") or state.agent_id
    state.expires_at = int(time.time()) + int(answer.get("expires_in") or 3600)
    state.save()
    api.state = state
    return state

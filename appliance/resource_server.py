"""Protect an MCP server (or any HTTP resource) with grantd (D17; docs/mcp.md).

``ResourceServer(issuer, resource, scopes=..., grant_scopes=...)``:

- ``metadata()``: its RFC 9728 Protected Resource Metadata, served at ``metadata_path`` (the
  well-known path with the resource's path appended);
- ``await verify(token, scopes=...)``: the token's claims, or ``Refused``: an EdDSA ``at+jwt`` of
  the issuer (its JWKS fetched and cached; refetched, at most every 30 s, for an unknown ``kid``),
  ``aud`` = this resource, unexpired, carrying ``scopes``; bound by DPoP (``cnf.jkt``) only with a
  valid proof for this request. When ``scopes`` names a grant-gated scope and the token carries a
  ``once`` grant, the grant is consumed at grantd (``POST /api/grants/:id/consume`` with the token
  as bearer): a ``once`` token works once;
- ``challenge(error, scope)``: the ``WWW-Authenticate`` value of a 401 or 403;
- ``token_verifier()``: a ``TokenVerifier`` for the official MCP Python SDK (``mcp``: install
  ``grantd[mcp]``); it never consumes a grant (it sees every request, not which tool is called);
- ``tool_guard(app, tools={tool: scope})``: ASGI middleware that answers a ``tools/call`` of a
  listed tool with 403 ``insufficient_scope`` unless the token carries the scope, and consumes a
  ``once`` grant behind it — unless ``grant_middleware`` consumes it;
- ``grant_middleware(tools)``: the SDK's server middleware (``MCPServer(middleware=[...])``) that
  consumes a listed tool's grant when the SDK has accepted the call and is about to run the tool,
  so a request the SDK refuses (no session, an unknown one, a malformed message) uses up nothing;
  ``tool_guard`` then only checks (and answers 403 for a grant this resource already used).

A client of grantd's HTTP interface: it imports nothing of the server (tests/unit/test_layers.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx
import jwt

JWKS_REFRESH_S = 30.0  # an unknown kid refetches the JWKS at most this often
JWKS_TTL_S = 300.0
LEEWAY_S = 30
MAX_TOKEN = 8192
MAX_BODY = 4 * 1024 * 1024  # a JSON-RPC request tool_guard reads to find the tool; larger: 413
MAX_PROOFS_SEEN = 100_000  # beyond this (all unexpired) a proof is refused rather than forgotten


class Refused(Exception):
    """A token this resource does not take: ``status`` 401 (``invalid_token``) or 403
    (``insufficient_scope``, with the ``scope`` to ask for)."""

    def __init__(self, error: str, description: str, scope: str | None = None):
        super().__init__(description)
        self.error = error
        self.description = description
        self.scope = scope
        self.status = 403 if error == "insufficient_scope" else 401


def _quoted(text: str) -> str:
    return "".join(c for c in text if c.isprintable() and c not in '"\\')[:200]


class ResourceServer:
    def __init__(
        self,
        issuer: str,
        resource: str,
        *,
        scopes: Iterable[str] = (),
        grant_scopes: Iterable[str] = (),
        http: httpx.AsyncClient | None = None,
        name: str | None = None,
    ):
        self.issuer = issuer.rstrip("/")
        self.resource = resource
        self.scopes = tuple(scopes)
        self.grant_scopes = frozenset(grant_scopes)
        self.name = name
        self._http = http
        self._keys: dict[str, Any] = {}
        self._fetched_at = 0.0
        self._proofs: dict[str, float] = {}  # DPoP proofs seen (``<jkt>:<jti>`` -> until when): one use each
        self._lock: asyncio.Lock | None = None
        self._lock_loop: Any = None
        self._consumed_later: set[str] = set()  # tools whose grants grant_middleware consumes
        self._used: dict[str, float] = {}  # once grants this resource consumed -> until when (token exp)

    # -- RFC 9728 ---------------------------------------------------------------------------------
    @property
    def metadata_path(self) -> str:
        path = urlsplit(self.resource).path.rstrip("/")
        return "/.well-known/oauth-protected-resource" + path

    @property
    def metadata_url(self) -> str:
        parts = urlsplit(self.resource)
        return f"{parts.scheme}://{parts.netloc}{self.metadata_path}"

    def metadata(self) -> dict[str, Any]:
        from grantd.dpop import PROOF_ALGS  # the one list; imported here, as for bound tokens

        doc: dict[str, Any] = {
            "resource": self.resource,
            "authorization_servers": [self.issuer],
            "scopes_supported": [s for s in self.scopes if s not in self.grant_scopes],
            "bearer_methods_supported": ["header"],
            "dpop_signing_alg_values_supported": list(PROOF_ALGS),
        }
        if self.name:
            doc["resource_name"] = self.name
        return doc

    def challenge(
        self, error: str | None = None, scope: str | None = None, description: str | None = None
    ) -> str:
        """``Bearer resource_metadata="…"[, error="…"][, scope="…"]`` (RFC 6750 §3, RFC 9728 §5.1)."""
        parts = [f'resource_metadata="{self.metadata_url}"']
        if error:
            parts.append(f'error="{_quoted(error)}"')
        if description:
            parts.append(f'error_description="{_quoted(description)}"')
        wanted = scope or " ".join(s for s in self.scopes if s not in self.grant_scopes)
        if wanted:
            parts.append(f'scope="{_quoted(wanted)}"')
        return "Bearer " + ", ".join(parts)

    # -- verification -------------------------------------------------------------------------------
    async def _request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """One request to grantd: on the client given to the constructor, else on a new one (the
        server may run several event loops; a client is bound to one)."""
        if self._http is not None:
            return await self._http.request(method, url, **kwargs)
        async with httpx.AsyncClient(timeout=10.0, follow_redirects=False) as http:
            return await http.request(method, url, **kwargs)

    async def _key(self, kid: str) -> Any:
        now = time.monotonic()
        if kid in self._keys and now - self._fetched_at < JWKS_TTL_S:
            return self._keys[kid]
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        async with self._lock:
            if kid in self._keys and time.monotonic() - self._fetched_at < JWKS_TTL_S:
                return self._keys[kid]
            if kid not in self._keys and now - self._fetched_at < JWKS_REFRESH_S and self._keys:
                raise Refused("invalid_token", "unknown signing key")
            try:
                answer = await self._request("GET", f"{self.issuer}/.well-known/jwks.json")
                answer.raise_for_status()
                keys = {
                    k["kid"]: jwt.PyJWK(k).key
                    for k in answer.json().get("keys", [])
                    if isinstance(k, dict) and k.get("kty") == "OKP" and isinstance(k.get("kid"), str)
                }
            except (httpx.HTTPError, ValueError, jwt.PyJWTError) as exc:
                raise Refused(
                    "invalid_token", f"cannot read the issuer's keys ({type(exc).__name__})"
                ) from None
            self._keys, self._fetched_at = keys, time.monotonic()
        if kid not in self._keys:
            raise Refused("invalid_token", "unknown signing key")
        return self._keys[kid]

    async def verify(
        self,
        token: str,
        *,
        scopes: Iterable[str] = (),
        dpop: str | None = None,
        method: str = "POST",
        url: str | None = None,
        use_grant: bool = True,
    ) -> dict[str, Any]:
        """The token's claims (module docstring), or ``Refused``. ``use_grant=False``: a grant-gated
        scope is checked (the token carries a grant this resource has not used up) but not used."""
        if not isinstance(token, str) or not token or len(token) > MAX_TOKEN or token.count(".") != 2:
            raise Refused("invalid_token", "malformed token")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Refused("invalid_token", "malformed token") from None
        if header.get("alg") != "EdDSA" or not isinstance(header.get("kid"), str):
            raise Refused("invalid_token", "unsupported algorithm")
        if str(header.get("typ", "")).lower().removeprefix("application/") != "at+jwt":
            raise Refused("invalid_token", "not an RFC 9068 access token")
        key = await self._key(header["kid"])
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=["EdDSA"],
                issuer=self.issuer,
                audience=self.resource,
                leeway=LEEWAY_S,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.InvalidAudienceError:
            raise Refused("invalid_token", "the token is for another resource") from None
        except jwt.ExpiredSignatureError:
            raise Refused("invalid_token", "expired token") from None
        except jwt.PyJWTError as exc:
            raise Refused("invalid_token", f"invalid token ({type(exc).__name__})") from None
        self._check_dpop(claims, token, dpop, method, url)
        granted = set(str(claims.get("scope", "")).split())
        wanted = list(dict.fromkeys(scopes))
        missing = [s for s in wanted if s not in granted]
        if missing:
            raise Refused(
                "insufficient_scope",
                f"this needs the scope {missing[0]}",
                " ".join(sorted(granted | set(wanted))),
            )
        if any(s in self.grant_scopes for s in wanted):
            if use_grant:
                await self._use_grant(token, claims, wanted)
            else:
                self._check_grant(claims, wanted)
        return claims

    def _check_dpop(
        self, claims: dict[str, Any], token: str, proof: str | None, method: str, url: str | None
    ) -> None:
        cnf = claims.get("cnf")
        if not isinstance(cnf, dict) or "jkt" not in cnf:
            return
        from grantd.dpop import DpopError, verify_proof  # only for bound tokens

        try:
            verify_proof(
                proof,
                method=method,
                htu=url or self.resource,
                now=time.time(),
                access_token=token,
                expected_jkt=str(cnf["jkt"]),
                first_use=self._first_use,
            )
        except DpopError as exc:
            raise Refused("invalid_token", f"DPoP: {exc}") from None

    def _first_use(self, key: str, expires_at: float) -> bool:
        """DPoP replay check (RFC 9449 §11.1), in this process's memory: a proof counts once."""
        now = time.time()
        if len(self._proofs) > MAX_PROOFS_SEEN:
            self._proofs = {k: until for k, until in self._proofs.items() if until > now}
        if self._proofs.get(key, 0.0) > now:
            return False
        self._proofs[key] = expires_at
        return len(self._proofs) <= MAX_PROOFS_SEEN

    async def _use_grant(self, token: str, claims: dict[str, Any], wanted: list[str]) -> None:
        """A grant-gated scope is good only with a live grant: a ``once`` grant is consumed now (one
        winner at grantd), any other is checked there. Refused as ``insufficient_scope``, so the
        client asks for a new grant."""
        scope = " ".join(wanted)
        grant_id = claims.get("grant_id")
        if not isinstance(grant_id, str):
            raise Refused("insufficient_scope", "this needs a person's grant", scope)
        try:
            answer = await self._request(
                "POST",
                f"{self.issuer}/api/grants/{grant_id}/consume",
                headers={"Authorization": f"Bearer {token}"},
            )
            body = answer.json() if answer.status_code == 200 else {}
        except (httpx.HTTPError, ValueError):
            raise Refused("insufficient_scope", "the grant could not be checked at grantd", scope) from None
        if "error" in body or body.get("status") not in ("consumed", "valid"):
            raise Refused("insufficient_scope", "the grant is used up, revoked or expired", scope)
        if body.get("status") == "consumed":
            now = time.time()
            self._used = {g: until for g, until in self._used.items() if until > now}  # expired: forget
            self._used[grant_id] = float(claims.get("exp", now)) + LEEWAY_S

    def _check_grant(self, claims: dict[str, Any], wanted: list[str]) -> None:
        """What ``_use_grant`` refuses without asking grantd: no grant, or one this resource used."""
        scope = " ".join(wanted)
        grant_id = claims.get("grant_id")
        if not isinstance(grant_id, str):
            raise Refused("insufficient_scope", "this needs a person's grant", scope)
        if grant_id in self._used:
            raise Refused("insufficient_scope", "the grant is used up, revoked or expired", scope)

    # -- the official MCP Python SDK ------------------------------------------------------------------
    def grant_middleware(self, tools: Mapping[str, str]) -> Any:
        """The SDK's server middleware that uses a listed tool's grant as the tool is about to run
        (module docstring): ``MCPServer(..., middleware=[rs.grant_middleware({"deploy": "tools:deploy"})])``.
        Refused (the grant was used meanwhile, revoked, expired) the call ends in a JSON-RPC error
        and the tool does not run."""
        self._consumed_later.update(tools)
        return _grant_middleware(self, dict(tools))

    def token_verifier(self) -> Any:
        """An object the SDK takes as its ``TokenVerifier`` (``MCPServer(token_verifier=..., auth=...)``)."""
        from mcp.server.auth.provider import AccessToken

        outer = self

        class GrantdTokenVerifier:
            async def verify_token(self, token: str) -> AccessToken | None:
                try:
                    claims = await outer.verify(token)
                except Refused:
                    return None
                return AccessToken(
                    token=token,
                    client_id=str(claims.get("client_id", "")),
                    scopes=str(claims.get("scope", "")).split(),
                    expires_at=int(claims["exp"]),
                    resource=str(claims["aud"]),
                    subject=str(claims["sub"]),
                    claims=claims,
                )

        return GrantdTokenVerifier()

    def auth_settings(self, required_scopes: Iterable[str] | None = None) -> Any:
        """The SDK's ``AuthSettings`` for this resource: grantd as issuer, this resource as the
        audience tokens must name; ``required_scopes`` (default: the scopes without a grant) are
        what every request needs and what the SDK's metadata lists."""
        from mcp.server.auth.settings import AuthSettings

        scopes = (
            list(required_scopes)
            if required_scopes is not None
            else [s for s in self.scopes if s not in self.grant_scopes]
        )
        # strings, validated by the model: it keeps a path-less issuer without a trailing slash
        # (RFC 8414 compares issuers as strings), which AnyHttpUrl built apart would add
        return AuthSettings.model_validate(
            {
                "issuer_url": self.issuer,
                "resource_server_url": self.resource,
                "required_scopes": scopes,
                "validate_token_resource": True,
            }
        )

    def tool_guard(self, app: Any, tools: Mapping[str, str]) -> Any:
        """ASGI middleware: a JSON-RPC ``tools/call`` of a tool in ``tools`` (name -> scope) needs
        that scope (403 ``insufficient_scope`` with this resource's challenge otherwise) and, for a
        grant-gated scope, a live grant (a ``once`` grant is consumed here)."""
        outer = self

        async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope.get("type") != "http" or scope.get("method") != "POST":
                await app(scope, receive, send)
                return
            body = b""
            more = True
            while more:
                message = await receive()
                body += message.get("body", b"")
                more = bool(message.get("more_body"))
                if len(body) > MAX_BODY:
                    await _refuse(send, Refused("invalid_request", "request body too large"), "", status=413)
                    return
            needed = _needed_scopes(body, tools)
            if needed:
                token = _bearer(scope)
                # a grant grant_middleware uses as the tool runs is only checked here
                later = {t: s for t, s in tools.items() if t in outer._consumed_later}
                checked = _needed_scopes(body, later)
                used = _needed_scopes(body, {t: s for t, s in tools.items() if t not in later})
                try:
                    if token is None:
                        raise Refused("invalid_token", "a bearer token is required")
                    if checked:
                        await outer.verify(token, scopes=checked, use_grant=False)
                    if used:
                        await outer.verify(token, scopes=used)
                except Refused as exc:
                    await _refuse(send, exc, outer.challenge(exc.error, exc.scope, exc.description))
                    return
            replayed = False

            async def replay() -> dict[str, Any]:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await app(scope, replay, send)

        return guarded


def _grant_middleware(outer: ResourceServer, tools: Mapping[str, str]) -> Any:
    async def middleware(ctx: Any, call_next: Any) -> Any:
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        scope = tools.get(str(params.get("name"))) if ctx.method == "tools/call" else None
        if scope is not None and scope in outer.grant_scopes:
            from mcp.shared.exceptions import MCPError

            headers = getattr(getattr(ctx, "request", None), "headers", None)  # the HTTP request's
            token = _bearer_of(headers.get("authorization")) if headers is not None else None
            try:
                if token is None:
                    raise Refused("invalid_token", "a bearer token is required")
                await outer.verify(token, scopes=[scope])  # consumes a once grant, now
            except Refused as exc:
                raise MCPError(-32001, f"{exc.error}: {exc.description}") from None
        return await call_next(ctx)

    return middleware


def _bearer(scope: dict[str, Any]) -> str | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            return _bearer_of(value.decode("latin-1"))
    return None


def _bearer_of(text: str | None) -> str | None:
    if text is not None and text[:7].lower() == "bearer ":
        return text[7:].strip()
    return None


def _needed_scopes(body: bytes, tools: Mapping[str, str]) -> list[str]:
    try:
        message = json.loads(body) if body else None
    except (ValueError, RecursionError):
        return []
    calls = message if isinstance(message, list) else [message]
    needed = []
    for call in calls:
        if isinstance(call, dict) and call.get("method") == "tools/call":
            params = call.get("params")
            name = params.get("name") if isinstance(params, dict) else None
            if isinstance(name, str) and name in tools:
                needed.append(tools[name])
    return needed


async def _refuse(send: Any, exc: Refused, challenge: str, status: int | None = None) -> None:
    body = json.dumps({"error": exc.error, "error_description": exc.description}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if challenge:
        headers.append((b"www-authenticate", challenge.encode()))
    await send({"type": "http.response.start", "status": status or exc.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


__all__ = ["Refused", "ResourceServer"]

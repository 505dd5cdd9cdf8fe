"""The token endpoint's grants (RFC 6749 §4.1.3, §6; RFC 7636; RFC 7523; RFC 8628), apart from HTTP.

``exchange(services, params, authorization)`` dispatches on ``grant_type``:

- ``authorization_code``: the code is taken (burnt) on its first presentation, whatever follows;
  then client, ``redirect_uri`` and the PKCE verifier (S256) must match what the code is bound to,
  and the person must still be active. Every redeemed code starts a refresh family (with or
  without a refresh token); presenting the code again ends that family, and with it every token
  the code issued (RFC 6749 §4.1.2; ``_code_redeemed``/``_code_replayed``).
- ``refresh_token``: the token must belong to the presenting client (peer bug 6); a request that
  names no client at all stands for the family's client when that client is public (RFC 6749
  §3.2.1, D9: the peer CLI refreshes so), while a confidential client still authenticates; its person
  must be active (else the family is revoked: bug 17); it rotates inside its family
  (``store.refresh_tokens.rotate``); presenting a rotated token again revokes the family, so the
  thief's and the victim's newest tokens both die. The family ends ``oauth.refresh_token_ttl``
  after the first sign-in, however often it rotates.
- ``client_credentials``: an agent authenticates with an RFC 7523 JWT assertion signed (EdDSA) by
  its enrolled Ed25519 key: ``iss`` = ``sub`` = its e-mail or agent_id, ``aud`` = ``{issuer}/token``,
  ``exp`` at most 5 minutes ahead, ``jti`` single use (``store.onetime`` kind ``jti``). The answer is
  the agent's identity token (the one /api/agent/authenticate gives), so D11 holds. With a
  ``resource`` (a configured one, else ``invalid_target``, D17) it is the agent's own RFC 9068 token
  for that resource, with the scopes no person's grant stands behind (grant-gated ones come
  through CIBA).
- ``urn:ietf:params:oauth:grant-type:device_code``: ``grantd.oauth.device.exchange``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import jwt
from jwt.algorithms import OKPAlgorithm

from grantd.dpop import DpopError
from grantd.logs import LOGGER
from grantd.oauth import ciba, device, resources
from grantd.oauth import exchange as exchange_rules
from grantd.oauth.authorize import CODE_KEEP_S
from grantd.oauth.errors import OAuthError, invalid_client, invalid_grant, invalid_request
from grantd.oauth.issue import issue_tokens, secret_hash, start_family, wants_refresh
from grantd.services import dpop
from grantd.services.clients import DEVICE_GRANT, Client
from grantd.services.dpop import ProofRequest
from grantd.sshkeys import KeyFormatError, load_public_key
from grantd.store import Conflict
from grantd.store.records import Agent, RefreshToken

if TYPE_CHECKING:
    from grantd.services.context import Services

log = logging.getLogger(LOGGER)

JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
# grants that never yield a resource's token (D17): a ``resource`` there is invalid_target (RFC 8707);
# the code grant, client credentials, CIBA and token exchange do
NO_RESOURCE_GRANTS = ("refresh_token", DEVICE_GRANT)
ASSERTION_ALGS = ("EdDSA", "Ed25519")  # Ed25519: RFC 9864's fully specified name (oauth4webapi sends it)


def _assertion_decoder() -> jwt.PyJWT:
    decoder = jwt.PyJWT()
    decoder._jws.register_algorithm("Ed25519", OKPAlgorithm())  # noqa: SLF001 - one decoder of our own
    return decoder


_ASSERTIONS = _assertion_decoder()
ASSERTION_MAX_AHEAD_S = 300
MAX_PARAM = 8192
_VERIFIER = re.compile(r"^[A-Za-z0-9._~-]{43,128}$")


def param(params: dict[str, str], name: str, *, required: bool = False) -> str | None:
    value = params.get(name)
    if value is None or value == "":
        if required:
            raise invalid_request(f"{name} is required")
        return None
    if not isinstance(value, str) or len(value) > MAX_PARAM:
        raise invalid_request(f"{name} must be a string")
    return value


def _basic_raw(authorization: str | None) -> tuple[str, str] | None:
    """(client_id, secret) of an ``Authorization: Basic`` header, as sent (before form-decoding)."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise invalid_client("malformed Basic credentials", basic=True) from None
    client_id, sep, secret = decoded.partition(":")
    if not sep:
        raise invalid_client("malformed Basic credentials", basic=True)
    return client_id, secret


def _form_decoded(value: str) -> str:
    return unquote(value.replace("+", " "))


def _basic(authorization: str | None) -> tuple[str, str] | None:
    """(client_id, secret) of an ``Authorization: Basic`` header (RFC 6749 §2.3.1: form-urlencoded parts)."""
    raw = _basic_raw(authorization)
    return None if raw is None else (_form_decoded(raw[0]), _form_decoded(raw[1]))


def basic_credentials(authorization: str | None) -> tuple[str, str] | None:
    """``_basic`` for the routes: None instead of an error for malformed credentials."""
    try:
        return _basic(authorization)
    except OAuthError:
        return None


async def authenticate_client(
    services: Services, params: dict[str, str], authorization: str | None
) -> Client | None:
    """The client presenting this request: confidential clients must prove their secret (Basic or
    ``client_secret`` in the body); a public client names itself with ``client_id``. None when no
    client is named at all (the caller decides whether that is allowed).

    Basic credentials count in both forms: form-decoded as RFC 6749 §2.3.1 asks, and as sent,
    because common clients (authlib's default ``client_secret_basic``, among others) do not
    form-encode them, so a secret holding ``+`` or ``%`` would otherwise never match. Accepting
    the raw form as well takes nothing from the secret: either form must equal it exactly."""
    raw = _basic_raw(authorization)
    if raw is not None:
        raw_id, raw_secret = raw
        basic_id, basic_secret = _form_decoded(raw_id), _form_decoded(raw_secret)
        named = param(params, "client_id")
        if named is not None and named not in (basic_id, raw_id):
            raise invalid_client("client_id differs from the Basic credentials", basic=True)
        client = await services.oauth_clients.get(basic_id)
        if client is None and raw_id != basic_id:
            client = await services.oauth_clients.get(raw_id)
        if client is None or client.public or (named is not None and named != client.client_id):
            raise invalid_client("client authentication failed", basic=True)
        decoded_ok = client.check_secret(basic_secret)
        raw_ok = client.check_secret(raw_secret)  # both compared, always: the time says nothing about which
        if not (decoded_ok or raw_ok):
            raise invalid_client("client authentication failed", basic=True)
        return client
    named_id = param(params, "client_id")
    secret = param(params, "client_secret")
    if named_id is None:
        if secret is not None:
            raise invalid_client("client_secret without client_id")
        return None
    client = await services.oauth_clients.get(named_id)
    if client is None:
        raise invalid_client("unknown client")
    if client.public:
        if secret is not None:
            raise invalid_client("this client is public: it has no secret")
        return client
    if not client.check_secret(secret):
        raise invalid_client("client authentication failed" if secret else "client authentication required")
    return client


async def exchange(
    services: Services, params: dict[str, str], authorization: str | None, proof: ProofRequest | None = None
) -> dict[str, Any]:
    grant_type = param(params, "grant_type", required=True)
    if grant_type in NO_RESOURCE_GRANTS and param(params, "resource") is not None:
        raise resources.invalid_target("a token for a resource does not come from this grant type")
    if grant_type == "client_credentials":
        return await client_credentials(services, params, proof)
    client = await authenticate_client(services, params, authorization)
    if client is None and grant_type == "refresh_token":
        client = await refresh_token_client(services, params)
    if client is None:
        raise invalid_request("client_id is required")
    if not client.public:  # D12: per identity, once its secret proved it (a public client is anyone)
        await services.limits.token_request(client.client_id)
    if grant_type == "authorization_code":
        return await authorization_code(services, client, params)
    if grant_type == "refresh_token":
        return await refresh(services, client, params)
    if grant_type == DEVICE_GRANT:
        if DEVICE_GRANT not in client.grant_types:
            raise OAuthError("unauthorized_client", "this client may not use the device grant")
        return await device.exchange(services, client, params)
    raise OAuthError(
        "unsupported_grant_type",
        "grant_type must be authorization_code, refresh_token, client_credentials, "
        f"{DEVICE_GRANT}, {ciba.GRANT_TYPE} or {exchange_rules.GRANT_TYPE}",
    )


async def refresh_token_client(services: Services, params: dict[str, str]) -> Client:
    """The client a refresh request names nobody for (RFC 6749 §3.2.1 makes ``client_id`` optional
    there; the peer CLI omits it, D9): the family's client, if that client is public. A
    confidential client must still authenticate. Nothing is used or rotated here."""
    presented = param(params, "refresh_token", required=True)
    assert presented is not None
    found = await services.store.refresh_tokens.get(secret_hash(presented))
    if found is None:
        raise invalid_grant("refresh token is invalid")
    client = await services.oauth_clients.get(found["client_id"])
    if client is None:
        raise invalid_grant("the client this refresh token was issued to is unknown now")
    if not client.public:
        raise invalid_client(
            "client authentication required (this refresh token belongs to a confidential client)"
        )
    return client


def s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode("ascii")).digest()).rstrip(b"=").decode()


async def authorization_code(services: Services, client: Client, params: dict[str, str]) -> dict[str, Any]:
    if "authorization_code" not in client.grant_types:
        raise OAuthError("unauthorized_client", "this client may not use the authorization code grant")
    code = param(params, "code", required=True)
    assert code is not None
    now = services.clock.now_ms()
    code_hash = secret_hash(code)
    record = await services.store.onetime.take("code", code_hash, now)  # burnt, whatever follows
    if record is None:
        await _code_replayed(services, code_hash, now)
        raise invalid_grant("authorization code is invalid or was already used")
    if record["expires_at"] <= now:
        raise invalid_grant("expired authorization code")
    if record["client_id"] != client.client_id:
        raise invalid_grant("the authorization code was issued to another client")
    redirect_uri = param(params, "redirect_uri")
    if redirect_uri != record["redirect_uri"]:
        raise invalid_grant("redirect_uri differs from the authorization request's")
    verifier = param(params, "code_verifier")
    if verifier is None:
        raise invalid_grant("code_verifier is required (PKCE)")
    if not _VERIFIER.match(verifier) or not hmac.compare_digest(s256(verifier), record["code_challenge"]):
        raise invalid_grant("code_verifier does not match the code_challenge")
    person = await services.store.people.get(record["person_id"])
    if person is None or person["status"] != "active":
        raise invalid_grant("the person is unknown or disabled")
    scope = str(record["scope"])
    auth_time = int(record["auth_time"])
    target = resources.target_of_code(record, param(params, "resource"))  # D17; invalid_target
    # Every code starts a family, refresh token or not: its access tokens name it (``sid``), so a
    # replay of the code can end them (RFC 6749 §4.1.2).
    family, refresh_secret = await start_family(
        services,
        client,
        person,
        scope=scope,
        auth_time=auth_time,
        refresh=target is None and wants_refresh(client, scope),
    )
    if target is not None:  # an RFC 9068 token for the resource alone (grantd.oauth.resources)
        answer = await resources.answer_for_code(services, client.client_id, person, record, family)
    else:
        answer = await issue_tokens(
            services,
            client,
            person,
            scope=scope,
            nonce=record["nonce"],
            auth_time=auth_time,
            family=family,
            refresh_token=refresh_secret,
        )
    if await _code_redeemed(services, code_hash, family["family_id"], int(family["expires_at"]), now):
        raise invalid_grant("the authorization code was presented twice; every token it issued is revoked")
    return answer


REDEEMED = "code-redeemed"  # store.onetime kinds: which family a redeemed code started ...
REPLAYED = "code-replayed"  # ... and that a code was presented after it was taken


async def _code_redeemed(
    services: Services, code_hash: str, family_id: str, family_end: int, now: int
) -> bool:
    """After the family exists: record which family the code started (kept as long as the family
    can live, so a replay at any time while a token it issued works still ends them), then look
    for a replay. True (and the family revoked) if the code was presented again meanwhile.

    With ``_code_replayed`` this is decided by the database across processes: the redeemer writes
    its mark and then reads the replayer's; the replayer writes its mark and then reads the
    redeemer's. Whichever order the store runs the four transactions in, at least one side sees
    the other's mark and revokes the family (which exists before the redeemer's mark does)."""
    keep = max(now + CODE_KEEP_S * 1000, family_end)
    try:
        await services.store.onetime.put(REDEEMED, code_hash, {"family_id": family_id}, keep, now)
    except Conflict:  # cannot happen (one taker per code); refuse rather than guess
        await services.store.refresh_tokens.revoke_family(family_id, now)
        return True
    if await services.store.onetime.take(REPLAYED, code_hash, now) is not None:
        await services.store.refresh_tokens.revoke_family(family_id, now)
        return True
    return False


async def _code_replayed(services: Services, code_hash: str, now: int) -> None:
    """A code presented that is not (or no longer) there: if it was redeemed, the family it
    started ends — refresh tokens and the access tokens naming it (RFC 6749 §4.1.2)."""
    try:
        await services.store.onetime.put(REPLAYED, code_hash, {}, now + CODE_KEEP_S * 1000, now)
    except Conflict:
        pass  # presented again before: the mark is there already
    redeemed = await services.store.onetime.take(REDEEMED, code_hash, now)
    if redeemed is not None and isinstance(redeemed.get("family_id"), str):
        revoked = await services.store.refresh_tokens.revoke_family(redeemed["family_id"], now)
        log.info(
            "authorization code presented again: its sign-in %s is revoked (%d live tokens)",
            redeemed["family_id"],
            revoked,
        )


async def refresh(services: Services, client: Client, params: dict[str, str]) -> dict[str, Any]:
    import secrets

    if "refresh_token" not in client.grant_types:
        raise OAuthError("unauthorized_client", "this client may not use refresh tokens")
    presented = param(params, "refresh_token", required=True)
    assert presented is not None
    token_hash = secret_hash(presented)
    now = services.clock.now_ms()
    old = await services.store.refresh_tokens.get(token_hash)
    if old is None:
        raise invalid_grant("refresh token is invalid")
    if old["client_id"] != client.client_id:
        raise invalid_grant("refresh token was issued to another client")  # and it stays unused (peer bug 6)
    person = await services.store.people.get(old["person_id"])
    if person is None or person["status"] != "active":
        await services.store.refresh_tokens.revoke_family(old["family_id"], now)
        raise invalid_grant("the person is unknown or disabled; the sign-in is revoked")
    scope = old["scope"]
    asked = param(params, "scope")
    if asked is not None:
        if not set(asked.split()) <= set(scope.split()):
            raise OAuthError("invalid_scope", "scope may only narrow what was granted")
        scope = " ".join(s for s in scope.split() if s in asked.split())
    secret = secrets.token_urlsafe(32)
    new: RefreshToken = {
        "token_hash": secret_hash(secret),
        "family_id": old["family_id"],
        "client_id": old["client_id"],
        "person_id": old["person_id"],
        "scope": old["scope"],
        "auth_time": old["auth_time"],
        "created_at": now,
        "expires_at": old["expires_at"],
        "used_at": None,
        "revoked_at": None,
    }
    outcome, _ = await services.store.refresh_tokens.rotate(token_hash, new, now)
    if outcome == "reused":
        raise invalid_grant("refresh token was already used; every token of its sign-in is revoked")
    if outcome == "revoked":
        raise invalid_grant("refresh token was revoked")
    if outcome == "expired":
        raise invalid_grant("refresh token expired; sign in again")
    if outcome != "rotated":
        raise invalid_grant("refresh token is invalid")
    return await issue_tokens(
        services,
        client,
        person,
        scope=scope,
        nonce=None,
        auth_time=int(old["auth_time"]),
        family=new,
        refresh_token=secret,
    )


async def agent_binding(services: Services, proof: ProofRequest | None, agent: Agent) -> str | None:
    """The ``cnf.jkt`` an agent's token gets at /token (D16), or None for a bearer; a bad proof (or
    none where ``agent_dpop = "required"``) is 400 ``invalid_dpop_proof`` / ``use_dpop_nonce``."""
    try:
        return await dpop.bind_for_agent(services, proof, agent["public_key"])
    except DpopError as exc:
        headers = {}
        nonce = await dpop.current_nonce(services)
        if nonce is not None:
            headers["DPoP-Nonce"] = nonce
        raise OAuthError(exc.error, exc.reason, 400, headers) from None


async def client_credentials(
    services: Services, params: dict[str, str], proof: ProofRequest | None = None
) -> dict[str, Any]:
    """An agent's identity token for an RFC 7523 client assertion (module docstring); DPoP-bound
    to the agent's key when the request carries a proof made with it (D16)."""
    agent, jkt = await agent_client(services, params, (f"{services.issuer}/token",), proof)
    named = param(params, "resource")
    if named is not None:  # D17: a configured resource's token (invalid_target for any other)
        return await _agent_resource_token(
            services, agent, resources.find(services.config, named), params, jkt
        )
    token, ttl = await services.tokens.mint_identity(agent, jkt=jkt)
    return {
        "access_token": token,
        "token_type": "DPoP" if jkt else "Bearer",
        "expires_in": ttl,
        "agent_id": agent["agent_id"],
    }


async def _agent_resource_token(
    services: Services, agent: Agent, resource: resources.Resource, params: dict[str, str], jkt: str | None
) -> dict[str, Any]:
    """An agent's own RFC 9068 token for a resource (client credentials with ``resource``): ``sub``
    = its e-mail, ``act: "agent"``, ``agent_id``, the scopes without a grant behind them (a
    grant-gated scope comes through CIBA, D16/D17); DPoP-bound when the request was."""
    scope = resources.scope_without_grant(resource, param(params, "scope"), "an agent's own token")
    ttl = int(services.config.oauth.access_token_ttl)
    claims: dict[str, Any] = {
        "client_id": agent["agent_id"],
        "scope": scope,
        "auth_time": services.clock.now_s(),
    }
    if jkt is not None:
        claims["cnf"] = {"jkt": jkt}
    token = await services.tokens.mint_agent_resource_access(
        agent, resource=resource.resource, claims=claims, ttl=ttl
    )
    return {
        "access_token": token,
        "token_type": "DPoP" if jkt else "Bearer",
        "expires_in": ttl,
        "scope": scope,
    }


async def agent_client(
    services: Services,
    params: dict[str, str],
    audiences: tuple[str, ...],
    proof: ProofRequest | None = None,
    *,
    bind: bool = True,
) -> tuple[Agent, str | None]:
    """An agent authenticated as an OAuth client by ``private_key_jwt`` (RFC 7523 §2.2): a JWT
    signed (EdDSA) by its enrolled key, ``iss`` = ``sub`` = its e-mail or agent_id, ``aud`` one of
    ``audiences``, ``exp`` at most 5 minutes ahead, ``jti`` single use (``store.onetime`` kind
    ``jti``). With ``bind``: the ``cnf.jkt`` of its DPoP proof too (``agent_binding``), checked
    before the assertion's jti is burnt (a nonce retry may reuse the assertion)."""
    if param(params, "client_assertion_type") != JWT_BEARER:
        raise invalid_client(f"the agent authenticates with client_assertion_type={JWT_BEARER}")
    assertion = param(params, "client_assertion")
    if assertion is None:
        raise invalid_client("client_assertion is required")
    try:
        header = jwt.get_unverified_header(assertion)
        unverified = jwt.decode(assertion, options={"verify_signature": False})
    except jwt.PyJWTError:
        raise invalid_client("client_assertion is not a JWT") from None
    if header.get("alg") not in ASSERTION_ALGS:
        raise invalid_client("client_assertion must be signed with EdDSA (the agent's Ed25519 key)")
    iss, sub = unverified.get("iss"), unverified.get("sub")
    if not isinstance(iss, str) or iss != sub or not iss or len(iss) > 254:
        raise invalid_client("client_assertion needs iss = sub = the agent's e-mail or agent_id")
    agent = await services.store.agents.get(iss)
    if agent is None:
        raise invalid_client("unknown agent")
    named = param(params, "client_id")
    if named is not None and named not in (agent["agent_id"], agent["email"]):
        raise invalid_client("client_id differs from the assertion's issuer")
    try:
        key = load_public_key(agent["public_key"])
    except KeyFormatError:
        raise invalid_client("the agent has no usable key") from None
    try:
        claims = _ASSERTIONS.decode(
            assertion,
            key,
            algorithms=list(ASSERTION_ALGS),
            options={
                "require": ["iss", "sub", "aud", "exp", "jti"],
                "verify_aud": False,
                "verify_exp": False,
                "verify_iat": False,
                "verify_nbf": False,
            },
        )
    except jwt.PyJWTError:
        raise invalid_client("client_assertion does not verify with the agent's key") from None
    aud = claims.get("aud")
    named_audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    if not any(isinstance(a, str) and a in audiences for a in named_audiences):
        raise invalid_client(f"client_assertion aud must be {' or '.join(audiences)}")
    now_s = services.clock.now_s()
    exp, jti = claims.get("exp"), claims.get("jti")
    if not isinstance(exp, int) or isinstance(exp, bool) or exp <= now_s:
        raise invalid_client("client_assertion expired")
    if exp > now_s + ASSERTION_MAX_AHEAD_S:
        raise invalid_client(f"client_assertion exp may be at most {ASSERTION_MAX_AHEAD_S} s ahead")
    nbf = claims.get("nbf")
    if isinstance(nbf, int) and nbf > now_s + 60:
        raise invalid_client("client_assertion is not valid yet")
    if not isinstance(jti, str) or not jti or len(jti) > 256:
        raise invalid_client("client_assertion needs a jti")
    if agent["status"] != "active":
        raise invalid_client("agent is disabled")
    jkt = await agent_binding(services, proof, agent) if bind else None
    now = services.clock.now_ms()
    try:
        await services.store.onetime.put(
            "jti",
            secret_hash(f"{agent['agent_id']}\n{jti}"),
            {"agent_id": agent["agent_id"]},
            exp * 1000 + 60_000,
            now,
        )
    except Conflict:
        raise invalid_client("client_assertion was already used (jti replay)") from None
    await services.limits.token_request(str(agent["agent_id"]))  # D12: per identity, once authenticated
    return agent, jkt


__all__ = ["agent_client", "authenticate_client", "exchange"]

"""The token answer of /token (RFC 6749 §5.1, OIDC Core §3.1.3.3), for every grant that ends with a
person's tokens: authorization_code, refresh_token and the device grant (``grantd.oauth.device``)."""

from __future__ import annotations

import hashlib
import secrets
from typing import TYPE_CHECKING, Any

from grantd.services.clients import APES_CLI, GRANTD_CLI, Client
from grantd.store.records import Person, RefreshToken

if TYPE_CHECKING:
    from grantd.services.context import Services

REFRESH_FOR_CLIENTS = frozenset(
    {APES_CLI, GRANTD_CLI}
)  # the CLIs always get one (peer CLI refreshes silently)


def secret_hash(secret: str) -> str:
    """How codes, refresh tokens, device codes and states are stored: SHA-256 hex of the secret."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def new_family_id() -> str:
    return "rtf_" + secrets.token_urlsafe(16)


def wants_refresh(client: Client, scope: str) -> bool:
    return "offline_access" in scope.split() or client.client_id in REFRESH_FOR_CLIENTS


async def start_family(
    services: Services, client: Client, person: Person, *, scope: str, auth_time: int, refresh: bool
) -> tuple[RefreshToken, str | None]:
    """A new refresh family (one sign-in) and the secret of its first token, or None for it when
    ``refresh`` is False: then the family only names the sign-in its access tokens speak for
    (``sid``), so ending it ends them (a replayed code, RFC 6749 §4.1.2; a withdrawn consent). Its
    secret is never handed out, and it ends with the access token (``oauth.access_token_ttl``).
    A family with a refresh token ends ``oauth.refresh_token_ttl`` from now."""
    oauth = services.config.oauth
    now = services.clock.now_ms()
    secret = secrets.token_urlsafe(32)
    lifetime = int(oauth.refresh_token_ttl) if refresh else int(oauth.access_token_ttl)
    family = await services.store.refresh_tokens.create(
        {
            "token_hash": secret_hash(secret),
            "family_id": new_family_id(),
            "client_id": client.client_id,
            "person_id": person["person_id"],
            "scope": scope,
            "auth_time": auth_time,
            "created_at": now,
            "expires_at": now + lifetime * 1000,
            "used_at": None,
            "revoked_at": None,
        }
    )
    return family, (secret if refresh else None)


async def issue_tokens(
    services: Services,
    client: Client,
    person: Person,
    *,
    scope: str,
    nonce: str | None,
    auth_time: int,
    family: RefreshToken | None = None,
    refresh_token: str | None = None,
) -> dict[str, Any]:
    """``{access_token, token_type, expires_in, scope, id_token + assertion (scope openid),
    refresh_token (scope offline_access, or a CLI client)}``.

    ``family``/``refresh_token``: the refresh grant passes the record it just stored by rotation
    and its secret, the code grant the family it started (``start_family``; ``refresh_token`` None
    when none is due); otherwise a new family is started here when a refresh token is due (its absolute
    end is ``oauth.refresh_token_ttl`` from now)."""
    oauth = services.config.oauth
    if family is None and wants_refresh(client, scope):
        family, refresh_token = await start_family(
            services, client, person, scope=scope, auth_time=auth_time, refresh=True
        )
    ttl = int(oauth.access_token_ttl)
    answer: dict[str, Any] = {
        "access_token": await services.tokens.mint_access(
            person,
            client_id=client.client_id,
            api_access=client.api_access,
            scope=scope,
            sid=family["family_id"] if family is not None else "",
            ttl=ttl,
        ),
        "token_type": "Bearer",
        "expires_in": ttl,
        "scope": scope,
    }
    if "openid" in scope.split():
        id_token = await services.tokens.mint_id_token(
            person,
            client_id=client.client_id,
            scope=scope,
            nonce=nonce,
            auth_time=auth_time,
            alg=client.id_token_alg,
        )
        answer["id_token"] = id_token
        answer["assertion"] = id_token  # the peer SP reads `assertion`
    if family is not None and refresh_token is not None:
        answer["refresh_token"] = refresh_token
    return answer


__all__ = ["issue_tokens", "secret_hash", "start_family", "wants_refresh"]

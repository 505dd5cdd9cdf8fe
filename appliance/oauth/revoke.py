"""Token revocation (RFC 7009), apart from HTTP.

- A refresh token: its whole family is revoked (every rotation of that sign-in), and with it every
  access token minted from the family: access tokens name their family in ``sid`` and every
  verifier of them (the API's ``AccessToken`` authenticator, /userinfo) checks the family is live.
- An access token (a JWT of ours): its family is revoked the same way. Every code exchange starts
  a family, also when no refresh token is handed out (``grantd.oauth.issue.start_family``), so
  its access tokens can be revoked too; only tokens minted before that (``sid`` = "") cannot be
  revoked on their own: they live until their ``exp`` (``oauth.access_token_ttl``, 15 minutes by
  default); withdrawing the consent or disabling the person ends their use at once anyway.
- Anything else, an unknown token, or a token of another client: nothing happens, and the answer
  is still 200 (RFC 7009 §2.2: the client learns nothing about tokens that are not its own).

Confidential clients must authenticate (Basic or ``client_secret``); public clients name
themselves with ``client_id`` (optional: a refresh token is bound to its client, so it is only
revoked when the presenter is that client or names none — the token itself is the proof).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grantd.oauth.errors import OAuthError, invalid_request
from grantd.oauth.issue import secret_hash
from grantd.oauth.token import authenticate_client, param
from grantd.services.tokens import TokenError

if TYPE_CHECKING:
    from grantd.services.context import Services

HINTS = frozenset({"refresh_token", "access_token"})


async def revoke(services: Services, params: dict[str, str], authorization: str | None) -> None:
    client = await authenticate_client(services, params, authorization)
    token = param(params, "token")
    if token is None:
        raise invalid_request("token is required")
    hint = param(params, "token_type_hint")
    if hint is not None and hint not in HINTS:
        raise OAuthError("unsupported_token_type", "token_type_hint must be refresh_token or access_token")
    now = services.clock.now_ms()
    if token.count(".") == 2:
        try:
            claims = await services.tokens.verify_access(token)
        except TokenError:
            return
        if claims["sid"] and (client is None or client.client_id == claims.get("client_id")):
            await services.store.refresh_tokens.revoke_family(claims["sid"], now)
        return
    record = await services.store.refresh_tokens.get(secret_hash(token))
    if record is None:
        return
    if client is not None and client.client_id != record["client_id"]:
        return  # another client's token: not ours to end (RFC 7009 §2.1), and the answer says nothing
    await services.store.refresh_tokens.revoke_family(record["family_id"], now)


__all__ = ["revoke"]

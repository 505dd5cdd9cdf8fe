"""The storage contract of OAuth 2.0 / OIDC, SP login and federation (issue "OAuth"): one-time
records (authorization codes, login flow states, used assertion ids), refresh-token families,
device codes (RFC 8628) and remembered consent. Same guarantees as every part (``grantd.store``):
one call is one transaction; conditional changes have exactly one winner across processes and
nodes; uniqueness violations raise ``Conflict`` naming the field. Secrets (codes, refresh tokens,
device codes, flow states) are stored only as SHA-256 hex digests: callers hash before calling.
"""

from __future__ import annotations

import builtins
from typing import Any, Protocol, runtime_checkable

from grantd.store.records import Consent, DeviceCode, RefreshToken


def union_scope(stored: str, new: str) -> str:
    """Remembered consent grows: the stored scopes, then the new ones not among them (order kept,
    duplicates dropped: the same string in every backend)."""
    scopes = stored.split()
    scopes += [s for s in dict.fromkeys(new.split()) if s not in scopes]
    return " ".join(scopes)


def was_live(tokens: builtins.list[Any], now: int) -> int:
    """How many of the refresh tokens a revocation ended were live before it (not yet rotated, not
    expired at ``now``): the count ``revoke_family`` and ``revoke_person`` return. The tokens are
    those that were not revoked yet."""
    return sum(1 for t in tokens if t["used_at"] is None and t["expires_at"] > now)


@runtime_checkable
class OneTimeStore(Protocol):
    """Records redeemed at most once, by kind: ``code`` (authorization codes, key = SHA-256 of the
    code), ``sp`` and ``federation`` (login flow state, key = SHA-256 of ``state``), ``jti``
    (client-assertion ids already used: ``put`` alone is the replay check)."""

    async def put(self, kind: str, key: str, data: dict[str, Any], expires_at: int, now: int) -> None:
        """Store ``data`` (JSON-ready) under (kind, key) until ``expires_at`` (ms). ``Conflict("key")``
        if an unexpired record with that kind and key exists (an expired one is replaced). May drop
        records that expired before ``now``."""

    async def take(self, kind: str, key: str, now: int) -> dict[str, Any] | None:
        """Delete and return the record's data if it exists and ``expires_at > now``; None otherwise
        (an expired record is deleted too). Exactly one concurrent taker gets it."""


@runtime_checkable
class RefreshTokenStore(Protocol):
    """Refresh tokens in families (D9): each redemption rotates the token inside its family; a
    token that was already rotated (``used_at`` set) and is presented again revokes the family.
    A family is revoked when its tokens carry ``revoked_at`` (every revocation sets it on all of
    them). ``people.delete`` deletes the person's tokens (and consents) in its transaction."""

    async def create(self, token: RefreshToken) -> RefreshToken:
        """Insert (a new family's first token, from a code or device exchange). ``Conflict("token_hash")``.
        May drop the tokens of families that expired before ``created_at`` (``rotate`` then answers
        ``unknown`` for them instead of ``expired``)."""

    async def rotate(self, token_hash: str, new: RefreshToken, now: int) -> tuple[str, RefreshToken | None]:
        """Redeem ``token_hash`` and, in the same transaction, insert ``new`` (same ``family_id``,
        ``client_id``, ``person_id`` and family ``expires_at`` as the old one; the store does not
        check the caller's copying). Returns (outcome, the old record as it was):

        - ``("rotated", old)``: the token was live (unused, family unrevoked, ``expires_at > now``);
          it is now used (``used_at = now``) and ``new`` is stored. Exactly one concurrent redeemer
          of one token gets this; the others get ``reused``.
        - ``("reused", old)``: the token was already used: the whole family is revoked now
          (``revoked_at = now`` on every token of it); ``new`` is not stored.
        - ``("revoked", old)`` / ``("expired", old)``: the family was revoked / has expired; nothing changes.
        - ``("unknown", None)``: no such token.

        Checked in this order: unknown; live (rotated); the family expired (expired, whether or not
        the token was used); the token was used (reused, also when the family is revoked already,
        e.g. by an earlier replay: every concurrent loser of one token gets ``reused``); else
        revoked. ``Conflict("token_hash")`` if ``new`` collides, and then nothing changes.
        """

    async def get(self, token_hash: str) -> RefreshToken | None: ...

    async def family_live(self, family_id: str, now: int) -> bool:
        """True if the family exists, is not revoked and has not expired (the access tokens minted
        from it name it in ``sid``, so revoking a family ends them too)."""

    async def revoke_family(self, family_id: str, now: int) -> int:
        """Revoke every token of the family; return how many were live."""

    async def revoke_person(self, person_id: str, now: int, client_id: str | None = None) -> int:
        """Revoke every family of the person (only those of ``client_id`` if given); return how many
        tokens were live."""

    async def list_families(self, person_id: str, now: int) -> builtins.list[RefreshToken]:
        """The person's live families, one record each (its newest token, the only unused one),
        newest first by that token's ``created_at`` (the family's last use)."""


@runtime_checkable
class DeviceCodeStore(Protocol):
    """Device authorization requests (RFC 8628). ``client_address`` is stored and returned as it
    was given (the /device page shows where the request came from)."""

    async def create(self, device: DeviceCode) -> DeviceCode:
        """Insert. ``Conflict("user_code")`` if a live request has the user code (the caller draws
        another), ``Conflict("device_code_hash")`` likewise. May drop requests expired before
        ``created_at``."""

    async def get_by_user_code(self, user_code: str, now: int) -> DeviceCode | None:
        """The unexpired request with this user code (any status), or None."""

    async def decide(self, user_code: str, person_id: str, approved: bool, now: int) -> DeviceCode | None:
        """Approve (``status = approved``, ``person_id``, ``decided_at``) or deny (``status = denied``;
        ``person_id`` and ``decided_at`` record who denied, when) a pending, unexpired request; the record after the change, or None if it is not pending or has expired. Exactly
        one concurrent decider wins."""

    async def poll(self, device_code_hash: str, now: int) -> DeviceCode | None:
        """The request as it was before this poll, and record the poll (``last_polled_at = now``).
        None if unknown. Expired requests are returned as they are (the caller answers expired_token)."""

    async def take(self, device_code_hash: str, now: int) -> DeviceCode | None:
        """Delete and return an approved, unexpired request (the token exchange). Exactly one
        concurrent taker gets it; None otherwise (nothing changes)."""

    async def slow_down(self, device_code_hash: str, interval: int, now: int) -> None:
        """The client polled too fast (RFC 8628 ``slow_down``): raise the request's ``interval`` to
        ``interval`` seconds; never lowers it (concurrent callers: the largest stays). Nothing if
        the request is unknown."""


@runtime_checkable
class ConsentStore(Protocol):
    """What a person allowed a client (remembered consent, D9), withdrawable on /account."""

    async def remember(self, consent: Consent) -> Consent:
        """Insert or replace the consent of (person_id, client_id): the scopes are the union of the
        stored and the new ones (the stored ones in their order, then the new ones not among them,
        each once); ``created_at`` is kept, ``updated_at`` set. Returns the consent as stored."""

    async def get(self, person_id: str, client_id: str) -> Consent | None: ...

    async def list_for(self, person_id: str) -> builtins.list[Consent]:
        """Newest ``updated_at`` first."""

    async def withdraw(self, person_id: str, client_id: str, now: int) -> bool:
        """Delete the consent and, in the same transaction, revoke the person's refresh families of
        that client. True if a consent existed."""


__all__ = ["ConsentStore", "DeviceCodeStore", "OneTimeStore", "RefreshTokenStore"]

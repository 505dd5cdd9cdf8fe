"""Review links ``{issuer}/r/<token>`` (D15): how a notice points its one recipient at a grant.

A token is 32 random bytes (base64url); only its SHA-256 is stored (``store.notify.add_link``),
bound to the grant, the person and an expiry: ``[notify] link_ttl`` from when the notice is sent,
never past the end of the grant's pending time. Opening a link (``GET /r/<token>``) changes
nothing: mail scanners and chat unfurlers open links. What a link lets its person do, and only
with their passkey, is grantd.services.review_decisions.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from grantd.core.errors import Problem, forbidden, not_found
from grantd.core.principals import Principal
from grantd.notify.signature import WINDOW_S as SIGNATURE_WINDOW_S
from grantd.services.context import Services
from grantd.store import Conflict
from grantd.store.notify import OutboxRow, ReviewLink

TOKEN_BYTES = 32
MAX_TOKEN = 100
PENDING_KINDS = ("review_requested", "escalated")


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _pending_end(services: Services, grant: Any, review: Any) -> int:
    ttl = services.config.grants.pending_ttl
    if review is not None and getattr(review, "pending_ttl", None):
        ttl = min(ttl, int(review.pending_ttl))
    return int(grant["created_at"]) + ttl * 1000


async def create(services: Services, grant: Any, email: str, person_id: str | None, action: str) -> str:
    """A new link of ``action`` (``review`` or ``deny``) to ``grant`` for one person; the token."""
    from grantd.services import review as reviews

    now = services.clock.now_ms()
    review = reviews.pinned(await services.store.grants.review_of(grant["id"]))
    token = secrets.token_urlsafe(TOKEN_BYTES)
    link: ReviewLink = {
        "token_hash": token_hash(token),
        "grant_id": grant["id"],
        "person_id": person_id,
        "email": email.lower(),
        "action": action,
        "expires_at": min(
            now + services.config.notify.link_ttl * 1000, _pending_end(services, grant, review)
        ),
        "used_at": None,
        "created_at": now,
    }
    await services.store.notify.add_link(link, now)
    return token


async def for_notice(services: Services, row: OutboxRow, grant: Any, channel: Any) -> tuple[str, str | None]:
    """(the review link, the deny link or None) of one notice: a pending notice gets a fresh
    single-person link (and, on a channel with ``deny_from_chat``, a deny link); a ``resolved``
    one points at the grant's page (nothing is left to decide)."""
    issuer = services.issuer
    if row["kind"] not in PENDING_KINDS:
        return f"{issuer}/grant-approval?grant_id={grant['id']}", None
    token = await create(services, grant, row["recipient"], row["person_id"], "review")
    deny = None
    if channel.options.get("deny_from_chat"):
        # A deny link sent through a channel with a shared secret (a webhook) names it: its POST
        # must then be signed with that secret (grantd.services.review_decisions.deny_from_chat).
        action = f"deny@{channel.id}" if getattr(channel, "secret", None) else "deny"
        deny = f"{issuer}/r/{await create(services, grant, row['recipient'], row['person_id'], action)}/deny"
    return f"{issuer}/r/{token}", deny


async def resolve(services: Services, token: str, *, action: str | None = None) -> ReviewLink:
    """The link of ``token``: 404 when there is none (forged, or long gone), 410 when it expired,
    (``action``) 404 when it is a link of another kind. Changes nothing."""
    if not token or len(token) > MAX_TOKEN or not token.isascii() or not token.isprintable():
        raise not_found("no such review link")
    link = await services.store.notify.link(token_hash(token))
    if link is None or (action is not None and link["action"].partition("@")[0] != action):
        raise not_found("no such review link")
    if link["expires_at"] <= services.clock.now_ms():
        raise Problem(410, "this review link has expired", title="Link expired")
    return link


async def spend_signature(services: Services, signature: str) -> bool:
    """Mark a chat signature (``X-Grantd-Signature`` in its canonical form, ``notify.signature.sign``'s)
    used: False if it was already, on any node. What grantd signs and sends is spent before it is
    sent, so a notice posted back unchanged is a replay, never a deny; a callback is spent as it
    is accepted, so it denies once."""
    now = services.clock.now_ms()
    try:
        await services.store.onetime.put(
            "chat_signature", token_hash(signature), {}, now + 2 * SIGNATURE_WINDOW_S * 1000, now
        )
    except Conflict:
        return False
    return True


def check_person(link: ReviewLink, principal: Principal) -> None:
    """403 unless the signed-in person is the one the link was sent to: by their id when the link
    names one (D11: a person created later with the same e-mail inherits nothing), else (sent to an
    address no person had yet) by the e-mail."""
    if link["person_id"] is not None:
        same = principal.id == link["person_id"]
    else:
        same = principal.email.lower() == link["email"]
    if not same:
        raise forbidden(f"this link was sent to {link['email']}")


__all__ = ["check_person", "create", "for_notice", "resolve", "spend_signature", "token_hash"]

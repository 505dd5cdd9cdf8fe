"""Deciding a grant from a review link (D15): ``POST /r/<token>/options`` → WebAuthn request
options, ``POST /r/<token> {decision, credential, reason?}`` → the vote; ``POST /r/<token>/deny``
→ a deny from chat.

- The link is the intended person's only: anyone else signed in gets 403 ("this link was sent to
  ..."), an expired link 410, a forged one 404 (grantd.services.review_links).
- Approving (or denying) from the page needs a fresh user-verified passkey assertion over
  ``SHA-256(grant digest || nonce)`` (grantd.core.review_digest), the nonce single-use and made
  by the server for this person, link and grant; anything less is 403 ``fresh passkey required``.
  The assertion is the vote's evidence (D14). The vote itself is grantd.services.grants.vote: the
  policy's rules (D13) apply exactly as for every other vote.
- A deny link (``deny_from_chat``) denies with a POST and nothing else, once; it never approves.
"""

from __future__ import annotations

import base64
import json
import secrets
from typing import Any

from grantd.core import policy
from grantd.core.errors import Problem, bad_request, forbidden
from grantd.core.principals import Principal, for_person
from grantd.core.review_digest import digest_fields, grant_digest, review_challenge
from grantd.services import grants, review_links
from grantd.services.context import Services
from grantd.store import Conflict

NONCE_KIND = "review_nonce"
NONCE_TTL_MS = 300_000  # as long as a passkey challenge (D8)
FRESH_PASSKEY = "fresh passkey required"
MAX_CHALLENGE = 128


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64url(value: str) -> bytes:
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))


async def _pending_grant(services: Services, grant_id: str) -> Any:
    grant = await services.store.grants.get(grant_id)
    if grant is None:
        raise Problem(404, "no such review link")
    status = grants.Reader(services).status(grant)
    if status != "pending":
        raise Problem(409, "this grant has already been decided", extra={"grant_status": status})
    return grant


async def options(services: Services, principal: Principal | None, token: str) -> dict[str, Any]:
    """WebAuthn request options for deciding the link's grant (module docstring)."""
    from webauthn import generate_authentication_options
    from webauthn.helpers.structs import UserVerificationRequirement

    from grantd.services import passkeys

    me = policy.may_follow_review_link(principal)
    link = await review_links.resolve(services, token, action="review")
    review_links.check_person(link, me)
    grant = await _pending_grant(services, link["grant_id"])
    credentials = [
        c for c in await services.store.credentials.list_for(me.id) if c["rp_id"] == passkeys.rp_id(services)
    ]
    if not credentials:
        raise Problem(409, "you have no passkey here to confirm with: add one on /account")
    digest = grant_digest(grant)
    nonce = secrets.token_bytes(32)
    challenge = review_challenge(digest, nonce)
    now = services.clock.now_ms()
    data = {"nonce": _b64url(nonce), "grant_id": grant["id"], "person_id": me.id, "link": link["token_hash"]}
    try:
        await services.store.onetime.put(NONCE_KIND, _b64url(challenge), data, now + NONCE_TTL_MS, now)
    except Conflict:  # 32 random bytes collided: never in practice
        raise Problem(503, "try again") from None
    made = generate_authentication_options(
        rp_id=passkeys.rp_id(services),
        challenge=challenge,
        timeout=NONCE_TTL_MS,
        allow_credentials=passkeys._descriptors(credentials),
        user_verification=UserVerificationRequirement.REQUIRED,
    )
    answer = passkeys._options(made)
    answer["grantDigest"] = digest.decode()
    answer["nonce"] = data["nonce"]
    return answer


def _client_challenge(credential: dict[str, Any]) -> str:
    response = credential.get("response")
    if not isinstance(response, dict) or not isinstance(response.get("clientDataJSON"), str):
        raise forbidden(FRESH_PASSKEY)
    try:
        client = json.loads(_unb64url(response["clientDataJSON"]))
    except (ValueError, UnicodeDecodeError):
        raise forbidden(FRESH_PASSKEY) from None
    challenge = client.get("challenge") if isinstance(client, dict) else None
    if not isinstance(challenge, str) or not 0 < len(challenge) <= MAX_CHALLENGE or not challenge.isascii():
        raise forbidden(FRESH_PASSKEY)
    return challenge


async def decide(
    services: Services, principal: Principal | None, token: str, body: dict[str, Any]
) -> dict[str, Any]:
    """The vote of the link's person, with their fresh passkey assertion as evidence."""
    from grantd.services import passkeys

    me = policy.may_follow_review_link(principal)
    link = await review_links.resolve(services, token, action="review")
    review_links.check_person(link, me)
    decision = body.get("decision")
    if decision not in ("approve", "deny"):
        raise bad_request("decision must be approve or deny", field="decision")
    credential = body.get("credential")
    if not isinstance(credential, dict):
        raise forbidden(FRESH_PASSKEY)
    challenge = _client_challenge(credential)
    now = services.clock.now_ms()
    kept = await services.store.onetime.take(NONCE_KIND, challenge, now)  # single use, whatever follows
    if kept is None or kept.get("person_id") != me.id or kept.get("grant_id") != link["grant_id"]:
        raise forbidden(FRESH_PASSKEY)
    if kept.get("link") != link["token_hash"]:
        raise forbidden(FRESH_PASSKEY)
    grant = await _pending_grant(services, link["grant_id"])
    digest = grant_digest(grant)  # the grant as it is now: the assertion must be over exactly this
    expected = review_challenge(digest, _unb64url(str(kept["nonce"])))
    if _b64url(expected) != challenge:
        raise forbidden(FRESH_PASSKEY)
    try:
        credential_id = passkeys._credential_id(credential)
    except Problem:
        raise forbidden(FRESH_PASSKEY) from None
    stored = next(
        (
            c
            for c in await services.store.credentials.list_for(me.id)
            if c["credential_id"] == credential_id and c["rp_id"] == passkeys.rp_id(services)
        ),
        None,
    )
    if stored is None:
        raise forbidden(FRESH_PASSKEY)
    record: Any = {"challenge": _b64url(expected)}
    try:
        await passkeys._verified_assertion(services, credential, record, stored, user_verified=True)
    except Problem as problem:
        if problem.status in (400, 401):
            raise forbidden(FRESH_PASSKEY) from None
        raise
    response = credential["response"]
    evidence = {
        "webauthn": {
            "credential_id": credential_id,
            "authenticator_data": response.get("authenticatorData"),
            "client_data_json": response.get("clientDataJSON"),
            "signature": response.get("signature"),
            "grant_digest": digest.decode(),
            "nonce": kept["nonce"],
        }
    }
    # The assertion signed this decision: the grant type and duration of the digest. A body that asks
    # for others would make the vote wider (or other) than its evidence says: 400, nothing recorded.
    signed = digest_fields(grant)
    for name in ("grant_type", "duration"):
        if body.get(name) is not None and body[name] != signed[name]:
            raise bad_request(
                f"a review link decides the request as the passkey signed it: {name} cannot be changed here",
                field=name,
            )
    vote_body: dict[str, Any] = {"reason": body["reason"]} if "reason" in body else {}
    return await grants.vote(
        services, me, link["grant_id"], vote_body, decision=decision, via="web", evidence=evidence
    )


async def _check_signed(services: Services, channel_id: str, signature: str | None, body: bytes) -> None:
    """A deny link sent through a channel with a shared secret (a webhook: its chat relay posts the
    button press back) must come signed with it: ``X-Grantd-Signature`` over the exact body, the
    timestamp within 300 s, each signature once (kept in the store: refused on every node). 401
    otherwise, with the reason (never the expected value)."""
    from grantd.core.errors import unauthorized
    from grantd.notify.signature import SignatureError, sign, verify

    channel = services.notify_channels.get(channel_id)
    secret = getattr(channel, "secret", None)
    if not secret:
        raise forbidden("the channel this link was sent through is no longer configured")
    now_s = services.clock.now_ms() // 1000
    try:
        at = verify(secret, signature, body, now=now_s)
    except SignatureError as refused:
        raise unauthorized(refused.reason) from None
    # spent in its canonical form, whatever the header's spelling (case, order, extra v1 values),
    # the same form grantd spends for what it sends (notify_delivery: a notice posted back is a replay)
    if not await review_links.spend_signature(services, sign(secret, body, at)):
        raise unauthorized("signature already used (a replay)")


async def deny_from_chat(
    services: Services, token: str, signature: str | None = None, body: bytes = b""
) -> dict[str, Any]:
    """A deny link's POST: the link's person denies, once. No session is needed (chat systems post
    it); the token is single-use and can only deny (the fail-safe direction). A link sent through a
    webhook channel needs the channel's signature on the POST (``_check_signed``)."""
    link = await review_links.resolve(services, token, action="deny")
    _, _, channel_id = link["action"].partition("@")
    if channel_id:
        await _check_signed(services, channel_id, signature, body)
    used = await services.store.notify.use_link(review_links.token_hash(token), services.clock.now_ms())
    if used is None:
        raise Problem(410, "this deny link has been used")
    person = await services.store.people.get(link["email"])
    if (
        person is None
        or person["status"] != "active"
        or (link["person_id"] and person["person_id"] != link["person_id"])
    ):
        raise forbidden("the person this link was sent to cannot decide here any more")
    me = for_person(person, services.admin_emails)
    answer = await grants.vote(
        services,
        me,
        link["grant_id"],
        {"reason": "denied from a chat or phone notification"},
        decision="deny",
        via="web",
    )
    return {"grant": {"id": answer["grant"]["id"], "status": answer["grant"]["status"]}}


__all__ = ["FRESH_PASSKEY", "decide", "deny_from_chat", "options"]

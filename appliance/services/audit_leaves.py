"""The decision log's leaves of grantd's events (D14, issue 23): one rule, here, for what each grant
event and audit event becomes. The sequencer (``grantd.services.audit``) calls ``row_leaves`` for
each stored grant event and ``audit_event_leaf`` for each audit event; the leaf encodings themselves
are ``grantd.core.tlog.leaves``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from grantd.core.tlog import leaves as L
from grantd.store.records import GrantEvent, GrantEventRow
from grantd.store.rows import grant_event
from grantd.store.tlog import AuditEvent

log = logging.getLogger("grantd.audit")


def _person(email: str | None, management_identity: str) -> dict[str, str]:
    if not email:
        return {"kind": "system"}
    if email.startswith("policy:"):
        return {"kind": "system", "name": email}
    if email.lower() == management_identity.lower():
        return {"kind": "management", "email": email}
    return {"kind": "person", "email": email}


def _requester(
    grant: Mapping[str, Any], management_identity: str, text: Callable[[Any], str]
) -> dict[str, str]:
    requester_id = text(grant.get("requester_id") or "")
    if requester_id.startswith("agt_"):
        return {"kind": "agent", "agent_id": requester_id, "email": text(grant["requester"])}
    return _person(text(grant.get("requester") or ""), management_identity)


def _safe(value: Any) -> Any:
    """JSON values a leaf can carry: floats (none are expected) become strings, so one odd request
    field can never stop the log."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): _safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_safe(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > L.MAX_SAFE:
        return str(value)
    return value


def _as_is(value: Any) -> Any:
    return value


def _text_as_is(value: Any) -> str:
    if type(value) is not str:
        raise L.LeafError(f"{type(value).__name__} where a snapshot holds a string")
    return value


def _number_as_is(value: Any) -> int:
    if type(value) is not int:
        raise L.LeafError(f"{type(value).__name__} where a snapshot holds an integer")
    return value


def _stamp_as_is(value: Any) -> Any:
    return value if value is None else _number_as_is(value)


@dataclass(frozen=True)
class _Reading:
    """How a grant event's snapshot values go into its leaves. As they are (``_AS_IS``, tried first):
    the request and the review unchanged (the leaf's own check walks them for floats), a string or
    an integer field refused unless it is one. Made safe (``_SAFE``, when that refused the event):
    the request and the review ``_safe``, the fields converted by ``str`` and ``int``. For an event
    the first accepts, both make the same bytes (issue 23: one walk instead of two; and a snapshot
    decoded without the 19-digit scan can be tried as it is: ``row_leaves``)."""

    value: Callable[[Any], Any]  # the request, the pinned review
    text: Callable[[Any], str]  # a field that holds a string
    number: Callable[[Any], int]  # a field that holds an integer
    stamp: Callable[[Any], Any]  # the grant's created_at, the key its leaves are found by


_AS_IS = _Reading(_as_is, _text_as_is, _number_as_is, _stamp_as_is)
_SAFE = _Reading(_safe, str, int, _as_is)


def row_leaves(
    row: GrantEventRow, seq: int, management_identity: str
) -> list[tuple[bytes, str | None, int | None]]:
    """``grant_event_leaves`` of a stored row (the sequencer's way). The snapshot is first decoded
    without ``json_codec.loads``' scan for a run of 19 digits (5 % of the sequencer's CPU in the
    server, issue 23) and tried as it is: an integer beyond 64 bits, read as a float there, is refused
    wherever it would reach a leaf (a float in the leaf's data, or where a field holds a string or
    an integer), and then the row is decoded again with the scan and made into leaves exactly as
    before. So the bytes are always those of the scanned decoding (tests/unit/test_audit_sequencer_cost.py)."""
    try:
        return _grant_event_leaves(grant_event(row, scanned=False), seq, management_identity, _AS_IS)
    except L.LeafError:
        return grant_event_leaves(grant_event(row), seq, management_identity)


def grant_event_leaves(
    event: GrantEvent, seq: int, management_identity: str
) -> list[tuple[bytes, str | None, int | None]]:
    """The leaves of one grant event, each with its grant id and the grant's ``created_at`` (the key
    ``store.tlog`` finds a grant's leaves by); ``seq`` is the first leaf's sequence
    number (the log's: index + 1). An approval or denial made by a vote without a ``grant.reviewed``
    event of its own is logged as that vote followed by the outcome, so the log shows its basis.

    The snapshot's values are tried as they are first (``_AS_IS``: the leaf's own check walks the
    request and the review once); only when a check refuses them are they made safe (``_SAFE``) and
    tried again. For values ``_safe`` leaves unchanged the bytes are the same either way."""
    try:
        return _grant_event_leaves(event, seq, management_identity, _AS_IS)
    except L.LeafError:
        return _grant_event_leaves(event, seq, management_identity, _SAFE)


def _grant_event_leaves(
    event: GrantEvent, seq: int, management_identity: str, read: _Reading
) -> list[tuple[bytes, str | None, int | None]]:
    grant: Mapping[str, Any] = event["grant"]
    gid = event["grant_id"]
    ts = int(event["created_at"])
    kind = event["event"]
    text = read.text
    created = read.stamp(grant.get("created_at"))  # first: a refusal comes before anything is logged
    made: list[bytes] = []  # the next leaf's sequence number is seq + len(made)
    if kind == "grant.created":
        request = read.value(grant.get("request") or {})
        review = grant.get("pinned_review")  # the policy review pinned at creation (D13), if any
        made.append(
            L.grant_created(
                seq + len(made),
                ts,
                _requester(grant, management_identity, text),
                gid,
                request=request,
                cmd_hash=request.get("cmd_hash") if isinstance(request, dict) else None,
                grant_type=text(grant["grant_type"]),
                review=read.value(review) if isinstance(review, dict) else None,
                policy_hash=text(review["policy_hash"])
                if isinstance(review, dict) and review.get("policy_hash")
                else None,
            )
        )
    elif kind in ("grant.approved", "grant.denied"):
        decided_by = text(grant.get("decided_by") or "")
        actor = _person(decided_by, management_identity)
        decision = "approve" if kind == "grant.approved" else "deny"
        if decided_by.startswith("policy:"):
            made.append(
                L.grant_auto_decided(
                    seq + len(made),
                    ts,
                    actor,
                    gid,
                    decision=decision,
                    rule=decided_by.removeprefix("policy:"),
                    reason=text(grant.get("decision_reason") or ""),
                )
            )
        elif grant.get("delegation_id"):
            # a delegation that approved at creation: no vote row was written, so log its vote here
            made.append(
                L.grant_reviewed(
                    seq + len(made),
                    ts,
                    actor,
                    gid,
                    decision=decision,
                    via="delegation",
                )
            )
        # else: a vote decided it, and every vote is a grant.reviewed event of its own (logged before)
        if kind == "grant.approved":
            made.append(
                L.grant_approved(
                    seq + len(made),
                    ts,
                    actor,
                    gid,
                    grant_type=text(grant["grant_type"]),
                    decided_by=decided_by,
                    expires_at=grant.get("expires_at"),
                )
            )
        else:
            made.append(
                L.grant_denied(
                    seq + len(made),
                    ts,
                    actor,
                    gid,
                    decided_by=decided_by,
                    reason=grant.get("decision_reason"),
                )
            )
    elif kind == "grant.revoked":
        made.append(
            L.grant_revoked(
                seq + len(made),
                ts,
                _person(text(grant.get("revoked_by") or ""), management_identity),
                gid,
                reason=grant.get("decision_reason"),
            )
        )
    elif kind == "grant.expired":
        made.append(L.grant_expired(seq + len(made), ts, {"kind": "system"}, gid))
    elif kind == "grant.consumed":
        make = L.grant_consumed if grant.get("grant_type") == "once" else L.grant_used
        made.append(make(seq + len(made), ts, _requester(grant, management_identity, text), gid))
    elif kind == "grant.used":
        made.append(L.grant_used(seq + len(made), ts, _requester(grant, management_identity, text), gid))
    elif kind == "grant.reviewed" and isinstance(grant.get("vote"), dict):
        vote = grant["vote"]  # every vote, final or not, is recorded with its own event (D13, D14)
        decision = text(vote["decision"])
        # A vote cast with a passkey over the grant's digest (a review link, D15) carries the
        # assertion: an auditor can check offline that this person's key approved this command.
        evidence = vote.get("evidence") if isinstance(vote.get("evidence"), dict) else None
        webauthn = evidence.get("webauthn") if evidence is not None else None
        made.append(
            L.grant_reviewed(
                seq + len(made),
                ts,
                _person(text(vote.get("email") or ""), management_identity),
                gid,
                decision=decision,
                via=text(vote.get("via") or "api"),
                reason=text(vote["reason"]) if decision == "deny" and vote.get("reason") else None,
                grant_digest=text(webauthn["grant_digest"])
                if isinstance(webauthn, dict) and webauthn.get("grant_digest")
                else None,
                evidence=evidence,
            )
        )
    elif kind == "grant.escalated" and "escalation_level" in grant:
        # the level reached, as the event announces it (an event's grant holds its columns, not its review)
        made.append(
            L.grant_escalated(
                seq + len(made),
                ts,
                {"kind": "system"},
                gid,
                level=read.number(grant["escalation_level"]),
            )
        )
    else:
        # Never jam the log on an event it cannot read: say so loudly; the grant row and its event stay.
        log.error("decision log: grant event %s of %s has no leaf mapping; not logged", kind, gid)
    return [(leaf, gid, created) for leaf in made]


def audit_event_leaf(event: AuditEvent, seq: int) -> tuple[bytes, str | None, None]:
    """An audit event carries its leaf's kind, actor and data as they are (made ``_safe`` only when
    the leaf's check refuses them as they are: the same bytes, one walk, as for grant events). With
    its grant id and, unlike a grant event's leaves, no grant ``created_at``: the event does not
    hold it, and these leaves (receipts) are rare enough for the store's index by grant id alone."""

    def leaf(data: Any) -> bytes:
        return L.make_leaf(
            event["kind"],
            seq=seq,
            ts=int(event["created_at"]),
            actor=event["actor"],
            data=data,
            grant_id=event["grant_id"],
        )

    try:
        return leaf(event["data"]), event["grant_id"], None
    except L.LeafError:
        return leaf(_safe(event["data"])), event["grant_id"], None

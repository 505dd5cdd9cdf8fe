"""The decision log's leaves of grantd's events (D14, issue 23): one rule, here, for what each grant
event and audit event becomes. The sequencer (``grantd.services.audit``) calls ``row_leaves`` for
each stored grant event and ``audit_event_leaf`` for each audit event; the leaf encodings themselves
are ``grantd.core.tlog.leaves``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from grantd.core.review.evaluate import RULE_PREFIX
from grantd.core.tlog import leaves as L
from grantd.store.records import GrantEvent, GrantEventRow
from grantd.store.rows import grant_event, snapshot_of
from grantd.store.tlog import AuditEvent

log = logging.getLogger("grantd.audit")


def _person(email: str | None, management_identity: str) -> dict[str, str]:
    if not email:
        return {"kind": "system"}
    if email.startswith(RULE_PREFIX):
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
    if value is None or type(value) is int:
        return value
    raise L.LeafError(f"{type(value).__name__} where a snapshot holds an integer")


@dataclass(frozen=True)
class _Reading:
    """How a grant event's snapshot values go into its leaves. As they are (``_AS_IS``, tried first):
    the request and the review unchanged (the leaf's own check walks them for floats), a string or
    an integer field refused unless it is one. Made safe (``_SAFE``, when that refused the event):
    the request and the review ``_safe``, the fields converted by ``str`` and ``int``. For an event
    the first accepts, both make the same bytes (issue 23: one walk instead of two; and a snapshot
    decoded without the 19-digit scan can be tried as it is: ``row_leaves``). Because the first
    reads every value of the write path's leaves with its exact type, it tells ``make_leaf`` so
    (``vouched``), which then leaves out the type checks already made."""

    value: Callable[[Any], Any]  # the request, the pinned review
    text: Callable[[Any], str]  # a field that holds a string
    number: Callable[[Any], int]  # a field that holds an integer
    stamp: Callable[[Any], Any]  # an integer or null: the grant's created_at, expires_at
    vouched: bool  # every value the write path's leaves carry is read with its exact type (make_leaf's)


_VIA = "api"  # a vote recorded without its channel


def _denial_reason(decision: str, reason: Any) -> Any:
    """A vote's reason is logged with a denial only, and an empty one not at all."""
    return reason if decision == "deny" and reason else None


_AS_IS = _Reading(_as_is, _text_as_is, _number_as_is, _stamp_as_is, vouched=True)
_SAFE = _Reading(_safe, str, int, _as_is, vouched=False)


def row_leaves(
    row: GrantEventRow, seq: int, management_identity: str
) -> list[tuple[bytes, str | None, int | None]]:
    """``grant_event_leaves`` of a stored row (the sequencer's way), in up to three readings, each
    tried only when the one before refused the row; whichever takes it, the leaves are those the
    last, careful one makes (tests/unit/test_audit_sequencer_cost.py holds them so):

    1. *typed* (``_TYPED``, an approval's two events): the plain shapes of the write path's hot
       kinds, decoded straight into the few fields their leaves carry, with exact types checked in C
       (issue 23: half of an approval's leaf cost; the rest of the snapshot is skipped, never built);
    2. *as it is* (``_AS_IS``): the whole snapshot decoded without ``json_codec.loads``' scan for a
       run of 19 digits (an integer beyond 64 bits, read as a float there, is refused wherever it
       would reach a leaf);
    3. *careful*: decoded with the scan and made safe (``grant_event_leaves``)."""
    _, kind, grant_id, _, created_at, text = row
    typed = _TYPED.get(kind)
    if typed is not None:
        try:
            made = typed(text, grant_id, int(created_at), seq, management_identity)
        except (msgspec.DecodeError, L.LeafError):  # ValidationError is a DecodeError
            made = None
        if made is not None:
            return [made]
    try:
        snapshot = snapshot_of(text, scanned=False)
        return _leaves(kind, snapshot, grant_id, int(created_at), seq, management_identity, _AS_IS)
    except L.LeafError:
        return grant_event_leaves(grant_event(row), seq, management_identity)


# -- the typed reading: what the plain approval's events carry, and nothing else ---------------------
# A snapshot's other members are skipped by the decoder. A field whose value is not of the declared
# type (a float, an object where a string is, a delegation's id where none is) refuses the row, and
# the readings below take it. Each function returns None for a shape its kind's general function
# logs differently (a rule's or a delegation's decision: more leaves), so that one does.


class _PlainVote(msgspec.Struct):
    decision: str
    email: str | None = None
    via: str | None = None
    reason: str | None = None
    evidence: None = None  # a passkey vote's assertion is walked by ``_reviewed``


class _PlainVoteEvent(msgspec.Struct):
    vote: _PlainVote
    created_at: int | None = None


class _PlainApproval(msgspec.Struct):
    grant_type: str
    decided_by: str | None = None
    expires_at: int | None = None
    created_at: int | None = None
    delegation_id: None = None  # a delegation's approval logs its vote too: ``_approved``


_VOTE_EVENT = msgspec.json.Decoder(_PlainVoteEvent)
_APPROVAL = msgspec.json.Decoder(_PlainApproval)
_Typed = tuple[bytes, str, int | None] | None


def _typed_reviewed(text: str, gid: str, ts: int, seq: int, mi: str) -> _Typed:
    event = _VOTE_EVENT.decode(text)
    vote = event.vote
    decision = vote.decision
    leaf = L.grant_reviewed(
        seq,
        ts,
        _person(vote.email or "", mi),
        gid,
        decision=decision,
        via=vote.via or _VIA,
        reason=_denial_reason(decision, vote.reason),
        vouched=True,
    )
    return leaf, gid, event.created_at


def _typed_approved(text: str, gid: str, ts: int, seq: int, mi: str) -> _Typed:
    approval = _APPROVAL.decode(text)
    decided_by = approval.decided_by or ""
    if decided_by.startswith(RULE_PREFIX):
        return None  # a rule's decision logs its rule first: ``_approved``
    leaf = L.grant_approved(
        seq,
        ts,
        _person(decided_by, mi),
        gid,
        grant_type=approval.grant_type,
        decided_by=decided_by,
        expires_at=approval.expires_at,
        vouched=True,
    )
    return leaf, gid, approval.created_at


_TYPED: dict[str, Callable[[str, str, int, int, str], _Typed]] = {
    "grant.reviewed": _typed_reviewed,
    "grant.approved": _typed_approved,
}


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
    kind, grant, grant_id = event["event"], event["grant"], event["grant_id"]
    ts = int(event["created_at"])
    try:
        return _leaves(kind, grant, grant_id, ts, seq, management_identity, _AS_IS)
    except L.LeafError:
        return _leaves(kind, grant, grant_id, ts, seq, management_identity, _SAFE)


def _leaves(
    kind: str,
    grant: Mapping[str, Any],
    gid: str,
    ts: int,
    seq: int,
    management_identity: str,
    read: _Reading,
) -> list[tuple[bytes, str | None, int | None]]:
    created = read.stamp(grant.get("created_at"))  # first: a refusal comes before anything is logged
    make = _BY_KIND.get(kind)
    made = make(grant, gid, ts, seq, management_identity, read) if make is not None else None
    if made is None:
        # Never jam the log on an event it cannot read: say so loudly; the grant row and its event stay.
        log.error("decision log: grant event %s of %s has no leaf mapping; not logged", kind, gid)
        return []
    if len(made) == 1:  # most events: one leaf, without a comprehension's frame
        return [(made[0], gid, created)]
    return [(leaf, gid, created) for leaf in made]


# One function per grant event kind: (snapshot, grant id, event time, first leaf's seq, the
# management identity, how values are read) -> the event's leaves, or None when the snapshot lacks
# what its kind is logged from. Each reads its fields in the order it uses them, so the first
# refusal is always the same one.
_Made = list[bytes] | None


def _created(grant: Mapping[str, Any], gid: str, ts: int, seq: int, mi: str, read: _Reading) -> _Made:
    request = read.value(grant.get("request") or {})
    review = grant.get("pinned_review")  # the policy review pinned at creation (D13), if any
    return [
        L.grant_created(
            seq,
            ts,
            _requester(grant, mi, read.text),
            gid,
            request=request,
            cmd_hash=request.get("cmd_hash") if isinstance(request, dict) else None,
            grant_type=read.text(grant["grant_type"]),
            review=read.value(review) if isinstance(review, dict) else None,
            policy_hash=read.text(review["policy_hash"])
            if isinstance(review, dict) and review.get("policy_hash")
            else None,
            vouched=read.vouched,
        )
    ]


def _basis(
    grant: Mapping[str, Any], gid: str, ts: int, seq: int, mi: str, read: _Reading, decision: str
) -> tuple[list[bytes], str, dict[str, str]]:
    """What an approval or denial was based on, when no vote event of its own logged it: a rule
    (``grant.auto_decided``) or a delegation that approved at creation (its vote, logged here); a
    vote's ``grant.reviewed`` event was logged before. With who decided, as text and as an actor."""
    decided_by = read.text(grant.get("decided_by") or "")
    actor = _person(decided_by, mi)
    if decided_by.startswith(RULE_PREFIX):
        rule = decided_by.removeprefix(RULE_PREFIX)
        reason = read.text(grant.get("decision_reason") or "")
        return (
            [L.grant_auto_decided(seq, ts, actor, gid, decision=decision, rule=rule, reason=reason)],
            decided_by,
            actor,
        )
    if grant.get("delegation_id"):
        return [L.grant_reviewed(seq, ts, actor, gid, decision=decision, via="delegation")], decided_by, actor
    return [], decided_by, actor


def _approved(grant: Mapping[str, Any], gid: str, ts: int, seq: int, mi: str, read: _Reading) -> _Made:
    made, decided_by, actor = _basis(grant, gid, ts, seq, mi, read, "approve")
    made.append(
        L.grant_approved(
            seq + len(made),
            ts,
            actor,
            gid,
            grant_type=read.text(grant["grant_type"]),
            decided_by=decided_by,
            expires_at=read.stamp(grant.get("expires_at")),
            vouched=read.vouched,
        )
    )
    return made


def _denied(grant: Mapping[str, Any], gid: str, ts: int, seq: int, mi: str, read: _Reading) -> _Made:
    made, decided_by, actor = _basis(grant, gid, ts, seq, mi, read, "deny")
    made.append(
        L.grant_denied(
            seq + len(made), ts, actor, gid, decided_by=decided_by, reason=grant.get("decision_reason")
        )
    )
    return made


def _revoked(grant: Mapping[str, Any], gid: str, ts: int, seq: int, mi: str, read: _Reading) -> _Made:
    actor = _person(read.text(grant.get("revoked_by") or ""), mi)
    return [L.grant_revoked(seq, ts, actor, gid, reason=grant.get("decision_reason"))]


def _expired(grant: Mapping[str, Any], gid: str, ts: int, seq: int, mi: str, read: _Reading) -> _Made:
    return [L.grant_expired(seq, ts, {"kind": "system"}, gid)]


def _consumed(grant: Mapping[str, Any], gid: str, ts: int, seq: int, mi: str, read: _Reading) -> _Made:
    make = L.grant_consumed if grant.get("grant_type") == "once" else L.grant_used
    return [make(seq, ts, _requester(grant, mi, read.text), gid, vouched=read.vouched)]


def _used(grant: Mapping[str, Any], gid: str, ts: int, seq: int, mi: str, read: _Reading) -> _Made:
    return [L.grant_used(seq, ts, _requester(grant, mi, read.text), gid, vouched=read.vouched)]


def _reviewed(grant: Mapping[str, Any], gid: str, ts: int, seq: int, mi: str, read: _Reading) -> _Made:
    vote = grant.get("vote")  # every vote, final or not, is recorded with its own event (D13, D14)
    if not isinstance(vote, dict):
        return None
    text = read.text
    decision = text(vote["decision"])
    # A vote cast with a passkey over the grant's digest (a review link, D15) carries the
    # assertion: an auditor can check offline that this person's key approved this command.
    evidence = vote.get("evidence") if isinstance(vote.get("evidence"), dict) else None
    webauthn = evidence.get("webauthn") if evidence is not None else None
    reason = _denial_reason(decision, vote.get("reason"))
    return [
        L.grant_reviewed(
            seq,
            ts,
            _person(text(vote.get("email") or ""), mi),
            gid,
            decision=decision,
            via=text(vote.get("via") or _VIA),
            reason=text(reason) if reason is not None else None,
            grant_digest=text(webauthn["grant_digest"])
            if isinstance(webauthn, dict) and webauthn.get("grant_digest")
            else None,
            evidence=evidence,
            vouched=read.vouched,
        )
    ]


def _escalated(grant: Mapping[str, Any], gid: str, ts: int, seq: int, mi: str, read: _Reading) -> _Made:
    if "escalation_level" not in grant:
        return None
    # the level reached, as the event announces it (an event's grant holds its columns, not its review)
    return [L.grant_escalated(seq, ts, {"kind": "system"}, gid, level=read.number(grant["escalation_level"]))]


_BY_KIND: dict[str, Callable[[Mapping[str, Any], str, int, int, str, _Reading], _Made]] = {
    "grant.created": _created,
    "grant.approved": _approved,
    "grant.denied": _denied,
    "grant.revoked": _revoked,
    "grant.expired": _expired,
    "grant.consumed": _consumed,
    "grant.used": _used,
    "grant.reviewed": _reviewed,
    "grant.escalated": _escalated,
}


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

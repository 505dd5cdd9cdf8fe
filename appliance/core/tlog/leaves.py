"""The leaf encoding (D14): UTF-8 RFC 8785 canonical JSON ``{v, seq, ts, kind, grant_id?, actor, data}``.

A leaf is built once, from plain values, by the function of its kind (``grant_created``, ...), and
stored as the exact bytes that were hashed; it is never re-serialised. ``parse_leaf`` reads those bytes
back and refuses anything that is not exactly the canonical form of a valid leaf (so two different byte
strings can never stand for the same event). Numbers are integers only (no floats: canonical JSON
of floats differs between languages), within ±(2^53 − 1) (RFC 8785's safe range); ``ts`` is Unix
milliseconds; ``seq`` is the event's ``grant_events`` sequence number.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import rfc8785

from grantd.core import json_codec

VERSION = 1
ACTOR_KINDS = frozenset({"person", "agent", "management", "system", "host", "client"})
ACTOR_FIELDS = frozenset({"kind", "email", "pid", "agent_id", "host", "client_id", "name"})
RECEIPT_RESULTS = frozenset({"exited", "signaled", "refused"})
DECISIONS = frozenset({"approve", "deny"})

# kind -> (carries a grant_id, data keys that must be present). Other data keys are allowed.
KINDS: dict[str, tuple[bool, frozenset[str]]] = {
    "grant.created": (True, frozenset({"request", "cmd_hash", "grant_type"})),
    "grant.reviewed": (True, frozenset({"decision", "via"})),
    "grant.auto_decided": (True, frozenset({"decision", "rule", "reason"})),
    "grant.escalated": (True, frozenset({"level"})),
    "grant.approved": (True, frozenset({"grant_type", "decided_by"})),
    "grant.denied": (True, frozenset({"decided_by"})),
    "grant.revoked": (True, frozenset()),
    "grant.expired": (True, frozenset()),
    "grant.consumed": (True, frozenset()),
    "grant.used": (True, frozenset()),
    "delegation.created": (False, frozenset({"delegation_id"})),
    "delegation.revoked": (False, frozenset({"delegation_id"})),
    "agent.enrolled": (False, frozenset({"agent_id", "email", "public_key"})),
    "agent.key_replaced": (False, frozenset({"agent_id", "public_key"})),
    "agent.disabled": (False, frozenset({"agent_id"})),
    "person.credential_added": (False, frozenset({"email", "credential_id", "public_key"})),
    "policy.loaded": (False, frozenset({"policy_hash"})),
    "key.rotated": (False, frozenset({"purpose", "kid"})),
    "host.enrolled": (False, frozenset({"host", "public_key"})),
    "exec.receipt": (True, frozenset({"receipt", "host", "authz_jti", "result"})),
    "audit.exported": (False, frozenset()),
    "log.restored": (False, frozenset({"from_size", "lost_range"})),
}
LEAF_FIELDS = frozenset({"v", "seq", "ts", "kind", "grant_id", "actor", "data"})
MAX_SAFE = 2**53 - 1


class LeafError(ValueError):
    """A value cannot become a leaf, or stored bytes are not a valid canonical leaf."""


@dataclass(frozen=True)
class Leaf:
    raw: bytes  # the exact bytes that were hashed
    seq: int
    ts: int
    kind: str
    grant_id: str | None
    actor: dict[str, Any]
    data: dict[str, Any]


def canonical(value: Any) -> bytes:
    """RFC 8785 canonical JSON (UTF-8); integers only.

    Fast path (issue 23: the sequencer encodes every event, 23 -> 4 -> 0.4 µs a leaf): when orjson's
    sorted, compact encoding (``grantd.core.json_codec``) is pure ASCII it is byte for byte RFC 8785's: ASCII keys sort
    the same by UTF-16 code units and by code points, integers and literals are written alike, and
    both escape exactly the quote, the backslash and the control characters (backspace, tab, line
    feed, form feed and carriage return in their short forms, the others as lowercase u00xx).
    Anything else goes to the ``rfc8785`` library
    (tests/unit/test_tlog_leaves.py checks the two agree)."""
    _no_floats(value, "leaf")
    return _encode_checked(value)


def _encode_checked(value: Any) -> bytes:
    """``canonical`` of a value already known to hold only JSON values with integers in the safe
    range (``_no_floats`` passed on it, or on its parts the other checks do not cover)."""
    encoded = json_codec.dumps_sorted(value)
    if encoded is not None and encoded.isascii():
        return encoded
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError as error:
        raise LeafError(str(error)) from None


def _no_floats(value: Any, where: str) -> None:
    """Integers in the safe range, strings, booleans, null, lists and string-keyed objects only. The
    common case is one iterative pass over exact types (the sequencer checks every event, issue 23);
    anything unusual goes to ``_no_floats_at``, which names where the problem is. Most leaves'
    ``data`` is a flat object of strings and small integers: one loop over its values settles it
    (after the keys, as the walk checks every object's)."""
    if type(value) is dict and _strings(value):
        for item in value.values():
            kind = type(item)
            if not (
                kind is str or item is None or kind is bool or kind is int and -MAX_SAFE <= item <= MAX_SAFE
            ):
                break  # something nested or unusual: the walk below
        else:
            return
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str or item is None or kind is bool:
            continue
        if kind is int and -MAX_SAFE <= item <= MAX_SAFE:
            continue
        if kind is dict and _strings(item):
            stack.extend(item.values())
            continue
        if kind is list or kind is tuple:
            stack.extend(item)
            continue
        _no_floats_at(value, where)  # raises with the path (or accepts a subclass it knows)
        return


def _no_floats_at(value: Any, where: str) -> None:
    if isinstance(value, float):
        raise LeafError(f"{where}: numbers in a leaf are integers")
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int):
        if abs(value) > MAX_SAFE:
            raise LeafError(f"{where}: {value} is outside the safe integer range")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise LeafError(f"{where}: object keys are strings")
            _no_floats_at(item, f"{where}.{key}")
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _no_floats_at(item, f"{where}[{i}]")
        return
    raise LeafError(f"{where}: {type(value).__name__} is not a JSON value")


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > MAX_SAFE:
        raise LeafError(f"{name} must be a non-negative integer")
    return value


def _check(kind: Any, seq: Any, ts: Any, grant_id: Any, actor: Any, data: Any) -> None:
    # Exact types are tested first (the sequencer checks every event, issue 23): ``type(x) is str``
    # is a pointer compare, ``isinstance(x, Mapping)`` an ABC check; subclasses still pass below.
    spec = KINDS.get(kind) if isinstance(kind, str) else None
    if spec is None:
        raise LeafError(f"unknown leaf kind {kind!r}")
    if type(seq) is not int or not 0 <= seq <= MAX_SAFE:
        _int(seq, "seq")  # an int subclass passes there; anything else raises
    if type(ts) is not int or not 0 <= ts <= MAX_SAFE:
        _int(ts, "ts")
    wants_grant, required = spec
    if wants_grant:
        if not isinstance(grant_id, str) or not grant_id:
            raise LeafError(f"a {kind} leaf names its grant_id")
    elif grant_id is not None:
        raise LeafError(f"a {kind} leaf has no grant_id")
    if type(actor) is not dict and not isinstance(actor, Mapping) or actor.get("kind") not in ACTOR_KINDS:
        raise LeafError(f"actor must be an object whose kind is one of {sorted(ACTOR_KINDS)}")
    # key views compare without building sets; the values' types in one pass over a set of types
    if not actor.keys() <= ACTOR_FIELDS or not _strings(actor.values()):
        raise LeafError(f"actor members are strings among {sorted(ACTOR_FIELDS)}")
    if type(data) is not dict and not isinstance(data, Mapping):
        raise LeafError("data must be an object")
    if not data.keys() >= required:
        raise LeafError(f"a {kind} leaf's data lacks {sorted(required - set(data))}")
    if "decision" in required and data["decision"] not in DECISIONS:
        raise LeafError(f"decision must be one of {sorted(DECISIONS)}")
    if kind == "exec.receipt" and data["result"] not in RECEIPT_RESULTS:
        raise LeafError(f"result must be one of {sorted(RECEIPT_RESULTS)}")


def _strings(values: Iterable[Any]) -> bool:
    """All of ``values`` are strings (``str`` or a subclass); ``map`` runs the loop in C."""
    return all(map(isinstance, values, _STR))


_STR = itertools.repeat(str)  # endless and stateless: one object serves every call of ``_strings``
_SCALAR_TYPES = frozenset({str, int, bool, type(None)})


def _plain(value: Mapping[str, Any]) -> dict[str, Any]:
    """``value`` as a dict for the encoder (it takes exact dicts only): itself if it is one (a leaf is
    encoded at once, so no copy is needed)."""
    return value if type(value) is dict else dict(value)


def make_leaf(
    kind: str,
    *,
    seq: int,
    ts: int,
    actor: Mapping[str, str],
    data: Mapping[str, Any],
    grant_id: str | None = None,
    vouched: bool = False,
) -> bytes:
    """The canonical bytes of one leaf (every kind's function comes here). ``_check`` covers every
    member but ``data``'s values. When those are all of exact scalar types (most leaves), their
    types settle it, read as a set built in C, and the encoder refuses an integer outside the
    safe range; otherwise they are walked for floats and unsafe integers.

    ``vouched``: the caller read every value with its exact type, as the sequencer's first attempt
    does (``grantd.services.audit_leaves``, issue 23: the checks were a fifth of a leaf's cost):
    ``actor`` a dict of strings whose kind is one of ACTOR_KINDS and whose members are among
    ACTOR_FIELDS, ``data`` a dict of the kind's members holding strings, booleans, null, integers
    and nested values the kind's function walked itself. Then only what no reading can vouch for
    is checked here: seq, ts, the grant id and a decision (anything unusual there gets the whole
    ``_check``), and the encoder's range of integers. tests/unit/test_audit_sequencer_cost.py holds
    every leaf the sequencer makes so to ``parse_leaf``."""
    return _leaf(kind, seq, ts, actor, data, grant_id, vouched)


def _leaf(
    kind: str,
    seq: int,
    ts: int,
    actor: Mapping[str, str],
    data: Mapping[str, Any],
    grant_id: str | None,
    vouched: bool,
) -> bytes:
    """``make_leaf`` with its arguments by position: the write path's kinds call it so (the sequencer
    makes every leaf, and a call by keywords costs it ~400 instructions more, issue 23)."""
    if vouched:
        if (
            type(seq) is not int
            or not 0 <= seq <= MAX_SAFE
            or type(ts) is not int
            or not 0 <= ts <= MAX_SAFE
            or type(grant_id) is not str
            or not grant_id
            or "decision" in data
            and data["decision"] not in DECISIONS
        ):
            _check(kind, seq, ts, grant_id, actor, data)
        scalars = True  # nested values were walked by the caller: only integers can be refused below
    else:
        _check(kind, seq, ts, grant_id, actor, data)
        scalars = set(map(type, data.values())) <= _SCALAR_TYPES
        if not scalars:
            _no_floats(data, "leaf.data")
    # ``_plain`` and ``_encode_checked``'s common case written out: the sequencer makes every leaf
    # here, and each call saved is ~0.06 µs of a ~2 µs leaf (issue 23)
    leaf: dict[str, Any] = {
        "v": VERSION,
        "seq": seq,
        "ts": ts,
        "kind": kind,
        "actor": actor if type(actor) is dict else dict(actor),
        "data": data if type(data) is dict else dict(data),
    }
    if grant_id is not None:
        leaf["grant_id"] = grant_id
    encoded = json_codec.dumps_sorted(leaf)
    if encoded is None and scalars:
        _no_floats(data, "leaf.data")  # an integer outside the safe range: refused, its place named
    return encoded if encoded is not None and encoded.isascii() else _encode_checked(leaf)


def parse_leaf(raw: bytes) -> Leaf:
    """Read stored leaf bytes; ``LeafError`` unless they are exactly a canonical, valid leaf."""
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise LeafError("a leaf is UTF-8 JSON") from None
    if (
        not isinstance(value, dict)
        or set(value) - LEAF_FIELDS
        or not {"v", "seq", "ts", "kind", "actor", "data"} <= set(value)
    ):
        raise LeafError(f"a leaf has exactly the members {sorted(LEAF_FIELDS)} (grant_id optional)")
    if value["v"] != VERSION or isinstance(value["v"], bool):
        raise LeafError(f"unknown leaf version {value['v']!r}")
    _check(value["kind"], value["seq"], value["ts"], value.get("grant_id"), value["actor"], value["data"])
    if canonical(value) != raw:
        raise LeafError("the leaf is not in RFC 8785 canonical form")
    return Leaf(
        raw, value["seq"], value["ts"], value["kind"], value.get("grant_id"), value["actor"], value["data"]
    )


def backfilled(raw: bytes) -> bytes:
    """The same leaf marked ``data.backfilled = true``: what the log's first integration writes for
    grants, agents, hosts, ... that existed before the log (their history is not in it). The verifier
    accepts such leaves only as the log's leading prefix, and does not hold a backfilled approval to
    a policy (there are no votes to check)."""
    leaf = parse_leaf(raw)
    return make_leaf(
        leaf.kind,
        seq=leaf.seq,
        ts=leaf.ts,
        actor=leaf.actor,
        data={**leaf.data, "backfilled": True},
        grant_id=leaf.grant_id,
    )


# -- one function per kind (D14, beyond.md §4) -------------------------------------------------------------
# Each takes the event's seq, its time in Unix milliseconds and who did it (an actor object such as
# {"kind": "person", "email": ..., "pid": ...}); optional details go in `extra` and are logged verbatim.

Actor = Mapping[str, str]


def _opt(data: dict[str, Any], **values: Any) -> dict[str, Any]:
    data.update({k: v for k, v in values.items() if v is not None})
    return data


def grant_created(
    seq: int,
    ts: int,
    actor: Actor,
    grant_id: str,
    *,
    request: Mapping[str, Any],
    cmd_hash: str | None,
    grant_type: str,
    review: Mapping[str, Any] | None = None,
    policy_hash: str | None = None,
    vouched: bool = False,
) -> bytes:
    """The full request as stored, its cmd_hash (D4; null for a permissions grant), its grant_type and
    the review pinned at creation (grantd.core.review.Review as a dict) that its approval must meet.
    ``vouched``: as ``make_leaf``'s (the request and the review are walked here)."""
    # the hot kinds (every grant's created, vote and outcome) fill ``data`` without ``_opt``'s
    # keyword dict, and copy only what is not a plain dict already (issue 23)
    data = {"request": _plain(request), "cmd_hash": cmd_hash, "grant_type": grant_type}
    if review is not None:
        data["review"] = _plain(review)
    if policy_hash is not None:
        data["policy_hash"] = policy_hash
    if vouched:
        _no_floats(data["request"], "leaf.data.request")
        if review is not None:
            _no_floats(data["review"], "leaf.data.review")
    return _leaf("grant.created", seq, ts, actor, data, grant_id, vouched)


def grant_reviewed(
    seq: int,
    ts: int,
    actor: Actor,
    grant_id: str,
    *,
    decision: str,
    via: str,
    req: str | None = None,
    reason: str | None = None,
    grant_digest: str | None = None,
    evidence: Mapping[str, Any] | None = None,
    self_approved: bool | None = None,
    vouched: bool = False,
) -> bytes:
    """One vote. ``evidence`` is ``{"webauthn": {credential_id, authenticator_data, client_data_json,
    signature}}`` for a passkey vote over the grant digest, ``{"session": sid}`` otherwise.
    ``vouched``: as ``make_leaf``'s (the evidence is walked here)."""
    data: dict[str, Any] = {"decision": decision, "via": via}
    if req is not None:
        data["req"] = req
    if reason is not None:
        data["reason"] = reason
    if grant_digest is not None:
        data["grant_digest"] = grant_digest
    if evidence is not None:
        if vouched:
            _no_floats(evidence, "leaf.data.evidence")
        data["evidence"] = _plain(evidence)
    if self_approved is not None:
        data["self_approved"] = self_approved
    return _leaf("grant.reviewed", seq, ts, actor, data, grant_id, vouched)


def grant_auto_decided(
    seq: int, ts: int, actor: Actor, grant_id: str, *, decision: str, rule: str, reason: str
) -> bytes:
    return make_leaf(
        "grant.auto_decided",
        seq=seq,
        ts=ts,
        actor=actor,
        grant_id=grant_id,
        data={"decision": decision, "rule": rule, "reason": reason},
    )


def grant_escalated(
    seq: int, ts: int, actor: Actor, grant_id: str, *, level: int, notify: list[str] | None = None
) -> bytes:
    return make_leaf(
        "grant.escalated",
        seq=seq,
        ts=ts,
        actor=actor,
        grant_id=grant_id,
        data=_opt({"level": level}, notify=notify),
    )


def grant_approved(
    seq: int,
    ts: int,
    actor: Actor,
    grant_id: str,
    *,
    grant_type: str,
    decided_by: str,
    expires_at: int | None = None,
    duration: int | None = None,
    vouched: bool = False,
) -> bytes:
    data: dict[str, Any] = {"grant_type": grant_type, "decided_by": decided_by}
    if expires_at is not None:
        data["expires_at"] = expires_at
    if duration is not None:
        data["duration"] = duration
    return _leaf("grant.approved", seq, ts, actor, data, grant_id, vouched)


def grant_denied(
    seq: int, ts: int, actor: Actor, grant_id: str, *, decided_by: str, reason: str | None = None
) -> bytes:
    return make_leaf(
        "grant.denied",
        seq=seq,
        ts=ts,
        actor=actor,
        grant_id=grant_id,
        data=_opt({"decided_by": decided_by}, reason=reason),
    )


def grant_revoked(seq: int, ts: int, actor: Actor, grant_id: str, *, reason: str | None = None) -> bytes:
    return make_leaf(
        "grant.revoked", seq=seq, ts=ts, actor=actor, grant_id=grant_id, data=_opt({}, reason=reason)
    )


def grant_expired(
    seq: int, ts: int, actor: Actor, grant_id: str, *, status_before: str | None = None
) -> bytes:
    return make_leaf(
        "grant.expired",
        seq=seq,
        ts=ts,
        actor=actor,
        grant_id=grant_id,
        data=_opt({}, status_before=status_before),
    )


def grant_consumed(
    seq: int, ts: int, actor: Actor, grant_id: str, *, authz_jti: str | None = None, vouched: bool = False
) -> bytes:
    """The one consume of a `once` grant."""
    data = {} if authz_jti is None else {"authz_jti": authz_jti}
    return _leaf("grant.consumed", seq, ts, actor, data, grant_id, vouched)


def grant_used(
    seq: int, ts: int, actor: Actor, grant_id: str, *, authz_jti: str | None = None, vouched: bool = False
) -> bytes:
    """A consume of a `timed` or `always` grant answering `valid`."""
    data = {} if authz_jti is None else {"authz_jti": authz_jti}
    return _leaf("grant.used", seq, ts, actor, data, grant_id, vouched)


def delegation_created(
    seq: int, ts: int, actor: Actor, *, delegation_id: str, details: Mapping[str, Any] | None = None
) -> bytes:
    return make_leaf(
        "delegation.created",
        seq=seq,
        ts=ts,
        actor=actor,
        data=_opt({"delegation_id": delegation_id}, details=dict(details) if details else None),
    )


def delegation_revoked(seq: int, ts: int, actor: Actor, *, delegation_id: str) -> bytes:
    return make_leaf("delegation.revoked", seq=seq, ts=ts, actor=actor, data={"delegation_id": delegation_id})


def agent_enrolled(
    seq: int,
    ts: int,
    actor: Actor,
    *,
    agent_id: str,
    email: str,
    public_key: str,
    owner: str | None = None,
    approver: str | None = None,
) -> bytes:
    return make_leaf(
        "agent.enrolled",
        seq=seq,
        ts=ts,
        actor=actor,
        data=_opt(
            {"agent_id": agent_id, "email": email, "public_key": public_key}, owner=owner, approver=approver
        ),
    )


def agent_key_replaced(seq: int, ts: int, actor: Actor, *, agent_id: str, public_key: str) -> bytes:
    return make_leaf(
        "agent.key_replaced",
        seq=seq,
        ts=ts,
        actor=actor,
        data={"agent_id": agent_id, "public_key": public_key},
    )


def agent_disabled(seq: int, ts: int, actor: Actor, *, agent_id: str) -> bytes:
    return make_leaf("agent.disabled", seq=seq, ts=ts, actor=actor, data={"agent_id": agent_id})


def person_credential_added(
    seq: int,
    ts: int,
    actor: Actor,
    *,
    email: str,
    credential_id: str,
    public_key: str,
    pid: str | None = None,
) -> bytes:
    """A passkey's public key (base64url COSE key), so that votes made with it verify offline later."""
    return make_leaf(
        "person.credential_added",
        seq=seq,
        ts=ts,
        actor=actor,
        data=_opt({"email": email, "credential_id": credential_id, "public_key": public_key}, pid=pid),
    )


def policy_loaded(
    seq: int, ts: int, actor: Actor, *, policy_hash: str, policy_ids: list[str] | None = None
) -> bytes:
    return make_leaf(
        "policy.loaded",
        seq=seq,
        ts=ts,
        actor=actor,
        data=_opt({"policy_hash": policy_hash}, policy_ids=policy_ids),
    )


def key_rotated(
    seq: int, ts: int, actor: Actor, *, purpose: str, kid: str, public_key: str | None = None
) -> bytes:
    """``purpose`` "jwt" (a signing key of the issuer) or "log" (the checkpoint key; kid = its vkey)."""
    return make_leaf(
        "key.rotated",
        seq=seq,
        ts=ts,
        actor=actor,
        data=_opt({"purpose": purpose, "kid": kid}, public_key=public_key),
    )


def host_enrolled(seq: int, ts: int, actor: Actor, *, host: str, public_key: str) -> bytes:
    """A target host's receipt key, an OpenSSH `ssh-ed25519` line (normalised, without comment)."""
    return make_leaf(
        "host.enrolled", seq=seq, ts=ts, actor=actor, data={"host": host, "public_key": public_key}
    )


def exec_receipt(
    seq: int,
    ts: int,
    grant_id: str,
    *,
    host: str,
    receipt: str,
    authz_jti: str,
    result: str,
    exit_code: int | None = None,
) -> bytes:
    """A host's signed receipt (the JWS verbatim) and the facts the server read from it; the actor is the host."""
    return make_leaf(
        "exec.receipt",
        seq=seq,
        ts=ts,
        actor={"kind": "host", "host": host},
        grant_id=grant_id,
        data=_opt(
            {"receipt": receipt, "host": host, "authz_jti": authz_jti, "result": result}, exit_code=exit_code
        ),
    )


def audit_exported(seq: int, ts: int, actor: Actor, *, size: int | None = None) -> bytes:
    return make_leaf("audit.exported", seq=seq, ts=ts, actor=actor, data=_opt({}, size=size))


def log_restored(seq: int, ts: int, actor: Actor, *, from_size: int, lost_range: list[int]) -> bytes:
    return make_leaf(
        "log.restored", seq=seq, ts=ts, actor=actor, data={"from_size": from_size, "lost_range": lost_range}
    )

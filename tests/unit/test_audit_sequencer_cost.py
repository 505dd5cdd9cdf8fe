"""The sequencer's cheap paths (issue 23: integration cheap enough for the grant write path) give the
same leaves as the full ones, and a step with nothing to do writes nothing."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgspec
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from grantd.core.clock import ManualClock
from grantd.core.tlog import leaves as L
from grantd.core.tlog.leaves import parse_leaf
from grantd.services import audit as A
from grantd.services import audit_leaves as AL
from grantd.services.audit import AuditLog
from grantd.store.rows import from_json, grant_event, to_json
from grantd.testing.factories import grant
from grantd.testing.memory_store import MemoryStore

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=12,
)


def _event(kind: str, snapshot: dict[str, Any]) -> dict[str, Any]:
    return {
        "seq": 7,
        "event": kind,
        "grant_id": "gr_x",
        "requester": snapshot["requester"],
        "created_at": 1_700_000_000_000,
        "grant": snapshot,
    }


@settings(max_examples=300, deadline=None)
@given(
    request=st.dictionaries(st.text(max_size=6), _values, max_size=4),
    review=st.none() | st.dictionaries(st.text(max_size=6), _values, max_size=3),
)
def test_leaves_made_from_values_as_they_are_equal_those_made_safe_first(
    request: dict[str, Any], review: dict[str, Any] | None
) -> None:
    """The as-is attempt (one walk) must give exactly the bytes of making request and review
    ``_safe`` first (the code before issue 23's speed-up), floats and unsafe integers included."""
    snapshot = {**grant("gr_x"), "request": {**request, "command": ["ls"]}, "pinned_review": review}
    if isinstance(review, dict):
        review["policy_hash"] = "sha256:ab"
    event = _event("grant.created", snapshot)
    made = AL.grant_event_leaves(event, 3, "admin@example.com")  # type: ignore[arg-type]
    safe_first = AL._leaves(
        "grant.created", snapshot, "gr_x", event["created_at"], 3, "admin@example.com", AL._SAFE
    )
    assert made == safe_first
    parse_leaf(made[0][0])  # and it is a canonical, valid leaf


@settings(max_examples=200, deadline=None)
@given(data=st.dictionaries(st.text(max_size=6), _values, max_size=4))
def test_audit_event_leaves_equal_those_made_safe_first(data: dict[str, Any]) -> None:
    data = {**data, "agent_id": "agt_1"}
    event = {
        "seq": 1,
        "kind": "agent.disabled",
        "grant_id": None,
        "actor": {"kind": "system"},
        "data": data,
        "created_at": 1_700_000_000_000,
    }
    leaf, _, _ = AL.audit_event_leaf(event, 9)  # type: ignore[arg-type]
    expected = L.make_leaf(
        "agent.disabled", seq=9, ts=1_700_000_000_000, actor={"kind": "system"}, data=AL._safe(data)
    )
    assert leaf == expected


def test_a_float_where_the_leaf_wants_an_integer_is_still_refused():
    snapshot = {**grant("gr_x", status="approved"), "decided_by": "alice@example.com", "expires_at": 1.5}
    try:
        AL.grant_event_leaves(_event("grant.approved", snapshot), 1, "admin@example.com")  # type: ignore[arg-type]
    except L.LeafError as error:
        assert "expires_at" in str(error)
    else:
        raise AssertionError("a float expires_at became a leaf")


# what a stored snapshot's fields may hold, also where grantd never writes it: a string field a
# number (one beyond 64 bits too, which orjson reads as a float), an integer field a float
_big = st.integers(2**64, 10**22) | st.integers(-(10**22), -(2**63) - 1)  # floats to orjson
_odd = (
    st.none()
    | _big
    | st.integers(-5, 5)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([True, [], {}, "", "x", "policy:night"])
)
_texts = st.sampled_from(["alice@example.com", "admin@example.com", "agt_1", "once", "api"]) | _odd
_GRANT_KINDS = [
    "grant.created",
    "grant.approved",
    "grant.denied",
    "grant.revoked",
    "grant.expired",
    "grant.consumed",
    "grant.used",
    "grant.reviewed",
    "grant.escalated",
]


@settings(max_examples=400, deadline=None)
@given(
    kind=st.sampled_from(_GRANT_KINDS),
    texts=st.fixed_dictionaries(
        {
            k: _texts
            for k in (
                "grant_type",
                "decided_by",
                "requester_id",
                "decision_reason",
                "revoked_by",
                "delegation_id",
            )
        }
    ),
    vote=st.fixed_dictionaries(
        {k: _texts for k in ("decision", "email", "via", "reason")},
        optional={"evidence": st.dictionaries(st.text(max_size=6), _values | _big, max_size=3) | _odd},
    ),
    numbers=st.fixed_dictionaries(
        {k: st.integers(0, 2**53) | _odd for k in ("expires_at", "escalation_level")}
    ),
    created_at=st.integers(0, 2**53) | _odd,
    request=st.dictionaries(st.text(max_size=6), _values | _big, max_size=3),
    review=st.none()
    | _odd
    | st.dictionaries(st.sampled_from(["policy_hash", "p", "é"]), _values | _big, max_size=3),
)
def test_a_row_decoded_without_the_digit_scan_gives_the_leaves_of_the_scanned_decoding(
    kind: str,
    texts: dict[str, Any],
    vote: dict[str, Any],
    numbers: dict[str, Any],
    created_at: Any,
    request: dict[str, Any],
    review: Any,
) -> None:
    """``row_leaves`` (the sequencer's: orjson without the scan for 19 digits, values as they are,
    the checks its exact-type reading vouches for left out: ``make_leaf(vouched=True)``) makes
    exactly what the scanned decoding makes, or fails as it fails, for any snapshot: integers
    beyond 64 bits (read as floats without the scan) wherever they are, and fields of the wrong
    type. And every leaf it makes is a canonical, valid leaf."""
    snapshot = {
        **grant("gr_x"),
        **texts,
        **numbers,
        "created_at": created_at,
        "requester": "bot@agents.example.com",
        "request": {**request, "command": ["ls"]},
        "pinned_review": review,
        "vote": vote,
    }
    row = (7, kind, "gr_x", "bot@agents.example.com", 1_700_000_000_000, json.dumps(snapshot))

    def outcome(make: Any) -> Any:
        try:
            return ("leaves", make())
        except (KeyError, TypeError, ValueError) as error:  # what the step logs and skips
            return ("refused", type(error))

    scanned = outcome(lambda: AL.grant_event_leaves(grant_event(row), 3, "admin@example.com"))
    made = outcome(lambda: AL.row_leaves(row, 3, "admin@example.com"))
    assert made == scanned
    if made[0] == "leaves":
        for leaf, _, _ in made[1]:
            parse_leaf(leaf)


_ODD_VALUES = [1.5, 2**53, 2**70, -(2**70), True, [1.5], {"x": [2**60]}, "é", None, ""]
_VALID_VOTE = {"decision": "approve", "email": "alice@example.com", "via": "link", "reason": None}


@pytest.mark.parametrize("evidence", [{"webauthn": {"grant_digest": "sha256:ef"}}, None])
@pytest.mark.parametrize(
    "kind", ["grant.created", "grant.reviewed", "grant.approved", "grant.consumed", "grant.used"]
)
def test_every_leaf_the_sequencer_makes_is_valid_whatever_one_field_holds(kind: str, evidence: Any) -> None:
    """The write path's kinds, whose leaves ``make_leaf`` makes vouched for by the sequencer's exact-type
    and typed readings: each field those leaves read holds, in turn, a float, an integer outside
    the safe range or beyond 64 bits, a boolean, a nested float, non-ASCII text, null or an empty
    string (everything else valid; a vote with a passkey's evidence, which the typed reading leaves
    to the next, and one without). Whatever comes out is exactly what the scanned decoding makes,
    and every leaf of it is a canonical, valid leaf (``parse_leaf``)."""
    base = {
        **grant("gr_x", requester_id="agt_1", decided_by="alice@example.com"),
        "request": {"command": ["ls"], "cmd_hash": "sha256:ab"},
        "pinned_review": {"policy_hash": "sha256:cd", "policies": ["p"]},
        "vote": dict(_VALID_VOTE, evidence=evidence),
    }
    fields = [k for k in base if k not in ("id", "vote")] + [f"vote.{k}" for k in (*_VALID_VOTE, "evidence")]
    for field in fields:
        for odd in _ODD_VALUES:
            snapshot = json.loads(json.dumps(base))
            if field.startswith("vote."):
                snapshot["vote"][field.removeprefix("vote.")] = odd
            else:
                snapshot[field] = odd
            row = (7, kind, "gr_x", "bot@agents.example.com", 1_700_000_000_000, json.dumps(snapshot))
            try:
                made = AL.row_leaves(row, 3, "admin@example.com")
            except (KeyError, TypeError, ValueError):  # what the step logs and skips
                with pytest.raises((KeyError, TypeError, ValueError)):
                    AL.grant_event_leaves(grant_event(row), 3, "admin@example.com")
                continue
            assert made == AL.grant_event_leaves(grant_event(row), 3, "admin@example.com"), (field, odd)
            for leaf, _, _ in made:
                parse_leaf(leaf)


def _typed(kind: str, snapshot: dict[str, Any]) -> Any:
    try:
        return AL._TYPED[kind](json.dumps(snapshot), "gr_x", 1_700_000_000_000, 3, "admin@example.com")
    except msgspec.DecodeError:
        return "refused"


_PLAIN_VOTE = {
    "decision": "deny",
    "email": "Admin@example.com",
    "via": "tui",
    "reason": "no",
    "evidence": None,
}


@pytest.mark.parametrize(
    ("kind", "change"),
    [
        ("grant.approved", {}),
        ("grant.approved", {"decided_by": None, "expires_at": None, "created_at": None}),
        ("grant.reviewed", {}),
        (
            "grant.reviewed",
            {"vote": dict(_PLAIN_VOTE, email=None, via=None, reason=None, decision="approve")},
        ),
    ],
)
def test_the_typed_reading_takes_the_plain_events_of_an_approval(kind: str, change: dict[str, Any]) -> None:
    """The typed reading (half of an approval's leaf cost, issue 23) really takes the two events
    every plain approval writes, and makes the leaves of the careful reading."""
    snapshot = {**grant("gr_x", decided_by="alice@example.com"), "vote": _PLAIN_VOTE, **change}
    made = _typed(kind, snapshot)
    row = (7, kind, "gr_x", "bot@agents.example.com", 1_700_000_000_000, json.dumps(snapshot))
    assert made not in (None, "refused")
    assert [made] == AL.grant_event_leaves(grant_event(row), 3, "admin@example.com")


@pytest.mark.parametrize(
    ("kind", "change"),
    [
        ("grant.approved", {"decided_by": "policy:night"}),  # the rule's leaf comes first
        ("grant.approved", {"delegation_id": "dlg_1"}),  # the delegation's vote comes first
        ("grant.approved", {"expires_at": 1.0}),
        ("grant.approved", {"grant_type": 1}),
        ("grant.approved", {"created_at": True}),
        ("grant.approved", {"expires_at": 2**53}),  # refused by the encoder's range
        ("grant.reviewed", {"vote": dict(_PLAIN_VOTE, evidence={"webauthn": {"grant_digest": "d"}})}),
        ("grant.reviewed", {"vote": dict(_PLAIN_VOTE, email=["x"])}),
        ("grant.reviewed", {"vote": None}),
        ("grant.reviewed", {"vote": dict(_PLAIN_VOTE, decision="maybe")}),
    ],
)
def test_the_typed_reading_leaves_every_other_shape_to_the_next(kind: str, change: dict[str, Any]) -> None:
    """Anything but the plain shapes is left to the readings after it (which log it with its basis,
    walk its evidence, or refuse it), never logged otherwise."""
    snapshot = {**grant("gr_x", decided_by="alice@example.com"), "vote": _PLAIN_VOTE, **change}
    try:
        made = _typed(kind, snapshot)
    except L.LeafError:
        made = "refused"
    assert made in (None, "refused")


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ({"seq": -1}, "seq"),
        ({"seq": 2**53}, "seq"),
        ({"ts": 1.5}, "ts"),
        ({"seq": True}, "seq"),
        ({"grant_id": ""}, "grant_id"),
        ({"grant_id": None}, "grant_id"),
        ({"data": {"decision": "maybe", "via": "api"}}, "decision"),
        ({"data": {"decision": "approve", "via": "api", "n": 2**53}}, "safe integer range"),
        ({"data": {"decision": "approve", "via": "api", "n": -(2**60)}}, "safe integer range"),
    ],
)
def test_a_vouched_leaf_still_checks_what_no_reading_can_vouch_for(change: dict[str, Any], refused: str):
    """``make_leaf(vouched=True)`` leaves out the actor's and the data's type checks (the caller read
    them with exact types), never the sequence number, the time, the grant id, a decision or the
    range of integers."""
    leaf: dict[str, Any] = {
        "seq": 1,
        "ts": 1_700_000_000_000,
        "actor": {"kind": "person", "email": "alice@example.com"},
        "data": {"decision": "approve", "via": "api"},
        "grant_id": "gr_x",
    }
    parse_leaf(L.make_leaf("grant.reviewed", **leaf, vouched=True))
    with pytest.raises(L.LeafError, match=refused):
        L.make_leaf("grant.reviewed", **{**leaf, **change}, vouched=True)


def test_a_vouched_leaf_walks_the_nested_values_it_is_given():
    """The request, the review and a vote's evidence come from the snapshot as they are: the kind's
    function walks them for floats and unsafe integers when the caller vouches for the rest."""
    with pytest.raises(L.LeafError, match="integers"):
        L.grant_created(
            1, 1, _AGENT, "gr_x", request={"a": [{"b": 1.5}]}, cmd_hash=None, grant_type="once", vouched=True
        )
    with pytest.raises(L.LeafError, match="safe integer range"):
        L.grant_created(
            1,
            1,
            _AGENT,
            "gr_x",
            request={},
            cmd_hash=None,
            grant_type="once",
            review={"n": [2**60]},
            vouched=True,
        )
    with pytest.raises(L.LeafError, match="integers"):
        L.grant_reviewed(
            1, 1, _ALICE, "gr_x", decision="approve", via="link", evidence={"x": 0.5}, vouched=True
        )


def test_a_revoker_that_is_not_a_string_is_logged_as_one_instead_of_stopping_the_log():
    """A snapshot's ``revoked_by`` went to ``_person`` unconverted: a number there raised an
    AttributeError, which the step does not skip, so every later step failed on the same event."""
    snapshot = {**grant("gr_x", status="revoked"), "revoked_by": 12345}
    [(leaf, _, _)] = AL.grant_event_leaves(_event("grant.revoked", snapshot), 1, "admin@example.com")  # type: ignore[arg-type]
    assert parse_leaf(leaf).actor == {"kind": "person", "email": "12345"}


class _Counting:
    """The memory store's tlog, counting lease calls and event reads."""

    def __init__(self, store: MemoryStore):
        self.store = store
        self.leases = 0
        self.reads = 0
        tlog, grants = store.tlog, store.grants
        lease, grant_events = tlog.lease, grants.event_rows_after

        async def counted_lease(*args: Any, **kwargs: Any) -> bool:
            self.leases += 1
            return await lease(*args, **kwargs)

        async def counted_reads(*args: Any, **kwargs: Any) -> Any:
            self.reads += 1
            return await grant_events(*args, **kwargs)

        tlog.lease = counted_lease  # type: ignore[method-assign]
        grants.event_rows_after = counted_reads  # type: ignore[method-assign]


def _log(store: MemoryStore, clock: ManualClock) -> AuditLog:
    """One sequencer (one process's) of the log in ``store``."""
    return AuditLog(store, clock, "test/grantd", "admin@example.com")


async def _a_log_with_one_event() -> tuple[MemoryStore, ManualClock, AuditLog]:
    """A store with a log key and one grant event not integrated yet, and a sequencer of it."""
    store = MemoryStore()
    await store.migrate()
    clock = ManualClock()
    log = _log(store, clock)
    await log.ensure_key()
    await store.grants.create(grant("gr_a"), ["grant.created"])
    return store, clock, log


def test_a_quiet_step_takes_no_lease_and_another_holders_live_lease_costs_one_read():
    async def run() -> None:
        store = MemoryStore()
        await store.migrate()
        clock = ManualClock()
        counts = _Counting(store)
        first = _log(store, clock)
        other = _log(store, clock)
        await first.ensure_key()
        await store.grants.create(grant("gr_a"), ["grant.created"])
        assert await first.step() == 1 and counts.leases == 1
        assert (await store.tlog.latest_checkpoint() or (0, ""))[0] == 1

        # nothing new, everything signed: no lease taken, nothing written, nothing signed
        checkpoints = len(await store.tlog.checkpoints())
        assert await first.step() == 0 and counts.leases == 1
        assert len(await store.tlog.checkpoints()) == checkpoints
        assert (await store.tlog.head())["holder"] == first.holder

        # another process, while the first's lease lasts: one read of the head, no event read
        reads = counts.reads
        await store.grants.create(grant("gr_b"), ["grant.created"])
        assert await other.step() == 0 and counts.reads == reads and counts.leases == 1

        # the holder integrates the new event and signs it, its lease still more than half there
        assert await first.step() == 1 and counts.leases == 1
        assert (await store.tlog.latest_checkpoint() or (0, ""))[0] == 2

        # once half of it is gone, a step with work renews it
        clock.advance(A.LEASE_MS / 2 / 1000 + 0.5)
        await store.grants.create(grant("gr_c"), ["grant.created"])
        assert await first.step() == 1 and counts.leases == 2

        # the lease ran out: the other takes it over when there is work, not before
        clock.advance((A.LEASE_MS + 1) / 1000)
        assert await other.step() == 0 and counts.leases == 2
        await store.grants.create(grant("gr_d"), ["grant.created"])
        assert await other.step() == 1 and counts.leases == 3
        assert (await store.tlog.head())["holder"] == other.holder
        assert (await store.tlog.latest_checkpoint() or (0, ""))[0] == 4

    asyncio.run(run())


def test_leaves_appended_by_a_process_that_died_before_signing_get_signed_by_a_quiet_step():
    """``_signed_size`` is per process: a new sequencer (or one that saw a smaller checkpoint) goes
    through the full step, which signs what is stored but unsigned."""

    async def run() -> None:
        store, clock, dead = await _a_log_with_one_event()

        async def no_signing() -> None:
            return None

        dead.sign_pending = no_signing  # type: ignore[method-assign,assignment]
        assert await dead.step() == 1
        assert await store.tlog.latest_checkpoint() is None
        clock.advance((A.LEASE_MS + 1) / 1000)
        survivor = _log(store, clock)
        assert await survivor.step() == 0  # nothing new to integrate ...
        assert (await store.tlog.latest_checkpoint() or (0, ""))[0] == 1  # ... but the leaf is signed

    asyncio.run(run())


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    value=_json_values, before=st.sampled_from(["", " ", "\n"]), after=st.sampled_from(["", " ", "x", "]"])
)
def test_the_stores_json_reader_answers_as_json_loads(value: Any, before: str, after: str) -> None:
    """``from_json`` (the backends' reader of stored JSON, the scanner called at once) gives what
    ``json.loads`` gives, or raises what it raises, also for text a backend never wrote."""
    text = before + to_json(value) + after
    try:
        expected: Any = ("value", json.loads(text))
    except json.JSONDecodeError as error:
        expected = ("error", str(error))
    try:
        got: Any = ("value", from_json(text))
    except json.JSONDecodeError as error:
        got = ("error", str(error))
    assert repr(got) == repr(expected)  # repr: NaN equals itself there


def _reference(kind: str, seq: int, actor: dict[str, Any], data: dict[str, Any]) -> bytes:
    """A leaf as D14 defines it, encoded by the rfc8785 library: the oracle the fast paths (the
    sequencer's mapping, ``make_leaf``, the C encoder) must match byte for byte (issue 23)."""
    value = {"v": 1, "seq": seq, "ts": 1_700_000_000_000, "kind": kind, "grant_id": "gr_x"}
    return rfc8785.dumps({**value, "actor": actor, "data": data})


# a vote's evidence is logged as it is (not made ``_safe``: an assertion holds strings only)
_leaf_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=12,
)
_AGENT = {"kind": "agent", "agent_id": "agt_1", "email": "bot@agents.example.com"}
_ALICE = {"kind": "person", "email": "alice@example.com"}


@settings(max_examples=300, deadline=None)
@given(
    request=st.dictionaries(st.text(max_size=6), _values, max_size=4),
    review=st.none() | st.dictionaries(st.text(max_size=6), _values, max_size=3),
    expires_at=st.none() | st.integers(0, 2**53 - 1),
    evidence=st.none() | st.dictionaries(st.text(max_size=6), _leaf_values, max_size=3),
    grant_type=st.sampled_from(["once", "timed", "always"]),
)
def test_the_sequencers_leaves_are_the_rfc8785_encoding_of_their_mapping(
    request: dict[str, Any],
    review: dict[str, Any] | None,
    expires_at: int | None,
    evidence: dict[str, Any] | None,
    grant_type: str,
) -> None:
    """Created, vote, approved and consumed events (the grant write path's) on random snapshots,
    floats, unsafe integers and non-ASCII text included: the bytes the sequencer makes are the
    canonical encoding of the leaf the mapping describes, built here without any of its code."""
    request = {**request, "command": ["ls"], "cmd_hash": "sha256:ab"}
    if review is not None:
        review = {**review, "policy_hash": "sha256:cd"}
    snapshot = {
        **grant("gr_x", requester_id="agt_1", grant_type=grant_type),
        "request": request,
        "pinned_review": review,
        "decided_by": "alice@example.com",
        "expires_at": expires_at,
    }
    created = {"request": AL._safe(request), "cmd_hash": "sha256:ab", "grant_type": grant_type}
    if review is not None:
        created |= {"review": AL._safe(review), "policy_hash": "sha256:cd"}
    approved: dict[str, Any] = {"grant_type": grant_type, "decided_by": "alice@example.com"}
    if expires_at is not None:
        approved["expires_at"] = expires_at
    vote = {"email": "alice@example.com", "decision": "approve", "via": "link", "evidence": evidence}
    reviewed: dict[str, Any] = {"decision": "approve", "via": "link"}
    if evidence is not None:
        reviewed["evidence"] = evidence
    consumed = "grant.consumed" if grant_type == "once" else "grant.used"
    cases = [
        ("grant.created", snapshot, "grant.created", _AGENT, created),
        ("grant.approved", snapshot, "grant.approved", _ALICE, approved),
        ("grant.reviewed", {**snapshot, "vote": vote}, "grant.reviewed", _ALICE, reviewed),
        ("grant.consumed", snapshot, consumed, _AGENT, {}),
    ]
    for event, state, kind, actor, data in cases:
        made = AL.grant_event_leaves(_event(event, state), 5, "admin@example.com")  # type: ignore[arg-type]
        assert made == [(_reference(kind, 5, actor, data), "gr_x", state["created_at"])], event


def test_a_dead_sequencers_lease_is_handed_back_and_no_one_elses():
    """``release_for_dead``: the first server process reaped its sequencer process (kill -9): that
    holder's lease is released at once, so the replacement need not wait it out. A live holder (another
    pid, or the same pid on another host) is never released."""

    async def run() -> None:
        store, clock, dead = await _a_log_with_one_event()
        assert await dead.step() == 1
        host, pid, _ = dead.holder.split(":")
        watcher = _log(store, clock)

        assert not await watcher.release_for_dead(int(pid) + 1)  # another process: kept
        assert (await store.tlog.head())["holder"] == dead.holder
        assert await watcher.release_for_dead(int(pid))
        assert (await store.tlog.head())["holder"] is None

        replacement = _log(store, clock)
        replacement.holder = f"{host}:{int(pid) + 7}:00000000"  # a process of its own
        await store.grants.create(grant("gr_b"), ["grant.created"])
        assert await replacement.step() == 1  # at once, its predecessor's lease not waited out
        assert not await watcher.release_for_dead(int(pid))  # the dead one's pid: nothing to release
        assert (await store.tlog.head())["holder"] == replacement.holder

        other_host = _log(store, clock)
        other_host.holder = f"elsewhere-{host}:{pid}:00000000"
        clock.advance((A.LEASE_MS + 1) / 1000)
        await store.grants.create(grant("gr_c"), ["grant.created"])
        assert await other_host.step() == 1
        assert not await watcher.release_for_dead(int(pid))  # the same pid on another host: kept
        assert (await store.tlog.head())["holder"] == other_host.holder

    asyncio.run(run())


def test_a_snapshot_that_cannot_be_read_is_logged_and_skipped_and_the_log_goes_on(tmp_path, grantd_log):
    """Snapshots are decoded one at a time inside the step (``grants.event_rows_after``): one stored
    snapshot that is not JSON costs its own leaf (an error in the log), never the step, so the events
    after it are still integrated and signed, and the next step does not meet it again."""
    from grantd.plugins.storage_sqlite import SQLiteStore

    async def run() -> None:
        store = SQLiteStore(tmp_path / "log.db")
        await store.migrate()
        clock = ManualClock()
        log = _log(store, clock)  # type: ignore[arg-type]
        await log.ensure_key()
        for name in ("gr_a", "gr_b", "gr_c"):
            await store.grants.create(grant(name), ["grant.created"])
        store._db.conn.execute("UPDATE grant_events SET grant_json = '{not json' WHERE grant_id = 'gr_b'")
        store._db.conn.commit()
        assert await log.step() == 2
        assert "cannot become a leaf" in grantd_log.text
        head = await store.tlog.head()
        assert head["size"] == 2 and head["grant_seq"] == await store.grants.last_event_seq()
        logged = [parse_leaf(leaf).grant_id for _, leaf, _ in await store.tlog.entries(0, 2)]
        assert logged == ["gr_a", "gr_c"]
        assert (await store.tlog.latest_checkpoint() or (0, ""))[0] == 2
        assert await log.step() == 0  # nothing left: the unreadable event is behind the position
        store.close()

    asyncio.run(run())

"""The decision log's storage (D14, issue 23): ``store.tlog``, ``store.hosts``, ``store.receipts``.

The pure log (hashing, proofs, checkpoints) is ``grantd.core.tlog``; a store keeps its rows:

- ``tlog_leaves(idx, leaf, leaf_hash, grant_id, grant_created)``: the exact leaf bytes that were
  hashed, and the grant they are about with its ``created_at`` (the key a grant's leaves are found
  by: it grows with time, so a step's index inserts land together at the newest end instead of
  on a random page each, as a key of random grant ids did; issue 23);
- ``tlog_nodes(level, idx, hash)``: every complete subtree's hash above the leaves (docs/audit.md),
  written once; a level-0 node is its leaf's hash, kept once, in ``tlog_leaves.leaf_hash`` (issue 23);
- ``tlog_state``: one row ``{size, grant_seq, event_seq, holder, lease_until}`` — how many leaves
  there are, the last ``grant_events`` and ``audit_events`` sequence numbers they cover, and the
  sequencer lease (one holder integrates at a time, across processes and nodes);
- ``tlog_checkpoints(size, note)``: every signed note, by size;
- ``tlog_keys``: the log's Ed25519 keys (separate from the JWT keys of ``store.keys``);
- ``audit_events``: events of the log that are not grant events (hosts, receipts), written in the
  transaction of their change; the sequencer turns them into leaves with the grant events;
- ``hosts`` (enrolled target hosts) and ``receipts`` (each one once, by its key).

Rules every backend keeps (``grantd.testing.test_tlog`` checks them):

- ``append`` is one transaction: the leaves, their nodes and the new covered sequence numbers
  commit together, and only when the caller still holds the lease **and** the stored size is the
  one the step was computed from (a compare-and-set): a sequencer that lost its lease, or a second
  one computing the same step, writes nothing.
- ``lease`` has exactly one winner among any number of concurrent callers while the lease lasts.
- ``receipts.add`` and ``hosts.add`` record their audit event in the same transaction; a receipt
  key seen before adds nothing (no row, no event).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol, TypedDict, runtime_checkable


class TlogHead(TypedDict):
    size: int  # leaves integrated
    grant_seq: int  # the last grant_events.seq integrated
    event_seq: int  # the last audit_events.seq integrated
    holder: str | None  # the sequencer lease's holder
    lease_until: int  # ms


class TlogKey(TypedDict):
    kid: str  # hex of the note key id (4 bytes)
    name: str  # the key's name (the origin)
    seed: str  # base64 of the Ed25519 seed; "" once retired
    public: str  # base64 of the raw Ed25519 public key
    created_at: int
    retired_at: int | None


class AuditEvent(TypedDict):
    seq: int
    kind: str  # a leaf kind (grantd.core.tlog.leaves.KINDS)
    grant_id: str | None
    actor: dict[str, Any]
    data: dict[str, Any]
    created_at: int


class Host(TypedDict):
    host: str
    public_key: str  # an OpenSSH ssh-ed25519 line
    enrolled_by: str
    created_at: int


# (index, leaf, leaf hash, grant id, the grant's created_at); the last two None for a leaf of no
# grant, the last one None for a leaf whose grant's created_at the sequencer does not have at hand
LeafRow = tuple[int, bytes, bytes, str | None, int | None]
NodeRow = tuple[int, int, bytes]  # (level, index, hash)


@runtime_checkable
class TlogStore(Protocol):
    async def head(self) -> TlogHead: ...

    async def lease(self, holder: str, now: int, ttl_ms: int) -> bool:
        """Take or renew the sequencer lease: True when ``holder`` holds it until ``now + ttl_ms``
        (it was free, expired, or already ``holder``'s). Exactly one concurrent winner."""

    async def release(self, holder: str) -> None:
        """Give the lease up (shutdown) if ``holder`` has it."""

    async def nodes(self, coords: Sequence[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        """The stored node hashes among ``coords`` (missing ones are left out), one query per table:
        level 0 is answered from the leaves' hashes, the levels above from ``tlog_nodes``."""

    async def append(
        self,
        *,
        holder: str,
        now: int,
        expect_size: int,
        leaves: Sequence[LeafRow],
        nodes: Sequence[NodeRow],
        grant_seq: int,
        event_seq: int,
    ) -> bool:
        """Write ``leaves`` and ``nodes`` and set ``size``/``grant_seq``/``event_seq`` in one
        transaction, only if the stored size is ``expect_size`` and ``holder`` holds an unexpired
        lease at ``now``; False (nothing written) otherwise. ``nodes`` may hold the level-0 nodes
        (``integrate``'s rows do): they are the leaves' hashes, which a backend keeps only once,
        with the leaves (``nodes`` answers them from there)."""

    async def entries(self, start: int, end: int) -> list[tuple[int, bytes, bytes]]:
        """``(index, leaf, leaf hash)`` for ``start <= index < end``, in order."""

    async def grant_indexes(self, grant_id: str, below: int, created_at: int | None) -> list[int]:
        """Indexes (< ``below``) of the leaves of one grant, in order: those appended with this
        grant id and ``created_at`` (the grant's own, None when there is no such grant) and those
        appended with this grant id and no ``created_at``."""

    async def add_checkpoint(self, size: int, note: str, now: int) -> bool:
        """Keep a signed note; False if one of that size is already kept (it is not replaced)."""

    async def latest_checkpoint(self) -> tuple[int, str] | None: ...

    async def checkpoints(self) -> list[tuple[int, str]]:
        """Every kept note, oldest (smallest) first."""

    async def keys(self) -> list[TlogKey]:
        """Every log key, newest first."""

    async def add_first_key(self, key: TlogKey) -> bool:
        """Insert ``key`` only if no unretired log key exists; exactly one concurrent winner."""

    async def rotate_key(self, key: TlogKey, now: int) -> list[str]:
        """Retire the active key(s) (seed deleted, public half kept for the vkey list), insert ``key``
        as the active one, record a ``key.rotated`` audit event; one transaction. Retired kids."""

    async def events_after(self, seq: int, limit: int) -> list[AuditEvent]: ...

    async def policy_loaded(self, event: AuditEvent) -> bool:
        """Record ``event`` (a ``policy.loaded`` audit event) unless the newest ``policy.loaded`` event
        carries the same ``data.policy_hash``; one transaction, one winner among processes and nodes
        starting together. True when it was recorded."""


@runtime_checkable
class HostStore(Protocol):
    async def add(self, host: Host, actor: dict[str, str]) -> Host:
        """Enrol (``actor``: the leaf actor of who enrolled it); ``Conflict("host")`` if the name is enrolled. Records ``host.enrolled`` in the same
        transaction."""

    async def get(self, host: str) -> Host | None: ...


@runtime_checkable
class ReceiptStore(Protocol):
    async def add(self, key: str, event: AuditEvent) -> bool:
        """True and one ``exec.receipt`` audit event (``event``; its ``seq`` is ignored) if ``key``
        is new; False and nothing written for a key seen before. One transaction."""


def delegation_event(kind: str, delegation: dict[str, Any], by: str, now: int) -> AuditEvent:
    """The audit event a delegation change records in its own transaction (``delegation.created`` by
    its delegator, ``delegation.revoked`` by ``by``): shared by every backend, so the leaf is the same."""
    details = {
        k: delegation.get(k)
        for k in ("delegator", "delegate", "audience", "scopes", "approval", "expires_at")
    }
    data: dict[str, Any] = {"delegation_id": delegation["id"]}
    if kind == "delegation.created":
        data["details"] = details
    return AuditEvent(
        seq=0, kind=kind, grant_id=None, actor={"kind": "person", "email": str(by)}, data=data, created_at=now
    )


def credential_event(credential: dict[str, Any], email: str | None) -> AuditEvent:
    """``person.credential_added``, recorded in the transaction that stores the passkey: its public key
    in the log lets an auditor check a passkey vote offline (D14)."""
    return AuditEvent(
        seq=0,
        kind="person.credential_added",
        grant_id=None,
        actor={"kind": "person", "email": str(email or ""), "pid": str(credential["person_id"])},
        data={
            "email": str(email or ""),
            "credential_id": str(credential["credential_id"]),
            "public_key": str(credential["public_key"]),
            "pid": str(credential["person_id"]),
        },
        created_at=int(credential["created_at"]),
    )


def jwt_key_event(key: dict[str, Any], now: int) -> AuditEvent:
    """``key.rotated`` (purpose ``jwt``), recorded in the transaction of ``keys.rotate``."""
    return AuditEvent(
        seq=0,
        kind="key.rotated",
        grant_id=None,
        actor={"kind": "system"},
        data={
            "purpose": "jwt",
            "kid": str(key["kid"]),
            "alg": str(key["alg"]),
            "public_key": json.dumps(key["public_jwk"], sort_keys=True, separators=(",", ":")),
        },
        created_at=now,
    )


def agent_event(kind: str, agent: dict[str, Any], by: str | None, now: int) -> AuditEvent:
    """``agent.enrolled`` / ``agent.key_replaced`` / ``agent.disabled`` (deleted agents too), recorded in
    the transaction of the change; ``by`` is the e-mail of who acted (None: not known to the caller)."""
    data: dict[str, Any] = {"agent_id": str(agent["agent_id"])}
    if kind == "agent.enrolled":
        data.update(
            email=str(agent["email"]),
            public_key=str(agent["public_key"]),
            owner=str(agent["owner"]),
            approver=str(agent["approver"]),
        )
    elif kind == "agent.key_replaced":
        data["public_key"] = str(agent["public_key"])
    actor = {"kind": "person", "email": by} if by else {"kind": "system"}
    return AuditEvent(seq=0, kind=kind, grant_id=None, actor=actor, data=data, created_at=now)

"""The decision log in the server (D14, issue 23): the sequencer, the log key, and what the audit
routes read. The pure log (leaves, hashing, proofs, notes) is ``grantd.core.tlog``; the rows are
``store.tlog`` (grantd.store.tlog).

The sequencer runs in every server process as a background task (like the expiry sweep); only the
holder of the store's lease works. One step: take or renew the lease, read the grant events and the
audit events after the last ones integrated, turn them into leaves in a deterministic order
(``_merge``), append the leaves and their nodes **and** the new positions in one transaction (a
compare-and-set on the size, so a second sequencer or a lost lease writes nothing), then sign a
checkpoint only after ``next_checkpoint`` proved from the committed nodes that it extends the last
one signed. A crash before the append leaves the events where they were: the next winner integrates
them again, identically. A crash after it leaves leaves without a checkpoint: the next step signs it.

The grant write path does not change: grant events are written in the grant's own transaction
already (``grant_events``); hosts and receipts write their ``audit_events`` row in theirs.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import logging
import os
import secrets
import socket
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from grantd.core import policy
from grantd.core.errors import Problem, bad_request, conflict, forbidden, not_found, unauthorized
from grantd.core.principals import Kind, Principal
from grantd.core.review import ReviewConfig
from grantd.core.review.evaluate import loaded_policy_hash
from grantd.core.tlog import leaves as L
from grantd.core.tlog.merkle import (
    CompactRange,
    NodeReader,
    ProofError,
    consistency_ranges,
    inclusion_proof,
    inclusion_ranges,
    range_nodes,
    stored_coords,
    stored_nodes,
    with_low_levels,
)
from grantd.core.tlog.merkle import consistency_proof as make_consistency_proof
from grantd.core.tlog.note import (
    Checkpoint,
    InconsistentCheckpoint,
    Signer,
    Verifier,
    open_checkpoint,
    parse_checkpoint,
    parse_note,
)
from grantd.core.tlog.receipts import BadReceipt, UnknownHost, check_host_name, receipt_host, verify_receipt
from grantd.core.tlog.sequencer import integrate, next_checkpoint
from grantd.services.audit_leaves import audit_event_leaf, row_leaves
from grantd.sshkeys import KeyFormatError, parse_public_key
from grantd.store import Conflict, Store
from grantd.store.tlog import AuditEvent, Host, TlogKey

if TYPE_CHECKING:
    from grantd.services.context import Services

log = logging.getLogger("grantd.audit")

# Events read per source per step (a full batch is followed by the next at once). Above what one
# interval brings under load (approve: two events each, ~2,000 a second), so that a busy step is
# not split into a full one and a small one paying the step's fixed costs again (issue 23).
BATCH = 4000
LEASE_MS = 5000
YIELD_EVERY = 128  # events encoded between two yields to the event loop (p99 of requests under load)
MAX_ENTRIES = 1000  # D14: at most this many entries per answer


def origin_of(issuer: str, configured: str | None) -> str:
    """``[audit] origin``, default the issuer's host (with its port, if any) + ``/grantd`` (D14)."""
    if configured:
        return configured
    return f"{urlsplit(issuer).netloc}/grantd"


def _merge(
    grant_times: Sequence[int], audit_times: Sequence[int], full: tuple[bool, bool]
) -> list[tuple[int, int]]:
    """Both sources in one deterministic order that keeps each source's own sequence order: a merge
    by (time, source) of the two heads, as ``(source, position)`` pairs (source 0 the grant events,
    1 the audit events; ties: grant events first), from each source's event times in sequence
    order. When a source filled its batch, the merge stops where that source runs out (it may have
    more that come before the other's rest); the rest follows next step, in the same order. One
    source alone (the common case: grant writes) is taken as it is."""
    a, b = grant_times, audit_times
    if not b:
        return [(0, i) for i in range(len(a))]
    if not a:
        return [(1, j) for j in range(len(b))]
    merged: list[tuple[int, int]] = []
    i = j = 0
    while i < len(a) or j < len(b):
        if i == len(a):
            if full[0]:
                break
            merged.append((1, j))
            j += 1
        elif j == len(b):
            if full[1]:
                break
            merged.append((0, i))
            i += 1
        elif a[i] <= b[j]:
            merged.append((0, i))
            i += 1
        else:
            merged.append((1, j))
            j += 1
    return merged


# -- the log --------------------------------------------------------------------------------------------

_pauses = 0  # steps running in this process with the collector paused (each AuditLog's, interleaved)
_paused_here = False  # whether a step paused it (it stays off if it was off already)


@contextlib.contextmanager
def _collector_paused() -> Any:
    """A step makes a few container objects per event (the decoded snapshot, the leaf's parts, the
    rows), all freed by reference counting, none in a cycle; but each 700 of them start a young
    collection, and the rows a step holds until its append survive into older generations, which
    are then walked again: 5 % of the sequencer's CPU in the server (py-spy, issue 23). So the cycle
    collector is off while a step runs; garbage with cycles made meanwhile (by requests between a
    step's yields, when the log runs inline) is collected after it."""
    global _pauses, _paused_here
    if _pauses == 0 and gc.isenabled():
        gc.disable()
        _paused_here = True
    _pauses += 1
    try:
        yield
    finally:
        _pauses -= 1
        if _pauses == 0 and _paused_here:
            _paused_here = False
            gc.enable()


def _key_record(signer: Signer, now: int) -> TlogKey:
    verifier = signer.verifier
    return TlogKey(
        kid=verifier.key_id.hex(),
        name=signer.name,
        seed=base64.b64encode(signer.seed).decode(),
        public=base64.b64encode(verifier.public).decode(),
        created_at=now,
        retired_at=None,
    )


class AuditLog:
    """One process's view of the log: its sequencer and the readers the routes use."""

    def __init__(
        self, store: Store, clock: Any, origin: str, management_identity: str, interval_ms: int = 500
    ):
        self.store = store
        self.clock = clock
        self.origin = origin
        self.management_identity = management_identity
        self.interval = interval_ms / 1000
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._signer: Signer | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._signed_size = -1  # the newest signed size this process saw (-1: none yet; see ``step``)
        self._last_signed: tuple[str, Checkpoint] | None = None  # the last note this process stored

    # keys
    async def ensure_key(self) -> None:
        """Create the log key on first start (exactly one of several processes inserts it)."""
        if not any(k["retired_at"] is None for k in await self.store.tlog.keys()):
            await self.store.tlog.add_first_key(
                _key_record(Signer.generate(self.origin), self.clock.now_ms())
            )

    async def log_policies(self, review: ReviewConfig | None) -> bool:
        """``policy.loaded`` (D14) when the approval policies this process runs with are not the ones
        the log recorded last (at start; one winner among processes starting together)."""
        digest, ids = loaded_policy_hash(review)
        event = AuditEvent(
            seq=0,
            kind="policy.loaded",
            grant_id=None,
            actor={"kind": "system"},
            data={"policy_hash": digest, "policy_ids": ids},
            created_at=self.clock.now_ms(),
        )
        return await self.store.tlog.policy_loaded(event)

    async def rotate_key(self) -> str:
        """A new log key signs from now on; the old public key stays listed (``/api/audit/key``)."""
        signer = Signer.generate(self.origin)
        await self.store.tlog.rotate_key(_key_record(signer, self.clock.now_ms()), self.clock.now_ms())
        self._signer = None
        return signer.verifier.vkey

    async def signer(self) -> Signer:
        keys = [k for k in await self.store.tlog.keys() if k["retired_at"] is None and k["seed"]]
        if not keys:
            await self.ensure_key()
            keys = [k for k in await self.store.tlog.keys() if k["retired_at"] is None and k["seed"]]
        key = keys[0]
        if self._signer is None or self._signer.verifier.key_id.hex() != key["kid"]:
            self._signer = Signer.from_seed(key["name"], base64.b64decode(key["seed"]))
        return self._signer

    async def verifiers(self) -> list[Verifier]:
        return [Verifier(k["name"], base64.b64decode(k["public"])) for k in await self.store.tlog.keys()]

    async def vkeys(self) -> list[str]:
        return [v.vkey for v in await self.verifiers()]

    # nodes
    async def _reader(self, ranges: Sequence[tuple[int, int]]) -> NodeReader:
        """The stored nodes the ranges need, read at once (the levels a store does not keep hashed
        again from their leaf hashes): for the sequencer's compact range, checkpoints and proofs."""
        coords = sorted({c for a, b in ranges for c in range_nodes(a, b)})
        found = with_low_levels(await self.store.tlog.nodes(stored_coords(coords)), coords)
        return lambda wanted: found

    # the sequencer
    async def step(self) -> int:
        """One integration (if this process holds the lease); the number of leaves added. Python's
        cycle collector is paused for the step (``_collector_paused``)."""
        with _collector_paused():
            return await self._step()

    async def _step(self) -> int:
        """``step`` itself, the collector already paused.

        What a step costs when there is nothing to do (issue 23: a quiet server steps twice a
        second): a process that sees another's live lease reads one row; the holder (or anyone,
        once the lease ran out) reads the head and the two event sources, and takes or renews the
        lease (a write, once half of it is gone) only when there are events to integrate or leaves
        to sign. Reading before taking the lease is safe: ``append`` writes only for the size it was computed from and
        only while its caller holds the lease."""
        now = self.clock.now_ms()
        head = await self.store.tlog.head()
        if head["holder"] not in (None, self.holder) and head["lease_until"] > now:
            return 0  # another sequencer holds the lease
        # the grant events' snapshots stay JSON text until their turn: decoded one at a time, each
        # is dropped once its leaves are made, so a step's thousands of events never pile up decoded
        # (fresh, cold memory for every one of them: ~2.5 µs more an event, issue 23)
        grant_rows = await self.store.grants.event_rows_after(head["grant_seq"], BATCH)
        audit_events = await self.store.tlog.events_after(head["event_seq"], BATCH)
        if not grant_rows and not audit_events:
            if head["size"] > self._signed_size:  # signed by another process, or not signed yet?
                latest = await self.store.tlog.latest_checkpoint()
                self._signed_size = max(self._signed_size, latest[0] if latest else -1)
            if head["size"] <= self._signed_size:
                return 0  # nothing new, everything signed: no write at all
        renew = head["holder"] != self.holder or head["lease_until"] - now < LEASE_MS // 2
        if renew and not await self.store.tlog.lease(self.holder, now, LEASE_MS):
            return 0  # (a holder renews once half its lease is gone, not at every step: one write less)
        order = _merge(
            [int(row[4]) for row in grant_rows],
            [int(e["created_at"]) for e in audit_events],
            (len(grant_rows) >= BATCH, len(audit_events) >= BATCH),
        )
        added = 0
        if order:
            size = head["size"]
            raw: list[tuple[bytes, str | None, int | None]] = []
            grant_seq, event_seq = head["grant_seq"], head["event_seq"]
            mi = self.management_identity
            for number, (source, position) in enumerate(order):
                if number and number % YIELD_EVERY == 0:
                    await asyncio.sleep(0)  # encoding is CPU work on the event loop: let requests in between
                # each source's events come in ascending seq order: the last one read is the position
                try:
                    if source == 0:
                        row = grant_rows[position]
                        grant_seq = row[0]
                        raw += row_leaves(row, size + len(raw) + 1, mi)
                    else:
                        event = audit_events[position]
                        event_seq = event["seq"]
                        raw.append(audit_event_leaf(event, size + len(raw) + 1))
                except (L.LeafError, KeyError, TypeError, ValueError) as error:
                    log.error(
                        "decision log: event %s/%d cannot become a leaf (%s); not logged",
                        "grant_events" if source == 0 else "audit_events",
                        grant_seq if source == 0 else event_seq,
                        error,
                    )
            compact = CompactRange.load(size, await self._reader([(0, size)] if size else []))
            result = integrate(compact, [made[0] for made in raw])
            rows = [
                (i, leaf, digest, gid, created)
                for i, ((leaf, gid, created), digest) in enumerate(zip(raw, result.hashes, strict=True), size)
            ]
            if not await self.store.tlog.append(
                holder=self.holder,
                now=self.clock.now_ms(),
                expect_size=size,
                leaves=rows,
                nodes=stored_nodes(result.node_rows),
                grant_seq=grant_seq,
                event_seq=event_seq,
            ):
                return 0  # another sequencer moved first, or the lease ran out: nothing written
            added = len(rows)
        await self.sign_pending()
        return added

    async def sign_pending(self) -> str | None:
        """Sign a checkpoint of the stored size if the newest signed one is smaller (or none exists),
        only when it extends the last signed one; None if nothing was signed."""
        head = await self.store.tlog.head()
        latest = await self.store.tlog.latest_checkpoint()
        if latest is not None and latest[0] >= head["size"]:
            self._signed_size = max(self._signed_size, latest[0])
            return None
        signer = await self.signer()
        previous: Checkpoint | None = None
        if latest is not None and self._last_signed is not None and self._last_signed[0] == latest[1]:
            previous = self._last_signed[1]  # the very note this process signed: no need to verify it
        elif latest is not None:
            previous = open_checkpoint(latest[1], await self.verifiers())
        size = head["size"]
        ranges = ([(0, size)] if size else []) + (consistency_ranges(previous.size, size) if previous else [])
        read = await self._reader(ranges)
        try:
            note = next_checkpoint(signer, size, previous, read)
        except (InconsistentCheckpoint, ProofError) as error:
            log.error("decision log: not signing a checkpoint of size %d: %s", size, error)
            return None
        if await self.store.tlog.add_checkpoint(size, note, self.clock.now_ms()):
            self._last_signed = (note, parse_checkpoint(parse_note(note)[0]))
        self._signed_size = max(self._signed_size, size)
        return note

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="audit-sequencer")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        try:
            await self.store.tlog.release(self.holder)
        except Exception:
            log.debug("decision log: could not release the lease", exc_info=True)

    async def release_for_dead(self, pid: int) -> bool:
        """Give up the lease held by a process of this host that is known to be dead (``pid``: a
        server process running the log inline, or the sequencer process, that its parent has just
        reaped): another takes over at its next step instead of after up to ``LEASE_MS``. A holder's id is ``host:pid:nonce``; a holder of another host or pid keeps its
        lease. Called in the same loop turn as the reaping, before any process could have reused the
        pid and taken the lease (a replacement needs hundreds of ms to start). Were a live holder ever
        released, it would cost a lease change, never a fork: ``append`` writes only for the holder
        and size it was computed from."""
        head = await self.store.tlog.head()
        holder = head["holder"]
        if holder is None or not holder.startswith(f"{socket.gethostname()}:{pid}:"):
            return False
        await self.store.tlog.release(holder)
        return True

    async def _run(self) -> None:
        while True:
            try:
                added = await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("decision log: sequencer step failed; retrying")
                added = 0
            if added < BATCH:
                await asyncio.sleep(self.interval)

    # readers for the routes
    async def checkpoint(self) -> str | None:
        latest = await self.store.tlog.latest_checkpoint()
        return latest[1] if latest else None

    async def checkpoint_size(self) -> int:
        latest = await self.store.tlog.latest_checkpoint()
        return latest[0] if latest else 0

    async def entries(self, start: int, end: int) -> list[tuple[int, bytes, bytes]]:
        return await self.store.tlog.entries(start, min(end, start + MAX_ENTRIES))

    async def inclusion(self, index: int, size: int) -> list[bytes]:
        read = await self._reader(inclusion_ranges(index, size))
        return inclusion_proof(index, size, read)

    async def consistency(self, old: int, new: int) -> list[bytes]:
        read = await self._reader(consistency_ranges(old, new))
        return make_consistency_proof(old, new, read)

    async def grant_entries(
        self, grant_id: str, created_at: int | None
    ) -> tuple[str | None, list[dict[str, Any]]]:
        """The leaves of a grant (``created_at``: its own, None when there is no such grant) with
        their proofs against the latest checkpoint."""
        latest = await self.store.tlog.latest_checkpoint()
        if latest is None:
            return None, []
        size, note = latest
        found = []
        for index in await self.store.tlog.grant_indexes(grant_id, size, created_at):
            leaf = (await self.store.tlog.entries(index, index + 1))[0][1]
            proof = await self.inclusion(index, size)
            found.append(
                {
                    "index": index,
                    "leaf": leaf.decode(),
                    "proof": {
                        "leaf_index": index,
                        "tree_size": size,
                        "hashes": [base64.b64encode(h).decode() for h in proof],
                    },
                }
            )
        return note, found


# -- what the routes ask (parsing, who may, answers) ----------------------------------------------------


def _number(args: Mapping[str, Any], name: str, *, required: bool = True, default: int = 0) -> int:
    values = args.get(name)
    value = values[0] if isinstance(values, list) and values else values
    if value is None or value == "":
        if required:
            raise bad_request(f"{name} is required", field=name)
        return default
    text = str(value)
    if not text.isascii() or not text.isdigit() or len(text) > 15:
        raise bad_request(f"{name} must be a non-negative integer", field=name)
    return int(text)


def log_of(services: Services) -> AuditLog:
    if services.audit is None:
        raise Problem(503, "the decision log is not open")
    return services.audit


async def read_entries(
    services: Services, principal: Principal | None, args: Mapping[str, Any]
) -> dict[str, Any]:
    policy.may_read_audit_log(principal, auditor_emails(services))
    start = _number(args, "start")
    head = await services.store.tlog.head()
    end = _number(args, "end", required=False, default=min(head["size"], start + MAX_ENTRIES))
    if end < start:
        raise bad_request("end must not be below start", field="end")
    rows = await log_of(services).entries(start, end)
    return {
        "entries": [
            {"index": i, "leaf": leaf.decode(), "leaf_hash": base64.b64encode(digest).decode()}
            for i, leaf, digest in rows
        ]
    }


async def _signed_size(services: Services) -> int:
    return await log_of(services).checkpoint_size()


async def read_inclusion(
    services: Services, principal: Principal | None, args: Mapping[str, Any]
) -> dict[str, Any]:
    policy.may_read_audit_log(principal, auditor_emails(services))
    index, size = _number(args, "index"), _number(args, "size")
    if index >= size:
        raise bad_request("index must be below size", field="index")
    if size > await _signed_size(services):
        raise bad_request("size is larger than the newest signed checkpoint", field="size")
    proof = await log_of(services).inclusion(index, size)
    return {"leaf_index": index, "tree_size": size, "hashes": [base64.b64encode(h).decode() for h in proof]}


async def read_consistency(
    services: Services, principal: Principal | None, args: Mapping[str, Any]
) -> dict[str, Any]:
    policy.may_read_audit_log(principal, auditor_emails(services))
    old, new = _number(args, "from"), _number(args, "to")
    if old > new:
        raise bad_request("from must not be above to", field="from")
    if new > await _signed_size(services):
        raise bad_request("to is larger than the newest signed checkpoint", field="to")
    proof = await log_of(services).consistency(old, new)
    return {"hashes": [base64.b64encode(h).decode() for h in proof]}


async def read_grant(services: Services, principal: Principal | None, grant_id: str) -> dict[str, Any]:
    principal = policy.require(principal)
    auditors = auditor_emails(services)
    grant = (
        await services.store.grants.get(grant_id) if len(grant_id) <= 200 and "\x00" not in grant_id else None
    )
    if not policy.may_read_grant_audit(principal, grant, auditors):
        raise forbidden("you may read the log of your own grants only")
    note, entries = await log_of(services).grant_entries(grant_id, grant["created_at"] if grant else None)
    if grant is None and not entries:
        raise not_found("no such grant")
    return {"grant_id": grant_id, "checkpoint": note or "", "entries": entries}


def auditor_emails(services: Services) -> frozenset[str]:
    return frozenset(e.lower() for e in services.config.admin.auditors)


def _actor_of(principal: Principal) -> dict[str, str]:
    if principal.kind is Kind.MANAGEMENT:
        return {"kind": "management", "email": principal.email}
    return {"kind": "person", "email": principal.email}


async def enrol_host(
    services: Services, principal: Principal | None, body: Mapping[str, Any]
) -> dict[str, Any]:
    """``POST /api/hosts {host, publicKey}`` (D14): an administrator enrols a target host's receipt key."""
    principal = policy.may_enrol_hosts(principal)
    host = body.get("host")
    try:
        name = check_host_name(host)  # type: ignore[arg-type]
    except BadReceipt as error:
        raise bad_request(str(error), field="host") from None
    try:
        _, line, _ = parse_public_key(body.get("publicKey"))  # type: ignore[arg-type]
    except KeyFormatError as error:
        raise bad_request(str(error), field="publicKey") from None
    record = Host(host=name, public_key=line, enrolled_by=principal.email, created_at=services.clock.now_ms())
    try:
        await services.store.hosts.add(record, _actor_of(principal))
    except Conflict:
        raise conflict(f"host {name} is already enrolled") from None
    return {"host": name, "publicKey": line, "created_at": record["created_at"]}


async def add_receipt(services: Services, body: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """``POST /api/audit/receipts {receipt}`` (D14): a host's signed receipt becomes a leaf, once.
    Unknown host → 403; a receipt that does not verify → 401; a grant this server never had → 404;
    the same receipt again → not new."""
    token = body.get("receipt")
    if not isinstance(token, str) or not token:
        raise bad_request("receipt must be a compact JWS", field="receipt")
    try:
        host = receipt_host(token)
    except BadReceipt as error:
        raise unauthorized(str(error)) from None
    enrolled = await services.store.hosts.get(host)
    try:
        receipt = verify_receipt(
            token, services.issuer, lambda name: enrolled["public_key"] if enrolled else None
        )
    except UnknownHost as error:
        raise forbidden(str(error)) from None
    except BadReceipt as error:
        raise unauthorized(str(error)) from None
    claims = receipt.claims
    if await services.store.grants.get(str(claims["grant_id"])) is None:
        # D2: an unknown grant is 404. A receipt names a grant of this issuer; one for a grant that
        # never existed here is refused rather than logged, so an enrolled host cannot fill the log
        # with runs of grants nobody asked for (elevate drops a receipt refused for good)
        raise not_found("grant not found")
    data: dict[str, Any] = {
        "receipt": token,
        "host": host,
        "authz_jti": str(claims["authz_jti"]),
        "result": receipt.result,
    }
    if isinstance(claims.get("exit_code"), int):
        data["exit_code"] = claims["exit_code"]
    event = AuditEvent(
        seq=0,
        kind="exec.receipt",
        grant_id=str(claims["grant_id"]),
        actor={"kind": "host", "host": host},
        data=data,
        created_at=services.clock.now_ms(),
    )
    new = await services.store.receipts.add("\x1f".join(receipt.key), event)
    return {"grant_id": claims["grant_id"], "host": host, "result": receipt.result, "new": new}, new

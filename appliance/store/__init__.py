"""The storage contract. Storage plugins implement it; only their code touches SQL.

A ``Store`` is split by record kind: ``store.keys``, ``store.agents``, ``store.challenges``,
``store.grants`` (with their events), ``store.delegations``, ``store.rates`` (abuse-limit
counters), and for people (``grantd.store.people``) ``store.people``, ``store.credentials``
(passkeys), ``store.sessions``, ``store.registrations`` (registration URLs) and
``store.webauthn_challenges``, and for OAuth (``grantd.store.oauth``) ``store.onetime``
(codes, flow states, used assertion ids), ``store.refresh_tokens``, ``store.device_codes`` and
``store.consents``.
Records are the typed dictionaries of ``grantd.store.records`` (JSON-ready values).

What every backend must guarantee (``grantd.testing`` checks it; run it against a new backend):

- **One call, one transaction.** Each method is atomic: it happens completely or not at all, and a
  concurrent reader never sees half of it.
- **Exactly one winner.** Where a method is a conditional change (``challenges.take``,
  ``grants.update_if``, ``delegations.revoke``, ``keys.add_first``, ``registrations.complete``,
  ``credentials.use``, ``credentials.delete``, ``webauthn_challenges.take``), any number of concurrent
  callers in any number of processes or nodes may call it for the same record: exactly one gets the
  record back, the others get ``None``. Decide this inside the database (a conditional UPDATE or
  DELETE and its row count), never in process memory.
- **Events with their change.** Every grant change records its events in the same transaction
  (``grant_events``), numbered by a sequence that only grows in commit order, so stream readers of
  every process see every change once, in order.
- **Rules are handed in, not re-derived.** Lapse (when a grant or delegation reads as expired) comes
  as a :class:`grantd.core.lifecycle.Lapse`: ``{stored_status: (column, cutoff)}``. A backend
  translates it mechanically (``status = S AND column IS NOT NULL AND column <= cutoff``); the
  column names are those of the records. Who may see what comes as principal facts (requester ids).
- **Exactly one increment.** ``rates.hit`` adds exactly one to a counter per call, however many
  callers in however many processes or nodes hit the same counter at once: N concurrent hits
  return the counts 1..N, each once (an upsert that returns the new value, decided in the database).
- **Paging** is newest first by ``(created_at, id)``; ``after`` is the last item of the previous
  page (``grantd.core.paging.Cursor``). A list call returns ``(rows, has_more)``.
- **Uniqueness** violations raise :class:`Conflict` naming the field.
- All methods are coroutines, so a network database does not block the event loop.

What backends share lives here once, not in each backend: ``grantd.store.rows`` (record
conversion, JSON, case folding, pages), ``grantd.store.sql`` (the lapse clauses, the paging
condition), ``grantd.store.oauth`` (``union_scope``, ``was_live``), ``grantd.store.files``
(private files, D12) and ``grantd.store.migrations`` (numbered ``.sql`` files).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from grantd.core.lifecycle import Lapse
from grantd.core.paging import PageRequest
from grantd.store.ciba import CibaStore
from grantd.store.notify import NotifyStore, OutboxRow
from grantd.store.oauth import ConsentStore, DeviceCodeStore, OneTimeStore, RefreshTokenStore
from grantd.store.people import (
    CredentialStore,
    PersonStore,
    RegistrationStore,
    SessionStore,
    WebAuthnChallengeStore,
)
from grantd.store.records import (
    Agent,
    Delegation,
    Grant,
    GrantEvent,
    GrantEventRow,
    GrantReview,
    GrantView,
    ReviewGroup,
    SigningKey,
    Vote,
)
from grantd.store.tlog import HostStore, ReceiptStore, TlogStore


class StoreError(Exception):
    """Base of storage errors the services translate into HTTP answers."""


class Conflict(StoreError):
    """A uniqueness rule was violated; ``field`` names what collided (``email``, ``publicKey``,
    ``owner``, ``approver``, ``id``)."""

    def __init__(self, field: str):
        self.field = field
        super().__init__(f"duplicate {field}")


class LimitReached(StoreError):
    """A count bound was reached inside the transaction (``agents_per_person``,
    ``pending_per_owner``): nothing was written."""

    def __init__(self, limit: str, bound: int):
        self.limit = limit
        self.bound = bound
        super().__init__(f"{limit} reached ({bound})")


@dataclass(frozen=True)
class PendingBound:
    """D11 and D12: at most ``per_owner`` pending grants (not lapsed under ``lapse``) across the
    agents of one owner (the owner of the requesting agent: the same ``owner_id``, or for an owner
    bound to no person the same ``owner`` e-mail), and at most ``per_agent`` of the requesting
    agent itself. 0 turns either off."""

    per_owner: int
    lapse: Lapse
    per_agent: int = 0

    @property
    def counted(self) -> bool:
        return self.per_owner > 0 or self.per_agent > 0

    def check(self, owners: int, agents: int) -> None:
        """``LimitReached`` when the pending grants counted (the owner's agents', the agent's own)
        leave no place; the agent's bound is named first."""
        if self.per_agent > 0 and agents >= self.per_agent:
            raise LimitReached("pending_per_agent", self.per_agent)
        if self.per_owner > 0 and owners >= self.per_owner:
            raise LimitReached("pending_per_owner", self.per_owner)


@runtime_checkable
class KeyStore(Protocol):
    """Signing keys: ``SigningKey`` records. Keys of several algorithms coexist (D3: id tokens are
    EdDSA by default, ES256 or RS256 when a client asks); each algorithm has its own active key,
    the newest unretired key with that ``alg``."""

    async def all(self) -> list[SigningKey]:
        """Every key (every algorithm), newest first."""

    async def active_kid(self, alg: str = "EdDSA") -> str | None:
        """Kid of the key of algorithm ``alg`` that signs now, or None."""

    async def add_first(self, key: SigningKey) -> bool:
        """Insert ``key`` only if no unretired key of its algorithm (``key["alg"]``) exists (several
        processes start at once: exactly one inserts). True if this call inserted it."""

    async def rotate(self, key: SigningKey, now: int) -> list[str]:
        """Retire every active key of ``key["alg"]`` at ``now`` **and delete its private key**
        (``private_pem`` becomes ""), insert ``key`` as the active one of that algorithm; return the
        retired kids. Keys of other algorithms are untouched. One transaction."""

    async def drop_retired_before(self, cutoff: int) -> int:
        """Delete keys retired before ``cutoff`` (ms); return how many."""

    async def revoke(self, kid: str, now: int) -> bool:
        """Stop publishing a key at once: delete it (active or retired). True if it existed."""


@runtime_checkable
class AgentStore(Protocol):
    """Agents: ``Agent`` records. E-mails are unique across agents and persons (D11)."""

    async def create(
        self, agent: Agent, reserved_emails: frozenset[str], *, max_per_owner: int = 0, by: str | None = None
    ) -> Agent:
        """Insert (recording ``agent.enrolled`` by ``by``, grantd.store.tlog, in the same transaction).
        Raise ``Conflict("email")`` if the e-mail is another agent's, is in
        ``reserved_emails`` (administrators, the management identity), is a person's
        (``store.people``) or is used as a person's (any agent's owner or approver, any
        delegation's delegator); ``Conflict("publicKey")`` for a
        key already enrolled; ``Conflict("owner")``/``Conflict("approver")`` if that e-mail is an
        agent's. ``owner_id``/``approver_id`` are set here (the caller's values are ignored): the
        ``person_id`` of the person with that e-mail, else None (D11). With ``max_per_owner`` > 0,
        ``LimitReached("agents_per_person")`` if the owner (by ``owner_id``, or by ``owner`` e-mail
        when it names no person) already has that many agents. All checked in the transaction of
        the insert, so concurrent enrolments in any process cannot pass the bound together."""

    async def get(self, ident: str) -> Agent | None:
        """By ``agent_id`` or (lowercased) e-mail."""

    async def get_by_id(self, agent_id: str) -> Agent | None: ...

    async def list(self, page: PageRequest) -> tuple[list[Agent], bool]:
        """Newest first by (created_at, agent_id)."""

    async def update(self, agent_id: str, changes: dict[str, Any], *, by: str | None = None) -> Agent | None:
        """Apply ``changes`` (name, owner, approver, public_key, key_id, updated_at, and ``status:
        "active"`` to re-enable a disabled agent — disabling is ``retire``). A new
        ``public_key`` increments ``key_generation`` in the same write (tokens issued under the old
        key stop working) and records ``agent.key_replaced`` by ``by``. Raise ``Conflict`` as ``create`` does for owner/approver/publicKey.
        None if the agent is gone."""

    async def retire(
        self, agent_id: str, *, delete: bool, by: str, reason: str, now: int, lapse: Lapse
    ) -> tuple[Agent, builtins.list[Grant]] | None:
        """Disable (``status = 'disabled'``, ``key_generation`` incremented so that no token issued
        before comes back if it is re-enabled) or delete the agent and, in the same transaction:
        revoke its pending and approved grants that have not lapsed (``status = 'revoked'``,
        ``revoked_by = by``, ``revoked_at = now``, ``decision_reason = reason``, one
        ``grant.revoked`` event each), revoke active delegations whose delegate is its e-mail
        (``revoked_by = by``), and delete its challenges. A deleted agent's grants stay, under its
        old ``requester_id``. Returns the agent as it was before and the revoked grants; None if
        the agent does not exist (or is already disabled and ``delete`` is false: nothing to do)."""

    async def decidable_by(self, person_id: str) -> builtins.list[str]:
        """Ids of the agents whose ``owner_id`` or ``approver_id`` is ``person_id`` (D11: bound by id,
        never by the e-mail)."""


@runtime_checkable
class ChallengeStore(Protocol):
    async def create(self, challenge: str, agent_id: str, expires_at: int, now: int) -> None:
        """Store a challenge (and drop challenges that expired before ``now``)."""

    async def take(self, challenge: str, agent_id: str) -> int | None:
        """Delete the challenge and return its expiry (ms); None if unknown, bound to another agent
        or already taken. Exactly one of any number of concurrent takers gets it."""

    async def create_for(self, challenge: str, ident: str, expires_at: int, now: int) -> str | None:
        """``create`` for the agent ``agents.get(ident)`` finds, only while it is active, in one
        statement where the backend can (sign-in, issue 27): that agent's id, or None when there is
        no such agent or it is not active (nothing is stored)."""

    async def take_for(self, challenge: str, ident: str) -> tuple[Agent, int] | None:
        """``take`` for the agent ``agents.get(ident)`` finds, only while it is active, in one
        statement where the backend can: that agent and the challenge's expiry; None when there is
        no such active agent or the challenge is unknown, bound to another agent or taken (then
        nothing changes). Exactly one of any number of concurrent takers gets it."""


@runtime_checkable
class GrantStore(Protocol):
    """Grants (``Grant``; ``status`` is the stored one — readers apply ``Lapse``) and their events."""

    async def create(
        self,
        grant: Grant,
        events: Sequence[str],
        *,
        bound: PendingBound | None = None,
        review: dict[str, Any] | None = None,
        review_due: int | None = None,
        notices: Sequence[OutboxRow] = (),
    ) -> Grant:
        """Insert the grant (``version`` 1) and record ``events`` (e.g. grant.created, grant.approved)
        in the same transaction, with the outbox rows ``notices`` (D15, ``grantd.store.notify``). ``review``: the approval-policy review it was pinned to (D13), kept
        in the same transaction (a grant never exists without the review it needs), with
        ``review_due`` (ms; None: never): when the sweep must first look at it (``due_reviews``). With ``bound``, a ``pending`` grant whose requester is an agent is
        refused (``PendingBound.check``: ``LimitReached("pending_per_agent")`` when that agent
        already has ``bound.per_agent`` pending grants, ``LimitReached("pending_per_owner")`` when
        its owner has ``bound.per_owner`` across their agents); counted in the insert's transaction
        (serialised per owner), so concurrent requests in any process cannot pass it together."""

    async def get(self, grant_id: str) -> Grant | None: ...

    async def find_reusable(self, requester_id: str, reuse_key: str, lapse: Lapse) -> Grant | None:
        """Newest approved grant of ``requester_id`` with this reuse key that has not lapsed."""

    async def list(
        self,
        *,
        lapse: Lapse,
        page: PageRequest,
        status: str | None = None,
        requester: str | None = None,
        requester_ids: Sequence[str] | None = None,
        also_ids: Sequence[str] = (),
    ) -> tuple[list[Grant], bool]:
        """Newest first. ``status`` filters on the status as read under ``lapse`` (``expired``
        includes lapsed ones; ``approved``/``pending`` exclude them); ``requester`` on the requester
        e-mail; ``requester_ids`` (None = everyone) limits to those requesters (a caller's scope);
        ``also_ids`` widens that scope by these grant ids (the grants a pinned policy names the
        caller an approver of, D13); the other filters apply to them as well."""

    async def update_if(
        self,
        grant_id: str,
        *,
        expect: Sequence[str],
        changes: dict[str, Any],
        event: str,
        lapse: Lapse,
        now: int,
        notices: Sequence[OutboxRow] = (),
    ) -> Grant | None:
        """Apply ``changes`` only if the stored status is in ``expect`` and the grant has not lapsed;
        bump ``version``; record ``event`` (at ``now``) and insert the outbox rows ``notices``, all
        in one transaction (none of it when the condition fails). Exactly one of any number of concurrent
        callers wins; the others get None."""

    async def expire(self, lapse: Lapse, now: int, events_before: int) -> builtins.list[Grant]:
        """Store ``expired`` for every lapsed grant (one ``grant.expired`` event each) and drop events
        older than ``events_before``. Cheap when nothing lapsed."""

    async def events_after(self, seq: int, limit: int) -> builtins.list[GrantEvent]:
        """Events with ``seq`` greater than ``seq``, in order, at most ``limit``."""

    async def event_rows_after(self, seq: int, limit: int) -> builtins.list[GrantEventRow]:
        """``events_after`` with each snapshot left as its stored JSON text: ``[grant_event(row) for
        row in event_rows_after(seq, limit)] == events_after(seq, limit)`` (``grantd.store.rows``).
        For the decision log's sequencer, which reads thousands of events a step and decodes
        each just before it makes its leaves, so the decoded snapshots never pile up (issue 23)."""

    async def last_event_seq(self) -> int: ...

    async def review_of(self, grant_id: str) -> GrantReview | None:
        """The review the grant was pinned to (None: the default policy)."""

    async def votes(self, grant_id: str) -> builtins.list[Vote]:
        """The grant's votes in the order they were recorded."""

    async def view(self, grant_id: str) -> GrantView | None:
        """The grant with its pinned review (None: the default policy), its votes in recorded order
        and the agent that asked for it (``agents.get_by_id(requester_id)``: None for a person's
        request or a deleted agent), read together (one statement where the backend can:
        ``GET /api/grants/:id``, its token and a vote need all four; issue 27). None when there is
        no such grant."""

    async def reviews_and_votes(
        self, grant_ids: Sequence[str]
    ) -> tuple[dict[str, GrantReview], dict[str, builtins.list[Vote]]]:
        """For a page of grants at once (the lists' ``review``/``approvals``, D13): the pinned
        reviews of those that have one, and the votes of those that have any, each in recorded
        order; grants without are absent. A fixed number of queries, whatever the page size."""

    async def add_vote(self, vote: Vote) -> str:
        """Record a vote only while the grant's stored status is ``pending``: ``"recorded"``,
        ``"duplicate"`` (this e-mail already voted on it: one vote per person per grant, held by
        the database across processes) or ``"decided"`` (the grant is no longer pending). The
        decision itself is ``update_if`` on ``pending``: of concurrent final votes exactly one wins."""

    async def add_deciding_vote(
        self,
        vote: Vote,
        *,
        seen: int,
        expect: Sequence[str],
        changes: dict[str, Any],
        event: str,
        lapse: Lapse,
        now: int,
        notices: Sequence[OutboxRow] = (),
    ) -> tuple[str, Grant | None]:
        """A vote that decides the grant, and the decision, in ONE transaction (D13, D14): record
        ``vote`` exactly as ``add_vote`` does (the outcome is the first item); then, only if exactly
        ``seen`` votes were recorded on the grant before it (the ones the caller tallied with this
        one), apply ``update_if(grant_id, expect, changes, event, lapse, now, notices)`` in the same
        transaction and return the updated grant as the second item. The second item is None when
        the vote was not recorded, when other votes came first (the vote stays recorded, nothing
        else changes: the caller tallies again and calls ``update_if``) or when the conditional
        update finds no row (the vote stays recorded). Events: the vote's ``grant.reviewed``, then
        ``event``."""

    async def escalate_if(
        self, grant_id: str, seen: int, level: int, now: int, notices: Sequence[OutboxRow] = ()
    ) -> bool:
        """Raise the stored escalation level from ``seen`` to ``level`` while the grant is pending,
        and record one ``grant.escalated`` event per level reached (the event's grant carries
        ``escalation_level``) and the outbox rows ``notices``, in one transaction; True for the one caller (of any number, in any
        process or node) whose update changed it."""

    async def due_reviews(self, now: int, limit: int) -> builtins.list[GrantReview]:
        """Pinned reviews whose due time (``create``'s ``review_due``, ``set_review_due``) is at or
        before ``now``, earliest due first, at most ``limit``, whatever their grant's status (the
        sweep's escalations and policy timeouts, issue 27: a sweep with nothing due reads nothing,
        however many grants wait). Through an index of the due times alone."""

    async def set_review_due(self, grant_id: str, due: int | None) -> None:
        """Set when the sweep must next look at the grant's pinned review (ms; None: never again)."""

    async def pending_review_groups(self, limit: int) -> builtins.list[ReviewGroup]:
        """The grants whose stored status is ``pending`` and that are pinned to a policy, the
        ``limit`` oldest (by ``created_at``, then id), grouped by their pinned review and escalation
        level: each distinct review once, with the ids of its grants (in no given order). The lists
        judge each group once for the person who asks (D13; issue 27: grants pinned to one policy
        set share one review, and the review's text crosses from the database once)."""

    # Optional (not part of the protocol, so a backend without it still is a GrantStore):
    #     async def wait_for_events(self, seconds: float) -> None
    # Return when grant events may have been committed by another process or node since the last
    # call returned, or after ``seconds`` at the latest; spurious returns are fine, missed ones are
    # not. The event hub (grantd.services.events) waits on it besides its own poll interval, so
    # streams on every node see a change as soon as it commits. PostgreSQL LISTENs for the NOTIFY
    # its event inserts send; SQLite has no such signal and just sleeps (the hub polls).

    async def summary(self, lapse: Lapse) -> tuple[dict[str, int], int | None]:
        """For monitoring (``GET /metrics``, scraped every few seconds): ``(counts, oldest_pending)``.
        ``counts`` maps each status *as read under* ``lapse`` to its number of grants (lapsed ones
        count as ``expired``; a status with none may be missing); ``oldest_pending`` is the
        ``created_at`` of the oldest pending grant that has not lapsed, None if there is none.
        Must stay cheap however many grants exist: counts from indexes, never rows loaded."""


@runtime_checkable
class DelegationStore(Protocol):
    """Delegations (``Delegation``)."""

    async def create(self, delegation: Delegation) -> Delegation:
        """Insert. Raise ``Conflict("delegator")`` if the delegator's e-mail is an agent's."""

    async def get(self, delegation_id: str) -> Delegation | None: ...

    async def list(
        self, *, party: str | None, page: PageRequest, since: int | None = None
    ) -> tuple[list[Delegation], bool]:
        """Newest first; ``party`` (None = all) limits to delegations it is delegator or delegate of,
        ``since`` to those created at or after it (D11: a person or agent created later with an
        e-mail that named an earlier one inherits nothing of it)."""

    async def revoke(self, delegation_id: str, by: str, now: int) -> Delegation | None:
        """Active -> revoked (``revoked_by``, ``revoked_at``). Exactly one concurrent caller wins."""

    async def live_for(self, delegate: str, lapse: Lapse) -> builtins.list[Delegation]:
        """Active delegations of ``delegate`` that have not lapsed, oldest first."""


# A backend may drop ended windows at most this often per process instead of on every hit (issue
# 27: a statement less per counted request; an ended window lingers at most this long, unread).
RATE_SWEEP_EVERY_MS = 1000


@runtime_checkable
class RateStore(Protocol):
    """Counters for abuse limits (D12), shared by every process and node: one counter per
    ``(key, window_start)``. ``key`` is opaque to the store (``grantd.services.limits`` builds it,
    e.g. ``"authenticate.address:203.0.113.5"``); windows are fixed, ``window_start`` and
    ``window_ms`` in ms. A counter is worthless once its window has ended."""

    async def hit(self, key: str, window_start: int, window_ms: int, now: int) -> int:
        """Add one to the counter of ``(key, window_start)`` (creating it at 1) and return the new
        count. Exactly one increment per call: N concurrent calls in any number of processes or
        nodes return 1..N, each once — decide it in one step every process and node sees: inside
        the database (one ``INSERT ... ON CONFLICT DO UPDATE SET count = count + 1 RETURNING
        count``), or under a lock they all share (SQLite's table in shared memory beside its file),
        never by an unguarded read then write. Counters need not survive a crash. The counter may be dropped once ``window_start + window_ms <= now``;
        drop ended windows cheaply as you go (an index on the end time), so counters of addresses
        seen once do not pile up."""

    async def count(self, key: str, window_start: int) -> int:
        """The counter of ``(key, window_start)`` without changing it; 0 if there is none."""


@runtime_checkable
class Store(Protocol):
    """One database, reached through its parts."""

    keys: KeyStore
    agents: AgentStore
    challenges: ChallengeStore
    grants: GrantStore
    delegations: DelegationStore
    rates: RateStore
    people: PersonStore
    credentials: CredentialStore
    sessions: SessionStore
    registrations: RegistrationStore
    webauthn_challenges: WebAuthnChallengeStore
    onetime: OneTimeStore
    refresh_tokens: RefreshTokenStore
    device_codes: DeviceCodeStore
    consents: ConsentStore
    tlog: TlogStore
    hosts: HostStore
    receipts: ReceiptStore
    notify: NotifyStore
    ciba: CibaStore

    async def migrate(self) -> list[int]:
        """Apply pending numbered migrations; return the versions applied. Safe to run concurrently."""

    async def ping(self) -> bool:
        """True when the database answers."""

    def schema_version(self) -> int: ...

    def serving(self) -> None:
        """This process starts serving requests: a backend may start background work (the SQLite
        one checkpoints its WAL off the event loop). ``close`` stops it."""

    def close(self) -> None: ...

    async def backup(self, target: str) -> None:
        """Write a consistent copy of the database to ``target`` (created mode 0600)."""

    async def restore(self, source: str) -> str:
        """Replace the whole database with the backup ``source`` (what ``backup`` wrote), for
        ``grantd db restore``. In order: refuse (``StoreError``, nothing changed) if ``source`` is not
        a backup of this backend with a schema version this grantd knows (newer: refuse; older: it
        is migrated forward afterwards), or if a server or another grantd process uses the database
        (a restore under a live server would mix two histories); keep the current contents where an
        operator finds them (created mode 0600; never overwrite an earlier one); replace the
        contents; apply pending migrations. Returns where the previous contents were kept."""


__all__ = [
    "AgentStore",
    "ChallengeStore",
    "CibaStore",
    "Conflict",
    "ConsentStore",
    "CredentialStore",
    "DelegationStore",
    "DeviceCodeStore",
    "GrantStore",
    "HostStore",
    "KeyStore",
    "LimitReached",
    "NotifyStore",
    "PendingBound",
    "OneTimeStore",
    "PersonStore",
    "RefreshTokenStore",
    "RateStore",
    "ReceiptStore",
    "RegistrationStore",
    "SessionStore",
    "Store",
    "StoreError",
    "TlogStore",
    "WebAuthnChallengeStore",
]

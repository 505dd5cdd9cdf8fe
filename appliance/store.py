"""The storage interface. Storage plugins implement it; only their code touches SQL.

Records are plain dicts (JSON-ready); the keys of each kind are documented on the methods.
Everything that must hold across processes and nodes (single-use challenges, once-grant
consumption, codes) is decided inside the database by a conditional write and its row count.
All methods are coroutines so that a network database can be used without blocking the loop;
the SQLite backend runs them in the event loop (WAL commits are tens of microseconds).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


class StoreError(Exception):
    """Base of storage errors the services translate into HTTP answers."""


class Conflict(StoreError):
    """A uniqueness rule was violated; ``field`` names what collided."""

    def __init__(self, field: str):
        self.field = field
        super().__init__(f"duplicate {field}")


@runtime_checkable
class Store(Protocol):
    # -- lifecycle ---------------------------------------------------------------------------
    async def migrate(self) -> list[int]:
        """Apply pending numbered migrations; return the versions applied. Safe to run concurrently."""

    async def ping(self) -> bool:
        """True when the database answers."""

    def close(self) -> None: ...

    def serving(self) -> None:
        """This process starts serving requests: a backend may start background work
        (the SQLite one checkpoints its WAL off the event loop). ``close`` stops it."""

    def schema_version(self) -> int: ...

    async def backup(self, target: str) -> None:
        """Write a consistent copy of the database to ``target``."""

    # -- signing keys: {kid, alg, private_pem, public_jwk (dict), created_at, retired_at|None} -----
    async def signing_keys(self) -> list[dict[str, Any]]:
        """All keys, newest first."""

    async def active_kid(self) -> str | None:
        """Kid of the key that signs now (the newest unretired one)."""

    async def add_first_signing_key(self, key: dict[str, Any]) -> bool:
        """Insert ``key`` only if no unretired key exists (first start, several processes racing)."""

    async def rotate_signing_key(self, key: dict[str, Any], now: int) -> list[str]:
        """Retire every active key at ``now`` and make ``key`` the active one; return retired kids."""

    async def drop_signing_keys_retired_before(self, cutoff: int) -> int: ...

    # -- agents: {agent_id, email, name, public_key, key_id, owner, approver, status, created_at, updated_at}
    async def create_agent(self, agent: dict[str, Any]) -> dict[str, Any]:
        """Insert; raise Conflict("email") or Conflict("publicKey")."""

    async def get_agent(self, ident: str) -> dict[str, Any] | None:
        """By agent_id or (lowercased) email."""

    async def list_agents(self, limit: int, after: str | None) -> tuple[list[dict[str, Any]], bool]: ...

    async def update_agent(self, agent_id: str, changes: dict[str, Any]) -> dict[str, Any] | None:
        """Apply changes; raise Conflict on a duplicate key; None if the agent is gone."""

    async def delete_agent(self, agent_id: str) -> bool: ...

    # -- challenges ------------------------------------------------------------------------------
    async def create_challenge(self, challenge: str, agent_id: str, expires_at: int) -> None: ...

    async def take_challenge(self, challenge: str, agent_id: str) -> int | None:
        """Delete the challenge and return its expiry (ms); None if unknown or already taken."""

    # -- grants: {id, type, requester, request (dict), grant_type, status, created_at, decided_by,
    #    decided_at, expires_at, used_at, decision_reason, delegation_id, reuse_key, version} ------
    # `status` is the stored one; readers apply expiry (appliance.idp.grants.effective_status).
    async def create_grant(self, grant: dict[str, Any], events: list[str]) -> dict[str, Any]:
        """Insert the grant and record ``events`` (e.g. grant.created) in the same transaction."""

    async def get_grant(self, grant_id: str) -> dict[str, Any] | None: ...

    async def find_reusable_grant(self, requester: str, reuse_key: str, now: int) -> dict[str, Any] | None:
        """Newest approved, unexpired grant of ``requester`` with this reuse key (D6 reuse)."""

    async def list_grants(
        self,
        *,
        now: int,
        pending_cutoff: int,
        limit: int,
        status: str | None = None,
        requester: str | None = None,
        only_requester: str | None = None,
        decider: str | None = None,
        cursor: tuple[int, str] | None = None,
    ) -> tuple[list[dict[str, Any]], bool]:
        """Newest first. ``status`` filters on the effective status at ``now``; ``only_requester``
        limits to one requester (an agent's view); ``decider`` to what a person asked for or may decide."""

    async def update_grant_if(
        self,
        grant_id: str,
        *,
        expect: tuple[str, ...],
        changes: dict[str, Any],
        event: str,
        now: int,
        pending_cutoff: int,
    ) -> dict[str, Any] | None:
        """Conditional transition: applies only if the stored status is in ``expect`` and the grant
        has not lapsed; records ``event``. Exactly one of any number of concurrent callers wins."""

    async def expire_grants(self, now: int, pending_cutoff: int, events_before: int) -> list[dict[str, Any]]: ...

    # -- grant events: {seq, event, grant_id, requester, grant (dict), created_at} ----------------
    async def grant_events_after(self, seq: int, limit: int) -> list[dict[str, Any]]: ...

    async def last_grant_event_seq(self) -> int: ...

    # -- delegations: {id, delegator, delegate, audience, scopes (list), approval, duration,
    #    created_at, expires_at, status, revoked_at, revoked_by} -----------------------------------
    async def create_delegation(self, delegation: dict[str, Any]) -> dict[str, Any]: ...

    async def get_delegation(self, delegation_id: str) -> dict[str, Any] | None: ...

    async def list_delegations(
        self, *, party: str | None, limit: int, cursor: tuple[int, str] | None
    ) -> tuple[list[dict[str, Any]], bool]: ...

    async def revoke_delegation(self, delegation_id: str, by: str, now: int) -> dict[str, Any] | None: ...

    async def live_delegations(self, delegate: str, now: int) -> list[dict[str, Any]]: ...

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

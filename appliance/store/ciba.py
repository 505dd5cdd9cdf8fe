"""CIBA records (D16, ``store.ciba``): backchannel authentication requests and agents' ping settings.

A request maps the SHA-256 of an ``auth_req_id`` to the grant it created and the agent that asked;
it is polled (``last_polled_at``, ``poll_interval`` raised by ``slow_down``) and redeemed exactly
once (``redeem``: one conditional write, one winner across processes and nodes).
"""

from __future__ import annotations

import builtins
from typing import Protocol, TypedDict, runtime_checkable


class CibaRequest(TypedDict):
    auth_req_hash: str  # SHA-256 hex of the auth_req_id
    grant_id: str
    agent_id: str
    created_at: int
    expires_at: int
    poll_interval: int  # seconds between polls (each slow_down adds 5)
    last_polled_at: int | None
    redeemed_at: int | None
    notification_token: str | None  # ping mode: the client's client_notification_token, as given


class CibaClient(TypedDict):
    """An agent's CIBA delivery mode (``PUT /api/admin/agents/:id {ciba: ...}``); poll when absent."""

    agent_id: str
    mode: str  # ping
    notification_endpoint: str
    updated_at: int


CIBA_REQUEST_COLUMNS = (
    "auth_req_hash",
    "grant_id",
    "agent_id",
    "created_at",
    "expires_at",
    "poll_interval",
    "last_polled_at",
    "redeemed_at",
    "notification_token",
)
CIBA_CLIENT_COLUMNS = ("agent_id", "mode", "notification_endpoint", "updated_at")


@runtime_checkable
class CibaStore(Protocol):
    async def create(self, request: CibaRequest) -> CibaRequest:
        """Insert. ``Conflict("auth_req_hash")`` on a duplicate. May drop requests that expired
        before ``created_at``."""

    async def poll(self, auth_req_hash: str, now: int, agent_id: str) -> CibaRequest | None:
        """The request as it was before this poll, and record the poll (``last_polled_at = now``).
        None, recording nothing, if unknown or another agent's (D16: another client's poll must not
        make its owner's next poll "too soon"). Expired and redeemed requests are returned as they are."""

    async def slow_down(self, auth_req_hash: str, interval: int) -> None:
        """Raise ``poll_interval`` to ``interval``; never lowers it. Nothing if unknown."""

    async def redeem(self, auth_req_hash: str, now: int) -> CibaRequest | None:
        """Mark an unredeemed, unexpired request redeemed (``redeemed_at = now``) and return it;
        None otherwise (nothing changes). Exactly one concurrent redeemer wins."""

    async def for_grant(self, grant_id: str) -> builtins.list[CibaRequest]:
        """The requests that created this grant (one, in practice)."""

    async def set_client(self, client: CibaClient | None, agent_id: str) -> None:
        """Store an agent's ping settings (replacing any), or forget them (None: poll mode)."""

    async def get_client(self, agent_id: str) -> CibaClient | None: ...


__all__ = ["CIBA_CLIENT_COLUMNS", "CIBA_REQUEST_COLUMNS", "CibaClient", "CibaRequest", "CibaStore"]

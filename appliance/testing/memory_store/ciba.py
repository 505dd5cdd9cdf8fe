"""CIBA records of the in-memory example (``grantd.store.ciba``)."""

from __future__ import annotations

import builtins
import copy

from grantd.store import Conflict
from grantd.store.ciba import CibaClient, CibaRequest

from .data import _Data


class MemoryCiba:
    def __init__(self, data: _Data):
        self._d = data

    async def create(self, request: CibaRequest) -> CibaRequest:
        row: CibaRequest = copy.deepcopy(request)
        async with self._d.tx:
            self._d.ciba_requests = {
                k: r for k, r in self._d.ciba_requests.items() if r["expires_at"] > row["created_at"]
            }
            if row["auth_req_hash"] in self._d.ciba_requests:
                raise Conflict("auth_req_hash")
            self._d.ciba_requests[row["auth_req_hash"]] = row
        return copy.deepcopy(row)

    async def poll(self, auth_req_hash: str, now: int, agent_id: str) -> CibaRequest | None:
        async with self._d.tx:
            found = self._d.ciba_requests.get(auth_req_hash)
            if found is None or found["agent_id"] != agent_id:
                return None
            before = copy.deepcopy(found)
            found["last_polled_at"] = now
        return before

    async def slow_down(self, auth_req_hash: str, interval: int) -> None:
        async with self._d.tx:
            found = self._d.ciba_requests.get(auth_req_hash)
            if found is not None and found["poll_interval"] < interval:
                found["poll_interval"] = int(interval)

    async def redeem(self, auth_req_hash: str, now: int) -> CibaRequest | None:
        async with self._d.tx:  # check and set in one critical section: exactly one redeemer wins
            found = self._d.ciba_requests.get(auth_req_hash)
            if found is None or found["redeemed_at"] is not None or found["expires_at"] <= now:
                return None
            found["redeemed_at"] = now
            return copy.deepcopy(found)

    async def for_grant(self, grant_id: str) -> builtins.list[CibaRequest]:
        rows = [r for r in self._d.ciba_requests.values() if r["grant_id"] == grant_id]
        return copy.deepcopy(sorted(rows, key=lambda r: r["created_at"]))

    async def set_client(self, client: CibaClient | None, agent_id: str) -> None:
        async with self._d.tx:
            self._d.ciba_clients.pop(agent_id, None)
            if client is not None:
                self._d.ciba_clients[agent_id] = copy.deepcopy(client)

    async def get_client(self, agent_id: str) -> CibaClient | None:
        return copy.deepcopy(self._d.ciba_clients.get(agent_id))

"""OAuth records of the in-memory example: one-time records, refresh tokens, device codes, consents."""

from __future__ import annotations

import builtins
import copy
from collections.abc import Callable
from typing import Any

from grantd.store import Conflict
from grantd.store.oauth import union_scope, was_live
from grantd.store.records import (
    Consent,
    DeviceCode,
    RefreshToken,
)

from .data import _Data


# -- OAuth (grantd.store.oauth) --------------------------------------------------------------------------
class MemoryOneTime:
    def __init__(self, data: _Data):
        self._d = data

    async def put(self, kind: str, key: str, data: dict[str, Any], expires_at: int, now: int) -> None:
        async with self._d.tx:
            self._d.onetime = {
                k: v for k, v in self._d.onetime.items() if v[1] > now
            }  # an expired twin goes too
            if (kind, key) in self._d.onetime:
                raise Conflict("key")
            self._d.onetime[(kind, key)] = (copy.deepcopy(data), expires_at)

    async def take(self, kind: str, key: str, now: int) -> dict[str, Any] | None:
        async with self._d.tx:  # check and delete in one critical section: exactly one taker wins
            found = self._d.onetime.pop((kind, key), None)
        if found is None or found[1] <= now:
            return None
        return found[0]


class MemoryRefreshTokens:
    def __init__(self, data: _Data):
        self._d = data

    @staticmethod
    def _live(token: RefreshToken, now: int) -> bool:
        return token["used_at"] is None and token["revoked_at"] is None and token["expires_at"] > now

    async def create(self, token: RefreshToken) -> RefreshToken:
        row: RefreshToken = copy.deepcopy(token)
        async with self._d.tx:
            self._d.refresh_tokens = {
                k: t for k, t in self._d.refresh_tokens.items() if t["expires_at"] > row["created_at"]
            }  # families that ended before
            if row["token_hash"] in self._d.refresh_tokens:
                raise Conflict("token_hash")
            self._d.refresh_tokens[row["token_hash"]] = row
        return copy.deepcopy(row)

    async def rotate(self, token_hash: str, new: RefreshToken, now: int) -> tuple[str, RefreshToken | None]:
        async with self._d.tx:  # the check, the use and the insert in one critical section
            tokens = self._d.refresh_tokens
            old = tokens.get(token_hash)
            if old is None:
                return "unknown", None
            before = copy.deepcopy(old)
            if old["expires_at"] <= now:
                return "expired", before
            if old["revoked_at"] is not None and old["used_at"] is None:
                return "revoked", before
            if old["used_at"] is not None:  # a replay: the whole family goes (if it has not yet)
                for t in tokens.values():
                    if t["family_id"] == old["family_id"] and t["revoked_at"] is None:
                        t["revoked_at"] = now
                return "reused", before
            if new["token_hash"] in tokens:
                raise Conflict("token_hash")  # nothing changed
            old["used_at"] = now
            tokens[new["token_hash"]] = copy.deepcopy(new)
            return "rotated", before

    async def get(self, token_hash: str) -> RefreshToken | None:
        return copy.deepcopy(self._d.refresh_tokens.get(token_hash))

    async def family_live(self, family_id: str, now: int) -> bool:
        return any(
            t["family_id"] == family_id and t["revoked_at"] is None and t["expires_at"] > now
            for t in self._d.refresh_tokens.values()
        )

    async def _revoke(self, match: Callable[[RefreshToken], bool], now: int) -> int:
        async with self._d.tx:
            ended = [t for t in self._d.refresh_tokens.values() if match(t) and t["revoked_at"] is None]
            for t in ended:
                t["revoked_at"] = now
            return was_live(ended, now)

    async def revoke_family(self, family_id: str, now: int) -> int:
        return await self._revoke(lambda t: t["family_id"] == family_id, now)

    async def revoke_person(self, person_id: str, now: int, client_id: str | None = None) -> int:
        return await self._revoke(
            lambda t: t["person_id"] == person_id and (client_id is None or t["client_id"] == client_id), now
        )

    async def list_families(self, person_id: str, now: int) -> builtins.list[RefreshToken]:
        # a live family has exactly one unused token, its newest
        rows = [
            t for t in self._d.refresh_tokens.values() if t["person_id"] == person_id and self._live(t, now)
        ]
        return copy.deepcopy(sorted(rows, key=lambda t: (t["created_at"], t["token_hash"]), reverse=True))


class MemoryDeviceCodes:
    def __init__(self, data: _Data):
        self._d = data

    async def create(self, device: DeviceCode) -> DeviceCode:
        row: DeviceCode = copy.deepcopy(device)
        async with self._d.tx:
            self._d.device_codes = {
                k: c for k, c in self._d.device_codes.items() if c["expires_at"] > row["created_at"]
            }
            if any(c["user_code"] == row["user_code"] for c in self._d.device_codes.values()):
                raise Conflict("user_code")
            if row["device_code_hash"] in self._d.device_codes:
                raise Conflict("device_code_hash")
            self._d.device_codes[row["device_code_hash"]] = row
        return copy.deepcopy(row)

    async def get_by_user_code(self, user_code: str, now: int) -> DeviceCode | None:
        found = next(
            (
                c
                for c in self._d.device_codes.values()
                if c["user_code"] == user_code and c["expires_at"] > now
            ),
            None,
        )
        return copy.deepcopy(found)

    async def decide(self, user_code: str, person_id: str, approved: bool, now: int) -> DeviceCode | None:
        async with self._d.tx:  # compare and set in one critical section: one decider wins
            found = next((c for c in self._d.device_codes.values() if c["user_code"] == user_code), None)
            if found is None or found["status"] != "pending" or found["expires_at"] <= now:
                return None
            found.update(
                {"status": "approved" if approved else "denied", "person_id": person_id, "decided_at": now}
            )
            return copy.deepcopy(found)

    async def poll(self, device_code_hash: str, now: int) -> DeviceCode | None:
        async with self._d.tx:
            found = self._d.device_codes.get(device_code_hash)
            if found is None:
                return None
            before = copy.deepcopy(found)
            found["last_polled_at"] = now
            return before

    async def take(self, device_code_hash: str, now: int) -> DeviceCode | None:
        async with self._d.tx:  # check and delete in one critical section: exactly one taker wins
            found = self._d.device_codes.get(device_code_hash)
            if found is None or found["status"] != "approved" or found["expires_at"] <= now:
                return None
            return self._d.device_codes.pop(device_code_hash)

    async def slow_down(self, device_code_hash: str, interval: int, now: int) -> None:
        async with self._d.tx:
            found = self._d.device_codes.get(device_code_hash)
            if found is not None and found["interval"] < interval:
                found["interval"] = int(interval)


class MemoryConsents:
    def __init__(self, data: _Data):
        self._d = data

    async def remember(self, consent: Consent) -> Consent:
        async with self._d.tx:
            key = (consent["person_id"], consent["client_id"])
            found = self._d.consents.get(key)
            row: Consent = {**copy.deepcopy(consent), "scope": union_scope("", consent["scope"])}
            if found is not None:
                row["scope"] = union_scope(found["scope"], row["scope"])
                row["created_at"] = found["created_at"]
            self._d.consents[key] = row
            return copy.deepcopy(row)

    async def get(self, person_id: str, client_id: str) -> Consent | None:
        return copy.deepcopy(self._d.consents.get((person_id, client_id)))

    async def list_for(self, person_id: str) -> builtins.list[Consent]:
        rows = sorted(
            (c for c in self._d.consents.values() if c["person_id"] == person_id),
            key=lambda c: c["client_id"],
        )
        return copy.deepcopy(sorted(rows, key=lambda c: c["updated_at"], reverse=True))

    async def withdraw(self, person_id: str, client_id: str, now: int) -> bool:
        async with self._d.tx:  # the consent and the client's refresh families together
            found = self._d.consents.pop((person_id, client_id), None)
            for t in self._d.refresh_tokens.values():
                if t["person_id"] == person_id and t["client_id"] == client_id and t["revoked_at"] is None:
                    t["revoked_at"] = now
            return found is not None

"""``MemoryStore``: the parts on one ``_Data``, backup and restore as a JSON dump, the backend hook."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grantd.hookspecs import hookimpl
from grantd.store import StoreError
from grantd.store.files import open_backup_target

from .ciba import MemoryCiba
from .data import _Data
from .notify import MemoryNotify
from .oauth import MemoryConsents, MemoryDeviceCodes, MemoryOneTime, MemoryRefreshTokens
from .parts import MemoryAgents, MemoryChallenges, MemoryDelegations, MemoryGrants, MemoryKeys, MemoryRates
from .people import (
    MemoryCredentials,
    MemoryPeople,
    MemoryRegistrations,
    MemorySessions,
    MemoryWebAuthnChallenges,
)
from .tlog import MemoryHosts, MemoryReceipts, MemoryTlog


class MemoryStore:
    """``grantd.store.Store`` in memory (one process; lost on exit)."""

    def __init__(self) -> None:
        data = _Data()
        self.keys = MemoryKeys(data)
        self.agents = MemoryAgents(data)
        self.challenges = MemoryChallenges(data)
        self.grants = MemoryGrants(data)
        self.delegations = MemoryDelegations(data)
        self.rates = MemoryRates(data)
        self.people = MemoryPeople(data)
        self.credentials = MemoryCredentials(data)
        self.sessions = MemorySessions(data)
        self.registrations = MemoryRegistrations(data)
        self.webauthn_challenges = MemoryWebAuthnChallenges(data)
        self.onetime = MemoryOneTime(data)
        self.refresh_tokens = MemoryRefreshTokens(data)
        self.device_codes = MemoryDeviceCodes(data)
        self.ciba = MemoryCiba(data)
        self.consents = MemoryConsents(data)
        self.tlog = MemoryTlog(data)
        self.hosts = MemoryHosts(data)
        self.receipts = MemoryReceipts(data)
        self.notify = MemoryNotify(data)
        self._migrated = False

    async def migrate(self) -> list[int]:
        if self._migrated:
            return []
        self._migrated = True
        return [1]

    async def ping(self) -> bool:
        return True

    def schema_version(self) -> int:
        return 1 if self._migrated else 0

    def serving(self) -> None:
        """Nothing to start: an in-memory store has no files to checkpoint (the contract allows none)."""

    def close(self) -> None:
        pass

    async def backup(self, target: str) -> None:
        """A JSON dump, created mode 0600 like every file that holds keys (D12)."""
        data = self.keys._d
        dump = {
            "keys": data.keys,
            "agents": data.agents,
            "grants": data.grants,
            "events": data.events,
            "delegations": data.delegations,
            "people": data.people,
            "credentials": data.credentials,
            "sessions": data.sessions,
            "registrations": data.registrations,
            "refresh_tokens": data.refresh_tokens,
            "device_codes": data.device_codes,
            "ciba_requests": data.ciba_requests,
            "ciba_clients": data.ciba_clients,
            # JSON objects have string keys: the pairs keyed ones are stored as lists
            "onetime": [[k, v] for k, v in data.onetime.items()],
            "consents": list(data.consents.values()),
            "outbox": data.outbox,
            "notify_prefs": data.notify_prefs,
            "review_links": data.review_links,
            "push_subscriptions": data.push_subscriptions,
        }
        with os.fdopen(open_backup_target(Path(target)), "w") as f:
            json.dump(dump, f)

    async def restore(self, source: str) -> str:
        """Load a dump written by ``backup``; the current contents are first dumped beside it."""
        try:
            with open(source) as f:
                dump = json.load(f)
        except (OSError, ValueError) as exc:
            raise StoreError(f"{source} is not a backup of the memory store ({exc})") from None
        if not isinstance(dump, dict) or not {"keys", "agents", "grants", "events"} <= set(dump):
            raise StoreError(f"{source} is not a backup of the memory store")
        keep = f"{source}.before-restore"
        if os.path.exists(keep):
            raise StoreError(f"{keep} exists (the copy an earlier restore kept): move it away first")
        await self.backup(keep)
        data = self.keys._d
        dump["onetime"] = {tuple(k): tuple(v) for k, v in dump.get("onetime", [])}
        dump["consents"] = {(c["person_id"], c["client_id"]): c for c in dump.get("consents", [])}
        async with data.tx:
            for name, value in dump.items():
                if hasattr(data, name):
                    setattr(data, name, value)
        return keep


@hookimpl
def storage_backends() -> dict[str, Callable[[Any], MemoryStore]]:
    return {"memory": lambda config: MemoryStore()}

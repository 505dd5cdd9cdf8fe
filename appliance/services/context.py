"""What a server process holds: config, storage, keys, plugins. Built once per process."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pluggy

from grantd.config import Config
from grantd.keys import KeyRing
from grantd.store import Store
from grantd.tokens import VerifiedTokenCache


def longest_token_lifetime(config: Config) -> int:
    """Seconds the longest-lived token we sign can live: how long a retired key stays published."""
    return max(config.tokens.agent_token_ttl, 3600, 300, config.grants.max_duration)


@dataclass
class Services:
    config: Config
    store: Store
    keyring: KeyRing
    pm: pluggy.PluginManager
    token_cache: VerifiedTokenCache = field(default_factory=VerifiedTokenCache)
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def issuer(self) -> str:
        return str(self.config.server.issuer)


async def open_services(config: Config, pm: pluggy.PluginManager) -> Services:
    from grantd.plugin_manager import storage_factory

    store = storage_factory(pm, config)(config)
    await store.migrate()
    keyring = KeyRing(store, longest_token_lifetime(config))
    await keyring.ensure()
    return Services(config=config, store=store, keyring=keyring, pm=pm)

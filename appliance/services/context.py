"""What a server process holds, typed: config, clock, storage, keys, tokens, events, the
authentication chain and the plugins. Built once per process by ``open_services``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pluggy

from grantd.config import Config
from grantd.core.clock import SYSTEM_CLOCK, Clock
from grantd.core.lifecycle import Lapse, delegation_lapse, grant_lapse
from grantd.core.review import ReviewConfig
from grantd.notify import configured_channels
from grantd.plugin_manager import FederationProvider, build_federation_providers, storage_factory
from grantd.services.audit import AuditLog, origin_of
from grantd.services.authn import AuthnChain, default_chain
from grantd.services.clients import ClientRegistry
from grantd.services.events import GrantEventHub
from grantd.services.keys import KeyRing
from grantd.services.limits import Limits
from grantd.services.tokens import ALWAYS_TOKEN_TTL, ID_TOKEN_TTL, ONCE_TOKEN_TTL, Tokens
from grantd.store import Store


def longest_token_lifetime(config: Config) -> int:
    """Seconds the longest-lived token we sign can live: how long a retired key stays published."""
    return max(
        config.tokens.agent_token_ttl,
        ALWAYS_TOKEN_TTL,
        ONCE_TOKEN_TTL,
        config.grants.max_duration,
        config.oauth.access_token_ttl,
        ID_TOKEN_TTL,
    )


@dataclass
class Services:
    config: Config
    clock: Clock
    store: Store
    keyring: KeyRing
    tokens: Tokens
    events: GrantEventHub
    authn: AuthnChain
    limits: Limits
    pm: pluggy.PluginManager
    admin_emails: frozenset[str]
    oauth_clients: ClientRegistry
    # the [[federation.providers]] built by their types' factories (grantd.plugin_manager)
    federation: tuple[FederationProvider, ...] = ()
    audit: AuditLog | None = None  # the decision log (D14); set by open_services
    # the [[notify.channels]] by id (grantd.notify.configured_channels; D15)
    notify_channels: dict[str, Any] = field(default_factory=dict)
    # wakes this process's notification delivery worker (grantd.services.notify_delivery) when set
    # (given the channels of the rows written, or None: any)
    notify_wake: Callable[[Iterable[str] | None], None] = field(default=lambda channels: None)

    @property
    def issuer(self) -> str:
        return str(self.config.server.issuer)

    def grant_lapse(self) -> Lapse:
        """When grants lapse, as of now (D6)."""
        return grant_lapse(self.clock.now_ms(), self.config.grants.pending_ttl)

    def delegation_lapse(self) -> Lapse:
        return delegation_lapse(self.clock.now_ms())


def admin_emails_of(config: Config) -> frozenset[str]:
    """The administrators' e-mails: ``admin.emails`` and the management identity."""
    return frozenset([*(e.lower() for e in config.admin.emails), config.admin.management_identity.lower()])


def configured_id_token_algs(config: Config) -> tuple[str, ...]:
    """The ID-token algorithms of the ``[[oauth.clients]]``: their keys exist from the first start (D9)."""
    return tuple(dict.fromkeys(str(c["id_token_signed_response_alg"]) for c in config.oauth.clients))


async def open_services(
    config: Config,
    pm: pluggy.PluginManager,
    clock: Clock = SYSTEM_CLOCK,
    federation: tuple[FederationProvider, ...] | None = None,
) -> Services:
    """The process's services. ``federation``: the providers already built (create_app builds them
    first, so a bad provider table stops the start before the storage opens); else built here."""
    store = storage_factory(pm, config)(config)
    await store.migrate()
    keyring = KeyRing(store, longest_token_lifetime(config), clock)
    await keyring.ensure(configured_id_token_algs(config))
    audit = AuditLog(
        store,
        clock,
        origin_of(str(config.server.issuer), config.audit.origin),
        config.admin.management_identity,
        config.audit.sequencer_interval_ms,
    )
    await audit.ensure_key()
    review = config.extra.get("review")
    await audit.log_policies(review if isinstance(review, ReviewConfig) else None)
    return Services(
        config=config,
        clock=clock,
        store=store,
        keyring=keyring,
        tokens=Tokens(keyring, clock, config),
        events=GrantEventHub(store, config.grants.events_poll_ms),
        authn=default_chain(),
        limits=Limits(config, store.rates, clock),
        pm=pm,
        admin_emails=admin_emails_of(config),
        oauth_clients=ClientRegistry(config, clock),
        federation=build_federation_providers(pm, config) if federation is None else federation,
        audit=audit,
        notify_channels=configured_channels(pm, config),
    )

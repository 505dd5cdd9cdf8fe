"""The typed sections of a checked config: one frozen dataclass per section, its fields the
section's keys with the types they have after validation (defaults filled in, secrets resolved,
``trusted_proxies`` parsed, provider and client tables checked). So ``config.server.prot`` or
``config.grants.pending_ttl + "s"`` fail mypy instead of running. tests/unit/test_config.py checks
these classes against SCHEMA: the same keys, and types that agree with each key's kind. Secret
values never appear in a repr.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grantd.client_address import Network


@dataclass(frozen=True)
class RootSection:
    """The top-level keys."""

    version: int


@dataclass(frozen=True)
class ServerSection:
    """[server]: HTTP server."""

    host: str
    port: int
    issuer: str
    workers: int
    max_body_bytes: int
    request_timeout: int
    graceful_shutdown_timeout: int
    trusted_proxies: tuple[Network, ...]


@dataclass(frozen=True)
class LogSection:
    """[log]: Logging."""

    level: str
    format: str
    access: bool


@dataclass(frozen=True)
class MetricsSection:
    """[metrics]: Prometheus metrics (docs/operations.md lists the series)."""

    enabled: bool
    token: str | None = field(repr=False)


@dataclass(frozen=True)
class AdminSection:
    """[admin]: Administration."""

    management_token: str = field(repr=False)
    emails: list[str]
    management_identity: str
    auditors: list[str]


@dataclass(frozen=True)
class AuditSection:
    """[audit]: The decision log (D14; docs/audit.md)."""

    origin: str | None
    sequencer_interval_ms: int
    sequencer: str


@dataclass(frozen=True)
class StorageSection:
    """[storage]: Storage."""

    plugin: str
    path: str
    dsn: str | None = field(repr=False)
    pool_size: int


@dataclass(frozen=True)
class TokensSection:
    """[tokens]: Agent identity tokens."""

    agent_token_ttl: int
    agent_audience: str
    challenge_ttl: int
    agent_dpop: str
    dpop_nonce: bool


@dataclass(frozen=True)
class CibaSection:
    """[ciba]: CIBA: agents ask a person through /bc-authorize, poll or ping (D16; docs/protocols.md)."""

    request_ttl: int
    notification_allow: list[str]


@dataclass(frozen=True)
class GrantsSection:
    """[grants]: Grants."""

    allow_unauthenticated: bool
    pending_ttl: int
    max_duration: int
    once_ttl: int
    events_heartbeat: int
    events_poll_ms: int
    events_retention: int
    expiry_sweep_interval: int


@dataclass(frozen=True)
class LimitsSection:
    """[limits]: Abuse limits (D12): per client address and per identity; 0 turns one off."""

    authenticate_per_agent: int
    authenticate_per_address: int
    enroll_per_address: int
    enroll_per_principal: int
    failed_bearer_per_address: int
    grants_per_agent: int
    pending_per_agent: int
    agents_per_person: int
    pending_per_owner: int
    verify_per_address: int
    streams_per_principal: int
    streams_per_owner: int
    streams_per_process: int
    passkey_per_person: int
    passkey_per_address: int
    device_code_per_address: int
    sp_login_per_address: int
    ipv6_prefix: int
    token_per_client: int
    token_per_address: int


@dataclass(frozen=True)
class WebauthnSection:
    """[webauthn]: Passkeys (WebAuthn): relying party id and origin, checked exactly."""

    rp_id: str
    origin: str
    rp_name: str


@dataclass(frozen=True)
class SessionsSection:
    """[sessions]: Browser sessions of people (cookie grantd_session)."""

    ttl: int


@dataclass(frozen=True)
class PeopleSection:
    """[people]: People: persons, their registration URLs."""

    registration_ttl: int
    first_admin: str | None


@dataclass(frozen=True)
class FederationSection:
    """[federation]: Federation: people sign in through upstream identity providers."""

    providers: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class OauthSection:
    """[oauth]: OAuth 2.0 / OpenID provider: tokens, clients (docs/oauth.md)."""

    access_token_ttl: int
    refresh_token_ttl: int
    metadata_cache_ttl: int
    metadata_failure_ttl: int
    fetches_at_once: int
    device_code_ttl: int
    device_poll_interval: int
    ca_file: str | None
    allow_private_metadata_hosts: bool
    clients: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class McpSection:
    """[mcp]: Authorization server for MCP servers: resources and their scopes (D17; docs/mcp.md)."""

    resources: tuple[dict[str, Any], ...]
    cimd_allowed_domains: list[str]


@dataclass(frozen=True)
class SpSection:
    """[sp]: Service provider: log people in at the IdP their e-mail domain names (DDISA; docs/sp.md)."""

    enabled: bool
    client_id: str | None
    fallback_idp: str | None
    nameservers: list[str]
    allow_http_idp: bool
    dns_cache_ttl: int
    dns_negative_cache_ttl: int


@dataclass(frozen=True)
class NotifySection:
    """[notify]: Reaching approvers: mail, Web Push, ntfy and chat (D15; docs/notifications.md)."""

    link_ttl: int
    allowed_push_hosts: list[str]
    allow_private_push_hosts: bool
    deny_from_chat: bool
    vapid_private_key: str | None  # the file:/env: reference, resolved by the webpush channel
    vapid_subject: str | None
    max_attempts: int
    poll_ms: int
    channels: tuple[dict[str, Any], ...]  # the tables with the [notify] defaults filled in
    routes: tuple[Any, ...]  # grantd.core.notify_routes.Route


@dataclass(frozen=True)
class PluginsSection:
    """[plugins]: Plugins."""

    modules: list[str]
    paths: list[str]


# section name ("" for the top-level keys) -> its class
SECTION_TYPES: dict[str, type] = {
    "": RootSection,
    "server": ServerSection,
    "log": LogSection,
    "metrics": MetricsSection,
    "admin": AdminSection,
    "audit": AuditSection,
    "storage": StorageSection,
    "tokens": TokensSection,
    "ciba": CibaSection,
    "grants": GrantsSection,
    "limits": LimitsSection,
    "webauthn": WebauthnSection,
    "sessions": SessionsSection,
    "people": PeopleSection,
    "federation": FederationSection,
    "oauth": OauthSection,
    "mcp": McpSection,
    "sp": SpSection,
    "notify": NotifySection,
    "plugins": PluginsSection,
}

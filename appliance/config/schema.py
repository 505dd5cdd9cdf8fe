"""The schema of the server's config file: every section, key, default and meaning (the generated
configs and config.example.toml are written from it), and the checks of single values."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from grantd.client_address import parse_nameserver, parse_networks
from grantd.core.config_keys import Key

CONFIG_ENV = "GRANTD_CONFIG"
DEFAULT_CONFIG_NAME = "grantd.toml"
CURRENT_VERSION = 1


def _no_trailing_slash_url(value: Any) -> str | None:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return "must be an http(s) URL such as https://idp.example.com"
    if value.endswith("/"):
        return "must not end with a slash (tokens carry it byte for byte)"
    if parts.query or parts.fragment:
        return "must not carry a query or fragment"
    return None


def _networks(value: Any) -> str | None:
    problems = parse_networks(value)[1]
    return "; ".join(problems) if problems else None


def _secret_reference(value: Any) -> str | None:
    if not value.startswith(("file:", "env:")) or len(value) < 6:
        return "a secret: must be file:PATH or env:NAME, never written inline"
    return None


def _email(value: Any) -> str | None:
    if "@" not in value or value.strip() != value or len(value) > 254:
        return "must be an e-mail address"
    return None


def _emails(value: Any) -> str | None:
    for item in value:
        if _email(item):
            return f"{item!r} is not an e-mail address"
    return None


def _origin(value: Any) -> str | None:
    parts = urlsplit(value)
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or value != f"{parts.scheme}://{parts.netloc}"
    ):
        return "must be an origin such as https://idp.example.com (scheme://host[:port], no path or slash)"
    return None


def _log_origin(value: Any) -> str | None:
    """A C2SP note key name (D14): printable, no spaces, no '+'."""
    if (
        not value
        or len(value) > 200
        or "+" in value
        or not value.isprintable()
        or any(c.isspace() for c in value)
    ):
        return "must be printable, without spaces or '+', e.g. idp.example.com/grantd"
    return None


def _client_id(value: Any) -> str | None:
    if not re.fullmatch(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?(:[0-9]{1,5})?", value):
        return "must be a lowercase host[:port] such as sp.example.com (no scheme or path)"
    return None


def _nameservers(value: Any) -> str | None:
    for item in value:
        if isinstance(item, str) and parse_nameserver(item) is None:
            return f"{item!r} is not an IP address with an optional port (IPv6 in brackets with a port)"
    return None


def _ciba_allow(value: Any) -> str | None:
    import ipaddress

    for item in value:
        if not isinstance(item, str):
            continue
        if item.startswith(("https://", "http://")):
            if "#" in item or "@" in item or " " in item:
                return f"{item!r} is not a URL prefix (no fragment, userinfo or spaces)"
            continue
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            return f"{item!r} is neither a CIDR (10.0.0.0/8) nor an http(s) URL prefix"
    return None


def _rp_id(value: Any) -> str | None:
    if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?", value) or ".." in value:
        return "must be a bare host name such as idp.example.com (no scheme, port or path)"
    return None


# Section -> key -> Key.  Top-level scalar keys live under "".
SCHEMA: dict[str, dict[str, Key]] = {
    "": {
        "version": Key(
            int, CURRENT_VERSION, "Configuration format version.", minimum=1, maximum=CURRENT_VERSION
        ),
    },
    "server": {
        "host": Key(str, "127.0.0.1", "Address to listen on."),
        "port": Key(int, 8000, "TCP port to listen on.", minimum=1, maximum=65535),
        "issuer": Key(
            str,
            None,
            "Public base URL of this server, exactly as clients reach it (no trailing slash). "
            "Default: http://HOST:PORT.",
            check=_no_trailing_slash_url,
        ),
        "workers": Key(
            int, 1, "Server processes sharing the port (and the database).", minimum=1, maximum=64
        ),
        "max_body_bytes": Key(
            int, 1_048_576, "Largest accepted request body; larger bodies get 413.", minimum=1024
        ),
        "request_timeout": Key(int, 60, "Seconds a client may take to send a request.", minimum=1),
        "graceful_shutdown_timeout": Key(
            int,
            10,
            "Seconds grantd takes at most to stop after SIGTERM or SIGINT: in-flight requests get all "
            "but the last half second, which is kept for ending the processes.",
            minimum=0,
        ),
        "trusted_proxies": Key(
            list,
            [],
            "Reverse proxies (IP addresses or CIDR networks) whose X-Forwarded-For names the client "
            "(empty: the client is always the TCP peer).",
            item_kind=str,
            check=_networks,
        ),
    },
    "log": {
        "level": Key(str, "info", "Log level.", choices=("debug", "info", "warning", "error")),
        "format": Key(str, "text", "Log line format.", choices=("text", "json")),
        "access": Key(bool, True, "One log line per request (method, path, status, duration, request id)."),
    },
    "metrics": {
        "enabled": Key(bool, False, "Serve Prometheus metrics at GET /metrics (off: 404)."),
        "token": Key(
            str,
            None,
            "Bearer token a scrape must send (Authorization: Bearer ...). Use file:PATH or env:NAME. "
            "Unset: /metrics is open to whoever reaches the port.",
            secret=True,
        ),
    },
    "admin": {
        "management_token": Key(
            str,
            None,
            "Bearer token for administrators and deployment tools. Use file:PATH or env:NAME.",
            secret=True,
        ),
        "emails": Key(list, [], "E-mail addresses of human administrators.", item_kind=str, check=_emails),
        "management_identity": Key(
            str,
            "admin@grantd.local",
            "E-mail recorded as owner/approver/decider when the management token acts.",
            check=_email,
        ),
        "auditors": Key(
            list,
            [],
            "E-mail addresses of persons who may read the whole decision log (/api/audit) and decide "
            "nothing (D14).",
            item_kind=str,
            check=_emails,
        ),
    },
    "audit": {
        "origin": Key(
            str,
            None,
            "The decision log's origin line and log key name (D14). Default: the issuer's host + "
            '"/grantd".',
            check=_log_origin,
        ),
        "sequencer_interval_ms": Key(
            int,
            500,
            "How often the sequencer looks for new events to put into the log and sign a checkpoint "
            "for (milliseconds; one process holds the sequencer lease at a time). A new event is in a "
            "signed checkpoint within about this long plus one step; a longer interval makes larger "
            "steps, which cost less per event (docs/performance.md).",
            minimum=10,
            maximum=10_000,
        ),
        "sequencer": Key(
            str,
            "inline",
            'Where `grantd serve` integrates the log: "inline" (a background task in every server '
            'process; the lease holder works) or "process" (a process of its own beside the server '
            "processes: request latency under saturation does not share a core with the log, for "
            "about 60 MiB more and a little more CPU in all).",
            choices=("process", "inline"),
        ),
    },
    "storage": {
        "plugin": Key(str, "sqlite", "Storage plugin name (see `grantd plugins`)."),
        "path": Key(str, "grantd.db", "SQLite database file (relative to the config file)."),
        "dsn": Key(
            str,
            None,
            'PostgreSQL connection (plugin = "postgres"): a libpq string or postgresql:// URI. '
            "A secret: use file:PATH or env:NAME.",
            secret=True,
        ),
        "pool_size": Key(
            int,
            10,
            'Database connections per server process at most (plugin = "postgres").',
            minimum=1,
            maximum=200,
        ),
    },
    "tokens": {
        "agent_token_ttl": Key(
            int, 3600, "Lifetime in seconds of an agent identity token.", minimum=60, maximum=86400
        ),
        "agent_audience": Key(
            str, "apes-cli", "`aud` of agent identity tokens (the peer CLI expects apes-cli)."
        ),
        "challenge_ttl": Key(int, 60, "Seconds an agent challenge stays valid.", minimum=5, maximum=600),
        "agent_dpop": Key(
            str,
            "optional",
            "DPoP (RFC 9449) for agent tokens: off (never bound), optional (bound when the agent sends a "
            "DPoP proof; the peer CLI keeps working) or required (every agent token is bound to its key).",
            choices=("off", "optional", "required"),
        ),
        "dpop_nonce": Key(
            bool, False, "Require a current server nonce (DPoP-Nonce) in every DPoP proof (use_dpop_nonce)."
        ),
    },
    "ciba": {
        "request_ttl": Key(
            int,
            600,
            "Seconds an auth_req_id of /bc-authorize lives when the client asks for no requested_expiry "
            "(at most grants.pending_ttl).",
            minimum=10,
            maximum=86400,
        ),
        "notification_allow": Key(
            list,
            [],
            "Ping endpoints allowed beyond public https ones: CIDRs of address literals "
            '("10.0.0.0/8") or URL prefixes ("https://agents.internal/"); these also allow http.',
            item_kind=str,
            check=_ciba_allow,
        ),
    },
    "grants": {
        "allow_unauthenticated": Key(
            bool, False, "Allow grant requests without a credential (not recommended)."
        ),
        "pending_ttl": Key(
            int, 172_800, "Seconds a pending grant waits for a decision before it expires.", minimum=1
        ),
        "max_duration": Key(int, 2_592_000, "Longest `timed` grant in seconds.", minimum=60),
        "once_ttl": Key(
            int,
            3600,
            "Seconds an approved `once` grant stays usable; unused, it then expires (D6).",
            minimum=60,
            maximum=2_592_000,
        ),
        "events_heartbeat": Key(
            int, 15, "Seconds between heartbeat comments on GET /api/grants/events.", minimum=1, maximum=300
        ),
        "events_poll_ms": Key(
            int,
            200,
            "How often (ms) each server process looks for grant events written by other processes.",
            minimum=10,
            maximum=5000,
        ),
        "events_retention": Key(
            int, 86_400, "Seconds grant events are kept for Last-Event-ID resume.", minimum=60
        ),
        "expiry_sweep_interval": Key(
            int,
            5,
            "Seconds between sweeps that persist expiries (and send grant.expired events).",
            minimum=1,
            maximum=3600,
        ),
    },
    "limits": {
        # D12. Fixed windows of one minute, counted in the store (shared by every process and node);
        # a request over a limit gets 429 with Retry-After. 0 turns a limit off.
        "authenticate_per_agent": Key(
            int,
            120,
            "Challenge requests, and authenticate requests, per agent per minute (each counted on its own).",
            minimum=0,
        ),
        "authenticate_per_address": Key(
            int,
            300,
            "Failed challenge requests, and failed authenticate requests, per client address per minute "
            "(a valid agent is never refused because of other callers' failures from its address).",
            minimum=0,
        ),
        "enroll_per_address": Key(int, 600, "Agent enrolments per client address per minute.", minimum=0),
        "enroll_per_principal": Key(
            int,
            120,
            "Agent enrolments per enrolling principal (a person, an administrator, the management token) "
            "per minute, counted once it has authenticated (nobody else can spend its budget).",
            minimum=0,
        ),
        "failed_bearer_per_address": Key(
            int,
            50,
            "Refused bearer tokens (management token or identity token) per client address per minute; "
            "then every further wrong bearer from that address gets 429 until the minute ends, and a possible "
            "management-token guess waits 1 s before it is compared. A valid bearer is always accepted.",
            minimum=0,
        ),
        "grants_per_agent": Key(int, 120, "Grant requests per agent per minute.", minimum=0),
        "pending_per_agent": Key(
            int,
            100,
            "Pending (undecided, not expired) grants one agent may have at once.",
            minimum=0,
            maximum=1000,
        ),
        "agents_per_person": Key(
            int,
            100,
            "Agents one owner may have enrolled at once (D11; counted in the database; 0 turns it off).",
            minimum=0,
        ),
        "pending_per_owner": Key(
            int,
            200,
            "Pending grants across all agents of one owner (D11; counted in the database; 0 turns it off).",
            minimum=0,
        ),
        "verify_per_address": Key(
            int, 6000, "POST /api/grants/verify requests per client address per minute.", minimum=0
        ),
        "streams_per_principal": Key(
            int,
            8,
            "Open GET /api/grants/events streams per principal, per server process.",
            minimum=0,
        ),
        "streams_per_owner": Key(
            int,
            32,
            "Open GET /api/grants/events streams per person, per server process: their own, those of "
            "every agent they own, and the management token's for the management identity, together (a person "
            "cannot escape streams_per_principal by streaming as many agents).",
            minimum=0,
        ),
        "streams_per_process": Key(
            int, 1000, "Open event streams per server process (all principals).", minimum=0
        ),
        "passkey_per_person": Key(
            int,
            30,
            "Passkey sign-ins per person per minute, counted once the passkey verified (nobody else can "
            "spend the person's budget; a registration is bounded by its single-use link).",
            minimum=0,
        ),
        "passkey_per_address": Key(
            int,
            60,
            "Passkey sign-in options, failed sign-in verifications and failed registration verifications "
            "per client address per minute (each counted on its own, apart from the agents' counters; a "
            "valid passkey is never refused because of other callers' failures from its address).",
            minimum=0,
        ),
        "device_code_per_address": Key(
            int,
            30,
            "User codes of the device grant looked up or decided (GET /device?user_code=, POST "
            "/api/device/decide) per client address per minute: bounds guessing of user codes (RFC 8628 §5.1). "
            "Device authorizations started (POST /device_authorization) are counted apart, with the same limit.",
            minimum=0,
        ),
        "sp_login_per_address": Key(
            int,
            60,
            "SP logins started (POST /api/login: a DNS lookup and a request to an IdP each) per client "
            "address per minute.",
            minimum=0,
        ),
        "ipv6_prefix": Key(
            int,
            64,
            "Every per-address limit counts an IPv6 client by this prefix of its address (a client "
            "usually owns a whole /64); IPv4 addresses, and IPv4-mapped IPv6 addresses, count one by one.",
            minimum=32,
            maximum=128,
        ),
        "token_per_client": Key(
            int,
            600,
            "Requests to the OAuth token endpoint (and to /bc-authorize) per authenticated client per minute: "
            "an agent (client assertion) or a confidential client (its secret), counted once it has "
            "authenticated, so nobody else can spend its budget. Public clients (no secret) are limited per "
            "address only.",
            minimum=0,
        ),
        "token_per_address": Key(
            int,
            300,
            "Failed requests to the OAuth token endpoint (POST /token: code, refresh, client_credentials, "
            "exchange and polls alike; a pending poll is no failure) per client address per minute, and "
            "failed introspections apart: a valid credential is never refused because of other callers' "
            "failures from its address.",
            minimum=0,
        ),
    },
    "webauthn": {
        "rp_id": Key(
            str,
            None,
            "Relying party id of passkeys: a bare host name, no scheme or port, equal to the origin's "
            "host or a parent domain of it. Default: the issuer's host name. Changing it orphans every passkey.",
            check=_rp_id,
        ),
        "origin": Key(
            str,
            None,
            "The exact origin browsers show for this server (scheme://host[:port], no path). "
            "Default: the issuer's origin.",
            check=_origin,
        ),
        "rp_name": Key(str, "grantd", "Name browsers show when they create a passkey."),
    },
    "sessions": {
        "ttl": Key(
            int,
            28_800,
            "Seconds a browser session lives after sign-in (absolute: activity does not extend it).",
            minimum=300,
            maximum=2_592_000,
        ),
    },
    "people": {
        "registration_ttl": Key(
            int,
            86_400,
            "Seconds a registration URL (/register?token=...) stays usable when its creator names "
            "no expiry; it is single use either way.",
            minimum=60,
            maximum=2_592_000,
        ),
        "first_admin": Key(
            str,
            None,
            "E-mail of an administrator that `grantd serve` creates at start and, while they have no "
            "passkey, prints a registration link for on its terminal (never in the log). The development config "
            "sets admin@localhost; unset: none.",
            check=_email,
        ),
    },
    "federation": {
        "providers": Key(
            list,
            [],
            "Upstream identity providers, one [[federation.providers]] table each: id (unique, "
            "letters, digits, . _ -), type (a provider type from a plugin; built in: oidc), name (shown on the "
            "login page; default: the id) and the type's own keys. Secrets as file:PATH or env:NAME. "
            "Listed publicly, without secrets, at GET /api/federation/providers; /login offers each as a button "
            "(docs/federation.md). Register {issuer}/auth/federated/<id>/callback as the redirect URI upstream.",
            item_kind=dict,
            example="""[[federation.providers]]
id = "corp"
type = "oidc"
name = "Corp SSO"
issuer = "https://sso.example.com"   # https; http only on localhost/127.0.0.1/::1
client_id = "grantd"
client_secret = "file:corp-sso-secret"   # optional when the upstream offers "none" (no secret is sent then)
# scopes = ["openid", "email", "profile"]
# email_claim = "email"                # the id_token claim with the e-mail (email_verified must be true)
# allowed_domains = ["example.com"]    # empty: any domain
# create_unknown = false               # true: a verified e-mail grantd does not know becomes a new person
# trust_email = false                  # true: the upstream never sends email_verified; absent counts as verified
#                                      # (an explicit false is always refused; allowed_domains still applies)""",
        ),
    },
    "oauth": {
        "access_token_ttl": Key(
            int,
            900,
            "Lifetime in seconds of OAuth access tokens (and of ID tokens' refresh: ID tokens live 300 s).",
            minimum=60,
            maximum=86_400,
        ),
        "refresh_token_ttl": Key(
            int,
            2_592_000,
            "Absolute lifetime in seconds of a refresh-token family (rotation does not extend it).",
            minimum=300,
            maximum=31_536_000,
        ),
        "metadata_cache_ttl": Key(
            int,
            300,
            "Seconds a domain client's fetched /.well-known/oauth-client-metadata (or the failure to "
            "fetch it) is remembered.",
            minimum=0,
            maximum=86_400,
        ),
        "metadata_failure_ttl": Key(
            int,
            120,
            "Seconds a registrable domain whose client metadata could not be fetched (not resolvable, "
            "no complete answer within 5 s, an error status, not JSON) is not asked again: every client_id under it is refused "
            "meanwhile (wildcard DNS makes endless names of one domain). 0: only the client_id's own cache.",
            minimum=0,
            maximum=86_400,
        ),
        "fetches_at_once": Key(
            int,
            32,
            "How many fetches made for callers (client metadata; IdP discovery documents, JWKS and token "
            "requests of SP login) may run at once in one server process; one more is refused at once with a "
            "clear error, never queued. Each has one overall deadline of 5 s.",
            minimum=1,
            maximum=10_000,
        ),
        "device_code_ttl": Key(
            int,
            600,
            "Seconds a device authorization request (RFC 8628: grantd login, grantd tui) waits for a "
            "person to enter its user code on /device.",
            minimum=60,
            maximum=3600,
        ),
        "device_poll_interval": Key(
            int,
            5,
            "Seconds a device client must wait between polls of /token (faster polls get slow_down, "
            "which adds 5 s).",
            minimum=1,
            maximum=60,
        ),
        "ca_file": Key(
            str,
            None,
            "A PEM bundle of extra certificate authorities trusted (besides the system's) when grantd "
            "fetches a Client ID Metadata Document (an https URL as client_id, D17): for private CAs and "
            "tests. Relative to the config file.",
        ),
        "allow_private_metadata_hosts": Key(
            bool,
            False,
            "Tests only: let client metadata come from loopback, private or link-local addresses, "
            "and over http. Never in production (it opens the metadata fetch to SSRF).",
        ),
        "clients": Key(
            list,
            [],
            "OAuth clients registered here, one [[oauth.clients]] table each: client_id, name, "
            "redirect_uris (exact), optional client_secret (file:PATH or env:NAME; then a confidential client "
            "using client_secret_basic or client_secret_post), id_token_signed_response_alg (EdDSA, ES256 or "
            "RS256), api_access (its access tokens may call grantd's /api as the person). Other clients are "
            "SPs identified by their domain, whose metadata is fetched.",
            item_kind=dict,
            example="""[[oauth.clients]]
client_id = "wiki"
name = "Team wiki"
redirect_uris = ["https://wiki.example.com/oauth/callback"]
client_secret = "file:wiki-client-secret"   # made by: grantd config secret wiki-client-secret (URL-safe: see docs/oauth.md)
# id_token_signed_response_alg = "RS256"
# api_access = false""",
        ),
    },
    "mcp": {
        "resources": Key(
            list,
            [],
            "Resources (MCP servers) grantd issues tokens for (D17, docs/mcp.md), one [[mcp.resources]] "
            "table each: resource (its canonical https URI: no fragment, no trailing slash; the RFC 8707 "
            "resource parameter must name it), name, scopes (the scopes a client may ask for it), "
            "credential (file:PATH or env:NAME: the password it presents at POST /introspect), "
            "grant_scopes (scope -> {policy?, grant_type = once|timed|always}: scopes that need a "
            "person's grant each time).",
            item_kind=dict,
            example="""[[mcp.resources]]
resource = "https://mcp.example.com/mcp"
name = "Deploy tools"
scopes = ["tools:read", "tools:deploy"]
credential = "file:mcp-introspect-secret"
[mcp.resources.grant_scopes]
"tools:deploy" = { policy = "prod-deploy", grant_type = "once" }""",
        ),
        "cimd_allowed_domains": Key(
            list,
            [],
            "Host names (or parent domains) whose https URLs may be a client_id (Client ID Metadata "
            "Documents); empty: any https URL. For closed deployments.",
            item_kind=str,
        ),
    },
    "sp": {
        "enabled": Key(
            bool,
            False,
            "Be a service provider: people log in here at the identity provider their e-mail domain "
            "names in DNS (DDISA TXT _ddisa.<domain>) or at fallback_idp, as guests (POST /api/login, "
            "/api/callback, docs/sp.md). Off: those routes and the SP well-knowns answer 404.",
        ),
        "client_id": Key(
            str,
            None,
            "The client id this SP presents to identity providers (they fetch "
            "https://<client_id>/.well-known/oauth-client-metadata). Default: the issuer's host[:port].",
            check=_client_id,
        ),
        "fallback_idp": Key(
            str,
            None,
            "Identity provider (issuer URL) for e-mail domains without a DDISA record. Unset: such "
            'logins fail with "could not discover IdP for this email domain".',
            check=_no_trailing_slash_url,
        ),
        "nameservers": Key(
            list,
            [],
            'DNS servers for DDISA discovery: IP addresses, with an optional port ("10.0.0.53", '
            '"127.0.0.1:5353", "[::1]:53"). Default: the system\'s resolvers.',
            item_kind=str,
            check=_nameservers,
        ),
        "allow_http_idp": Key(
            bool,
            False,
            "Tests only: accept http:// identity providers and ones on loopback or private "
            "addresses. Never in production (plain http exposes codes and tokens; private addresses open "
            "discovery to SSRF).",
        ),
        "dns_cache_ttl": Key(
            int,
            300,
            "Longest time in seconds a DDISA answer is remembered (shorter when the record's TTL is).",
            minimum=0,
            maximum=86_400,
        ),
        "dns_negative_cache_ttl": Key(
            int,
            60,
            "Seconds the absence of a DDISA record (or a failed lookup) is remembered.",
            minimum=0,
            maximum=86_400,
        ),
    },
    "notify": {
        "link_ttl": Key(
            int,
            1800,
            "Seconds a review link ({issuer}/r/<token>) sent in a notice stays usable (never past the "
            "grant's pending time). Opening one never changes anything; approving from it needs the "
            "intended person's passkey (D15, docs/notifications.md).",
            minimum=60,
            maximum=86_400,
        ),
        "allowed_push_hosts": Key(
            list,
            [],
            "Push services a browser's Web Push subscription may point at (exact host names, or *.domain); "
            "the default of every webpush channel. Empty: FCM, Mozilla, Apple and Windows push services "
            "(fcm.googleapis.com, updates.push.services.mozilla.com, *.push.apple.com, *.notify.windows.com). "
            "Endpoints must also be https and resolve to public addresses.",
            item_kind=str,
        ),
        "allow_private_push_hosts": Key(
            bool,
            False,
            "Tests only: let push endpoints resolve to loopback or private addresses, and use http on "
            "loopback. Never in production (it opens Web Push delivery to SSRF).",
        ),
        "deny_from_chat": Key(
            bool,
            False,
            "Default of the ntfy and webhook channels: a pending notice carries a single-use deny link "
            "that denies with a POST. Nothing in any notice ever approves.",
        ),
        "vapid_private_key": Key(
            str,
            None,
            "The P-256 key Web Push messages are signed with (VAPID), as file:PATH or env:NAME only; the "
            "default of every webpush channel. Make one with `openssl ecparam -name prime256v1 -genkey "
            "-noout | openssl pkcs8 -topk8 -nocrypt -out vapid.pem`.",
            check=_secret_reference,
        ),
        "vapid_subject": Key(
            str,
            None,
            "How push services reach the operator (mailto: or https: URI): the default subject of every "
            "webpush channel.",
        ),
        "max_attempts": Key(
            int,
            8,
            "Attempts to deliver one notice before it is marked failed (retries back off exponentially: "
            "5 s, 10 s, 20 s ... at most 15 min apart).",
            minimum=1,
            maximum=50,
        ),
        "poll_ms": Key(
            int,
            1000,
            "Milliseconds between the delivery worker's looks at the outbox in each server process "
            "(a notice written by this process is looked at at once).",
            minimum=50,
            maximum=60_000,
        ),
        "channels": Key(
            list,
            [],
            "Where approvers are told a grant waits for them, one [[notify.channels]] table each: id, type "
            "(a channel type from a plugin; built in: smtp, webpush, ntfy, webhook) and the type's keys; "
            "secrets only as file:PATH or env:NAME (docs/notifications.md has a complete table of each type).",
            item_kind=dict,
            example="""[[notify.channels]]
id = "mail"
type = "smtp"
host = "smtp.example.com"
username = "grantd"
password = "file:smtp-password"
from = "grantd@example.com\"""",
        ),
        "routes": Key(
            list,
            [],
            "Which channels carry a notice, one [[notify.routes]] table each, the first match wins: "
            'match.policies (pinned policy ids; "default" for the default policy), match.levels '
            '(escalation levels, 0 = the first request), channels (ids), per_approver_limit ("6/min": '
            "more pending notices to one approver on one channel wait for one digest). None: every channel.",
            item_kind=dict,
            example="""[[notify.routes]]
match.policies = ["prod-root"]
channels = ["mail"]
per_approver_limit = "6/min\"""",
        ),
    },
    "plugins": {
        "modules": Key(
            list, [], "Extra plugin modules to import and register (importable names).", item_kind=str
        ),
        "paths": Key(
            list,
            [],
            "Directories to import those modules from (relative to this file; not writable by others). "
            "The bundle ignores PYTHONPATH, so this is how it finds site plugins.",
            item_kind=str,
        ),
    },
}

SECTION_HELP = {
    "server": "HTTP server",
    "log": "Logging",
    "metrics": "Prometheus metrics (docs/operations.md lists the series)",
    "admin": "Administration",
    "audit": "The decision log: a Merkle log of every decision with signed checkpoints (D14; docs/audit.md)",
    "storage": "Storage",
    "tokens": "Agent identity tokens",
    "ciba": "CIBA: agents ask a person through /bc-authorize, poll or ping (D16; docs/protocols.md)",
    "grants": "Grants",
    "limits": "Abuse limits (D12): per client address and per identity; 0 turns one off",
    "people": "People: persons, their registration URLs",
    "webauthn": "Passkeys (WebAuthn): relying party id and origin, checked exactly",
    "sessions": "Browser sessions of people (cookie grantd_session)",
    "federation": "Federation: people sign in through upstream identity providers",
    "oauth": "OAuth 2.0 / OpenID provider: tokens, clients (docs/oauth.md)",
    "mcp": "Authorization server for MCP servers: resources and their scopes (D17; docs/mcp.md)",
    "sp": "Service provider: log people in at the IdP their e-mail domain names (DDISA; docs/sp.md)",
    "notify": "Reaching approvers: mail, Web Push, ntfy and chat (D15; docs/notifications.md)",
    "plugins": "Plugins",
}

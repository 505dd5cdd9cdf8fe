"""pluggy hook specifications: the contract between grantd and its plugins.

One prefix per kind of plugin: ``storage_*``, ``federation_*``, ``notification_*``, ``elevate_*``
(defined in grantd.elevate.hookspecs and named here), plus ``startup`` and ``register_routes``. Hook
implementations take only the parameters they need and never give them defaults (pluggy does
not pass defaults). Keep imports here light: this module is imported by every plugin.

Every hook below is described for plugin authors in docs/plugins.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import pluggy

# The elevation tool's spec lives with the tool (it runs as root and imports nothing of the server);
# named here too, so that the server's plugin manager, which adds this module, knows every hook.
from grantd.elevate.hookspecs import PROJECT
from grantd.elevate.hookspecs import elevate_verify as elevate_verify

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    import httpx
    from sanic import Sanic

    from grantd.config import Config, ConfigSection
    from grantd.store import Store

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def storage_backends() -> dict[str, Callable[[Config], Store]]:
    """Storage backends this plugin provides: ``{name: factory(config) -> Store}``.

    The backend named by ``[storage] plugin`` in the config is used. A factory must return an
    object implementing :class:`grantd.store.Store`; it is called once per server process.
    """


@hookspec
def config_sections() -> Sequence[ConfigSection]:
    """Parts of the config file this plugin owns (grantd.config.extensions.ConfigSection): their
    top-level keys (``notify``, ``[[channels]]``, ...) are then known, and the section's ``parse``
    checks them with the rest of the file (every problem with its key path, reported by ``grantd
    config validate`` and at start); its value is ``config.extra[section.name]``. It must only
    check (no I/O beyond reading secrets). A plugin loaded through ``[plugins] modules`` declares
    its sections for the same file that loads it.
    """


@hookspec
def federation_provider_types() -> dict[str, Callable[[dict[str, Any], Callable[[str], str]], Any]]:
    """Kinds of upstream identity providers this plugin can federate to: ``{type: factory}``.

    ``factory(table, read_secret)`` receives one ``[[federation.providers]]`` table whose
    ``type`` names it (``id``, ``type`` and ``name`` already checked by grantd) and a function
    ``read_secret(key)`` that resolves a ``file:PATH`` / ``env:NAME`` value of that table. It
    returns a provider object (:class:`FederationProviderObject`: ``id``, ``name``,
    ``public_info()``, and the async ``begin`` and ``finish`` of the sign-in round trip), or raises
    ``ValueError("key: what is wrong")`` (several problems: one per line), which grantd reports as
    a config error at ``federation.providers[N].key``. Called when the server starts and by
    ``grantd config validate``; it must do no network I/O.
    """


# -- the provider object of a federation provider type ---------------------------------------------
#
# grantd runs the round trip (grantd.web.api.federation): GET /auth/federated/{id} draws a random
# ``state``, calls ``begin`` and keeps what it returns server-side (single use, 10 minutes, bound to
# the browser by a cookie); the upstream sends the browser back to
# GET /auth/federated/{id}/callback?state=...&..., grantd takes the kept record by ``state`` and calls
# ``finish`` with the callback's parameters. ``finish`` returns who the upstream vouches for; grantd
# then applies the rules every type shares (a verified e-mail, ``allowed_domains``, who may sign in,
# ``create_unknown``) and starts an ordinary browser session.


@dataclass(frozen=True)
class FederationContext:
    """What grantd hands ``begin`` and ``finish``.

    - ``issuer``: grantd's own issuer URL (no trailing slash);
    - ``http``: an ``httpx.AsyncClient`` for calls to the upstream (timeouts set, redirects not
      followed), open for the duration of the call;
    - ``now()``: seconds since the epoch by grantd's clock (use it for ``exp``/``iat`` checks and
      cache ages, never ``time.time()``: the tests move this clock).
    """

    issuer: str
    http: httpx.AsyncClient
    now: Callable[[], int]


@dataclass(frozen=True)
class FederationStart:
    """What ``begin`` returns: ``url``, where the browser goes now (the upstream's authorization
    page, carrying ``state`` and ``redirect_uri``), and ``kept``, JSON-ready data grantd stores
    server-side under ``state`` and hands back to ``finish`` (PKCE verifier, nonce...). ``kept``
    never reaches the browser."""

    url: str
    kept: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FederatedIdentity:
    """Who the upstream vouches for, as ``finish`` verified it.

    ``subject`` is the upstream's stable id of the person (``sub``); ``email`` the address to
    sign in (grantd lowercases it); ``email_verified`` whether the upstream says it verified that
    address (grantd refuses the sign-in unless it is True); ``name`` a display name, used only
    when ``create_unknown`` creates the person."""

    subject: str
    email: str
    email_verified: bool
    name: str | None = None


class FederationError(Exception):
    """Raised by ``begin``/``finish``: the sign-in cannot go on. ``message`` is shown to the person
    on an error page, so write it for them ("the provider refused the sign-in: access_denied"),
    without secrets. ``status``: 400 for a bad or refused answer, 403 for an identity that may not
    sign in, 503 when the upstream cannot be reached or answers nonsense (the sign-in is not available
    right now). grantd shows any other status as 400."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message = message
        self.status = status


@runtime_checkable
class FederationProviderObject(Protocol):
    """The object a ``federation_provider_types`` factory returns.

    Optional attributes grantd reads with these defaults: ``allowed_domains: tuple[str, ...] = ()``
    (e-mail domains that may sign in; empty: any) and ``create_unknown: bool = False`` (whether a
    verified e-mail grantd does not know yet becomes a new person).
    """

    id: str
    name: str

    def public_info(self) -> dict[str, Any]:
        """What anyone may see (``GET /api/federation/providers``): JSON-ready, never a secret."""

    async def begin(self, ctx: FederationContext, *, redirect_uri: str, state: str) -> FederationStart:
        """Start a sign-in: the upstream URL to send the browser to, which must bring ``state``
        back unchanged as the ``state`` query parameter of ``redirect_uri``
        (``{issuer}/auth/federated/{id}/callback``), and the data to keep for ``finish``."""

    async def finish(
        self, ctx: FederationContext, *, redirect_uri: str, params: Mapping[str, str], kept: dict[str, Any]
    ) -> FederatedIdentity:
        """Complete a sign-in from the callback's query ``params`` (first value of each) and the
        ``kept`` data of ``begin``: verify what the upstream answered (never trust an unverified
        token) and return the identity, or raise :class:`FederationError`."""


@hookspec
def startup(app: Sanic, config: Config) -> None:
    """Called in every server process once the app is built, before it serves requests."""


@hookspec
def register_routes(app: Sanic, config: Config) -> None:
    """Add routes or blueprints to the app. Routes under /api/ should answer problem+json errors."""


@hookspec
def notification_channel_types() -> dict[str, ChannelType]:
    """Kinds of channels that tell approvers a grant waits for them: ``{type: ChannelType}``.

    A ``[[notify.channels]]`` table names its type with ``type``; grantd checks ``id`` and
    ``type``, refuses keys the type does not declare in ``ChannelType.keys`` (with a "did you
    mean"), then calls ``ChannelType.build(table, read_secret)``, where ``read_secret(key)``
    resolves a ``file:PATH`` / ``env:NAME`` value of that table (a secret written inline is
    refused). ``build`` returns a :class:`NotificationChannel` or raises
    ``ValueError("key: what is wrong")`` (several problems: one per line), reported at
    ``notify.channels[N].key``; it must do no network I/O. grantd.notify.channel_types and
    grantd.notify.build_channels call this hook.
    """


# -- notification channels (grantd.notify; docs/notifications.md) ---------------------------------
#
# grantd renders one message per notice with grantd.notify.message.render (every value escaped with
# the one escaping rule, the full command only with the channel's ``include_command = true``) and
# hands it with one recipient to the channel's ``send``. A channel turns it into its own wire format
# (mail, an encrypted push message, JSON), escaping for its own markup on top.


@dataclass(frozen=True)
class ChannelType:
    """What a ``notification_channel_types`` entry declares.

    - ``keys``: the keys a table of this type may have besides ``id`` and ``type``;
    - ``build(table, read_secret)``: the channel object (see the hook);
    - ``secrets``: keys whose values are secrets: only ``file:PATH`` or ``env:NAME``;
    - ``description``: one line for ``grantd plugins`` and the docs.
    """

    keys: tuple[str, ...]
    build: Callable[[dict[str, Any], Callable[[str], str]], NotificationChannel]
    secrets: tuple[str, ...] = ()
    description: str = ""


@dataclass(frozen=True)
class ChannelContext:
    """What grantd hands ``send``: ``issuer`` (its own URL, no trailing slash) and ``now()``, seconds
    since the epoch by grantd's clock (VAPID ``exp``, webhook timestamps; never ``time.time()``).
    ``spend_signature(header)``: a channel that signs what it sends with a secret its callbacks are
    signed with too (a webhook's ``X-Grantd-Signature``) hands grantd each header before sending, so
    that the message itself, posted back, is refused as a replay instead of counting as a callback."""

    issuer: str
    now: Callable[[], int]
    spend_signature: Callable[[str], Awaitable[object]] | None = None


@dataclass(frozen=True)
class Notice:
    """One rendered message (grantd.notify.message.render). Every text value is already escaped
    with grantd.core.display: a channel adds only the escaping of its own markup.

    - ``kind``: ``review_requested``, ``escalated``, ``resolved`` or ``digest``;
    - ``grant_ids``: the grant it is about (several for a digest);
    - ``topic``: a key that lets a later notice replace this one (Web Push ``Topic``, at most 32
      base64url characters; the same for every notice of one grant), or None;
    - ``title``: one line; ``fields``: (label, value) lines: agent, host, run as, program and, only
      with ``include_command = true``, the whole command; ``text``: a sentence for the reader;
    - ``link``: where to review (a review link that needs the person's passkey to approve), or None;
    - ``deny_link``: only with ``deny_from_chat = true`` on a pending notice: a single-use link
      that denies with a POST (a GET never changes anything); nothing in a notice ever approves;
    - ``urgency``: Web Push ``Urgency`` (``high`` while a decision is wanted, else ``normal``).
    """

    kind: str
    grant_ids: tuple[str, ...]
    topic: str | None
    title: str
    fields: tuple[tuple[str, str], ...]
    text: str
    link: str | None
    deny_link: str | None = None
    urgency: str = "normal"


@dataclass(frozen=True)
class Recipient:
    """Whom one ``send`` tells: ``email`` (a person's address), ``name`` (display), and what the
    person set up for channels that need it: ``topic`` (their ntfy topic) and ``subscription``
    (their Web Push subscription: ``{"endpoint": ..., "keys": {"p256dh": ..., "auth": ...}}``)."""

    email: str
    name: str | None = None
    topic: str | None = None
    subscription: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class DeliveryResult:
    """What one ``send`` achieved: ``sent``; ``failed`` (``retryable``: a later attempt may work:
    a timeout, a 5xx, a 429; not: the service refused the message for good); ``gone`` (the
    recipient's address no longer exists: a push service's 404/410; grantd removes it).
    ``error`` is shown to operators: never a secret or a response body.

    ``channel_down`` (``DeliveryResult.down``): a retryable failure of the channel's service as a
    whole, not of this notice: it refused or dropped the connection, timed out, or answered what
    it would answer any notice (a webhook's 503). The delivery worker then rests the channel: its
    other notices wait, unattempted, until one probe gets through (grantd.services.notify_delivery).
    A channel whose notices go to different services (Web Push: one per subscription) never says
    it."""

    status: str  # sent | failed | gone
    retryable: bool = False
    error: str | None = None
    channel_down: bool = False

    @classmethod
    def sent(cls) -> DeliveryResult:
        return cls("sent")

    @classmethod
    def failed(cls, error: str, *, retryable: bool) -> DeliveryResult:
        return cls("failed", retryable, error)

    @classmethod
    def down(cls, error: str) -> DeliveryResult:
        return cls("failed", True, error, channel_down=True)

    @classmethod
    def gone(cls, error: str) -> DeliveryResult:
        return cls("gone", False, error)


@runtime_checkable
class NotificationChannel(Protocol):
    """The object ``ChannelType.build`` returns.

    ``options`` holds what grantd reads when it renders for this channel: ``include_command``
    (bool, default False) and ``deny_from_chat`` (bool, default False)."""

    @property
    def id(self) -> str:
        """The ``id`` of its ``[[notify.channels]]`` table."""

    @property
    def type(self) -> str:
        """The channel type's name."""

    @property
    def options(self) -> Mapping[str, Any]:
        """``include_command`` and ``deny_from_chat`` (what grantd renders for this channel)."""

    def public_info(self) -> dict[str, Any]:
        """What a signed-in person may see about the channel: JSON-ready, never a secret."""

    async def send(self, ctx: ChannelContext, notice: Notice, recipient: Recipient) -> DeliveryResult:
        """Deliver one notice to one recipient. Never raises for a delivery problem: returns
        ``DeliveryResult.failed`` or ``gone``."""

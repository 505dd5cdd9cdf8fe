"""Abuse limits (D12): how many attempts a client address or an identity may make, in one place.

Every limit is a fixed window of one minute counted in the store (``store.rates``), so all server
processes and nodes count the same attempts. An attempt over a limit is answered 429 problem+json
with ``Retry-After`` (seconds until the window ends) and a detail naming the limit. A limit set to
0 in ``[limits]`` is off. Services never see the request: the web layer passes the client address
(``request.ctx.client_ip``, which honours ``server.trusted_proxies``).

What is counted where:

- challenge and authenticate: per agent, every attempt (each route its own counter); per client
  address, the failed ones only (``failed``);
- /token (and /introspect apart): per client address, the failed requests only (``failed``); per
  authenticated client (an agent, a confidential client; /bc-authorize too), once it authenticated;
- agent enrolment: per client address, and per enrolling principal once it has authenticated;
- passkey sign-in: options per client address; verifications per client address on failure only,
  and per person once the passkey verified (a registration is bounded by its single-use link);
- grant requests: per agent, plus a bound on the agent's pending grants (counted, not rated);
- grant verification: per client address;
- refused bearer tokens (the authentication chain, ``grantd.services.authn``): per client
  address. A presented bearer is always checked, and a valid one always accepted: a valid
  credential is never refused because of other callers' failures from the same address (a NAT,
  an untrusted proxy). Once an address has had ``failed_bearer_per_address`` bearers refused in
  the window, every further refused bearer from it is 429 instead of 401, and a bearer that could
  be the management token is compared only after ``BEARER_TARPIT_S`` (one second), so guessing
  the management token from that address goes at one guess per second per connection, and a
  guess learns no more from the wait than from the answer. Accepted bearers are never counted.
  The tarpit slows, it does not cap: parallel connections wait their second each (a cap would let
  a guesser lock the real token out again); what makes guessing hopeless is the management
  token's length (at least 16 characters, `grantd config init` makes a random one).

Where a request presents a credential, its client address is charged only for failures (D12: a
valid credential is never refused because of other callers' failures from the same address): the
request is handled whatever the address's count; a success is neither counted nor refused; a failure
is counted, and answered 429 instead of its own error once the address is over its budget.

Client addresses are counted by ``grantd.client_address.limit_key``: IPv4 addresses one by one
(IPv4-mapped IPv6 ones as IPv4), IPv6 addresses per ``limits.ipv6_prefix`` network (default /64),
since one IPv6 client usually owns a whole /64. A rule counts addresses when its name ends in
``.address`` (``Rule.per_address``).

Open event streams are bounded by the hub (``grantd.services.events``), per process: per principal,
per owner (a person together with every agent they own, so streaming as many agents does not
escape the per-principal bound) and per process.

A fixed window lets a client spend up to twice a limit around a window boundary; that is the
price of one counter per key and window, and still bounds every client to a small multiple of
the limit over any longer time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grantd.client_address import limit_key
from grantd.config import Config
from grantd.core.clock import Clock
from grantd.core.errors import Problem
from grantd.core.lifecycle import Lapse
from grantd.core.principals import Principal
from grantd.store import LimitReached, PendingBound, RateStore

if TYPE_CHECKING:
    from grantd.services.context import Services

WINDOW_MS = 60_000
BEARER_TARPIT_S = 1.0  # the wait before a possible management-token guess from a shut-out address
PENDING_RETRY_AFTER = 60  # seconds: pending grants clear only when decided, withdrawn or expired


@dataclass(frozen=True)
class Rule:
    """One counted limit: ``limit`` attempts per window per subject (0 = off)."""

    name: str  # the counter's key prefix, e.g. "authenticate.address"
    limit: int
    what: str  # "too many authentication attempts"

    @property
    def per_address(self) -> bool:
        """A rule whose name ends in ``.address`` counts client addresses: its subject is keyed by
        ``grantd.client_address.limit_key`` (IPv6 per ``limits.ipv6_prefix`` network)."""
        return self.name.endswith(".address")


def _ignore(limit: str) -> None:
    pass


def too_many(detail: str, retry_after: int) -> Problem:
    return Problem(429, f"{detail}; retry in {retry_after} s", headers={"Retry-After": str(retry_after)})


class Limits:
    """The limits of one server process, read from ``[limits]``."""

    def __init__(self, config: Config, rates: RateStore, clock: Clock):
        limits = config.limits
        self.rates = rates
        self.clock = clock
        auth = "too many authentication attempts"
        self.challenge_address = Rule("challenge.address", limits.authenticate_per_address, auth)
        self.challenge_agent = Rule("challenge.agent", limits.authenticate_per_agent, auth)
        self.authenticate_address = Rule("authenticate.address", limits.authenticate_per_address, auth)
        self.authenticate_agent = Rule("authenticate.agent", limits.authenticate_per_agent, auth)
        self.enroll_address = Rule("enroll.address", limits.enroll_per_address, "too many enrolments")
        self.enroll_principal = Rule("enroll.principal", limits.enroll_per_principal, "too many enrolments")
        self.token_client = Rule("token.client", limits.token_per_client, "too many token requests")
        self.passkey_person = Rule("passkey.person", limits.passkey_per_person, "too many passkey sign-ins")
        self.grants_agent = Rule("grants.agent", limits.grants_per_agent, "too many grant requests")
        self.verify_address = Rule(
            "verify.address", limits.verify_per_address, "too many verification requests"
        )
        self.failed_bearer_address = Rule(
            "bearer-failed.address",
            limits.failed_bearer_per_address,
            "too many failed authentication attempts",
        )
        self.ipv6_prefix: int = limits.ipv6_prefix
        self.pending_per_agent: int = limits.pending_per_agent
        self.pending_per_owner: int = limits.pending_per_owner
        self.streams_per_principal: int = limits.streams_per_principal
        self.streams_per_owner: int = limits.streams_per_owner
        self.streams_per_process: int = limits.streams_per_process
        # Told the name of every limit that refuses a request (the metrics count them; no-op otherwise),
        # and "bearer-failed.tarpit" for every bearer check slowed by an address over its budget.
        self.on_refused: Callable[[str], None] = _ignore

    # -- the counting rule ------------------------------------------------------------------------
    def _window(self) -> tuple[int, int, int]:
        """(now, start of the current window, whole seconds until it ends — at least 1)."""
        now = self.clock.now_ms()
        start = now - now % WINDOW_MS
        return now, start, max(1, -(-(start + WINDOW_MS - now) // 1000))

    def key(self, rule: Rule, subject: str) -> str:
        """The counter of ``subject`` under ``rule``: client addresses by ``limit_key`` (one IPv6
        client owns a whole prefix), everything else as it is."""
        return f"{rule.name}:{limit_key(subject, self.ipv6_prefix) if rule.per_address else subject}"

    async def hit(self, rule: Rule, subject: str | None) -> None:
        """Count one attempt of ``subject``; 429 if it is over the limit (the attempt is counted
        either way, so hammering a closed door keeps it closed until the window ends)."""
        if rule.limit <= 0 or not subject:
            return
        now, start, retry_after = self._window()
        if await self.rates.hit(self.key(rule, subject), start, WINDOW_MS, now) > rule.limit:
            self.on_refused(rule.name)
            raise too_many(rule.what, retry_after)

    # -- where the limits apply -------------------------------------------------------------------
    async def failed(self, rule: Rule, subject: str | None) -> None:
        """A request that presented a credential failed (its own 4xx error is on its way): count it
        against ``subject`` (its client address) and answer 429 instead once it is over ``rule``'s
        budget. Successes are never counted against an address (D12, see the module's text)."""
        await self.hit(rule, subject)

    async def sign_in(self, services: Services, body: dict[str, Any], *, step: str) -> None:
        """A challenge (``step="challenge"``) or authenticate request, before it is handled: per
        agent, every attempt. The agent is resolved from ``agent_id``/``id`` (its id or e-mail, so
        both names share one counter); an unknown or malformed one is counted only as a failure of
        its address (``sign_in_failed``: it gets 404/400)."""
        by_agent = self.challenge_agent if step == "challenge" else self.authenticate_agent
        if by_agent.limit <= 0:
            return
        ident = body.get("agent_id") if body.get("agent_id") is not None else body.get("id")
        if isinstance(ident, str) and ident.strip() and len(ident) <= 254:
            agent = await services.store.agents.get(ident.strip())
            if agent is not None:
                await self.hit(by_agent, agent["agent_id"])

    async def sign_in_failed(self, address: str | None, *, step: str) -> None:
        """A challenge or authenticate request failed (an unknown agent, a bad signature, ...)."""
        await self.failed(
            self.challenge_address if step == "challenge" else self.authenticate_address, address
        )

    async def enrol(self, address: str | None, principal: Principal) -> None:
        """An enrolment by an authenticated ``principal``: per address and per principal."""
        await self.hit(self.enroll_address, address)
        await self.hit(self.enroll_principal, principal.id)

    async def token_request(self, client: str) -> None:
        """A /token request whose client authenticated (an agent's id, a confidential client's id)."""
        await self.hit(self.token_client, client)

    async def passkey_verified(self, person_id: str) -> None:
        """A passkey sign-in or registration verified for ``person_id`` (before its session starts)."""
        await self.hit(self.passkey_person, person_id)

    async def verify(self, address: str | None) -> None:
        await self.hit(self.verify_address, address)

    async def grant_request(self, principal: Principal | None) -> None:
        """An agent asks for a grant: its rate. Other principals (the management token, people)
        are not limited here. The bounds on pending grants are counted in the grant's own
        transaction (``pending_bound``)."""
        agent_id = principal.agent_id if principal is not None else None
        if agent_id is None:
            return
        await self.hit(self.grants_agent, agent_id)

    def pending_bound(self, principal: Principal | None, lapse: Lapse) -> PendingBound:
        """D11, D12: the bounds a new pending grant is counted against in its insert's transaction
        (exact under concurrent requests; its cost does not grow with the pending grants): its
        owner's agents' (``pending_per_owner``), and for an agent's own request its own
        (``pending_per_agent``; the management token's requests on its behalf are not bounded per
        agent)."""
        per_agent = self.pending_per_agent if principal is not None and principal.agent_id else 0
        return PendingBound(self.pending_per_owner, lapse, per_agent)

    def pending_refused(self, reached: LimitReached) -> Problem:
        """The 429 of a bound ``pending_bound`` set, as the store reported it reached."""
        if reached.limit == "pending_per_agent":
            self.on_refused("pending.agent")
            what = f"too many pending grants (at most {reached.bound})"
        else:
            self.on_refused("pending.owner")
            what = f"too many pending grants across this agent's owner's agents (at most {reached.bound})"
        return too_many(f"{what}: wait for decisions or withdraw some", PENDING_RETRY_AFTER)

    async def bearer_allowed(self, address: str | None, *, could_be_management_token: bool) -> None:
        """Before a presented bearer is checked. Nothing is refused here: a valid bearer is always
        checked and accepted, whoever else failed from the same address (D12). While the address is
        over its budget of refused bearers, a bearer that could be the management token (anything
        but a signed token, which no guess passes) is compared only after ``BEARER_TARPIT_S``, so
        guesses from that address are slowed — a right one too, so the wait tells nothing."""
        if not could_be_management_token or self.failed_bearer_address.limit <= 0 or not address:
            return
        _, start, _ = self._window()
        key = self.key(self.failed_bearer_address, address)
        if await self.rates.count(key, start) >= self.failed_bearer_address.limit:
            self.on_refused("bearer-failed.tarpit")
            await asyncio.sleep(BEARER_TARPIT_S)

    async def bearer_refused(self, address: str | None) -> None:
        """A presented bearer was refused: count it against the address; 429 instead of 401 once
        the address has had more than ``failed_bearer_per_address`` refused in this window."""
        await self.hit(self.failed_bearer_address, address)

    def stream_slots(self, open_of_principal: int, open_of_owner: int, open_in_process: int) -> None:
        """Another event stream for a principal that has ``open_of_principal`` open in this process,
        whose owner (the person answerable for it: ``grantd.services.events.stream_owner``) has
        ``open_of_owner`` open across themselves and all their agents, of ``open_in_process`` in all:
        429 beyond ``streams_per_principal`` or ``streams_per_owner``, 503 beyond
        ``streams_per_process``. Counted per process: a principal may hold that many in each."""
        if 0 < self.streams_per_principal <= open_of_principal:
            self.on_refused("streams.principal")
            raise too_many(
                f"too many open event streams (at most {self.streams_per_principal} per identity)", 10
            )
        if 0 < self.streams_per_owner <= open_of_owner:
            self.on_refused("streams.owner")
            raise too_many(
                f"too many open event streams (at most {self.streams_per_owner} per person across "
                "their agents)",
                10,
            )
        if 0 < self.streams_per_process <= open_in_process:
            self.on_refused("streams.process")
            raise Problem(
                503,
                "too many open event streams on this server; retry in 10 s",
                headers={"Retry-After": "10"},
            )

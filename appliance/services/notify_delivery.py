"""Delivering the outbox (D15, and D16's CIBA pings: channel ``ciba-ping``, built in): every server
process runs one ``DeliveryWorker``; the database
decides which process sends which row (``store.notify.claim``: a lease, one winner per row across
processes and nodes), so nothing is sent twice while a lease lasts. Never on the request path: a
request only writes rows (in its grant's transaction) and wakes the worker.

One attempt: the notice is rendered from the grant as it is now (grantd.notify.message.render),
with a fresh review link for the recipient (grantd.services.review_links), and handed to the
channel's ``send``. ``sent``: done. ``failed`` and retryable: tried again after 5 s, 10 s, 20 s ...
(at most 15 min apart) up to ``[notify] max_attempts``; not retryable: ``failed``. ``gone`` (a push
service's 404/410): ``failed``, and the person's subscription is removed. An error is recorded as
the channel words it (never a secret). Held rows (``per_approver_limit``) become one digest per
person and channel when their window has passed.

A channel whose service is down (``DeliveryResult.down``: the mail server refuses connections, a
webhook answers 503) *rests* in this process: its notices are not claimed (nor rendered, nor given
a review link, nor failed) for REST_FIRST_MS, then one notice probes it; while probes fail the rest
doubles up to REST_MAX_MS, and the first answer from the service ends it. Notices wait unattempted
meanwhile, so an outage neither spends their attempts nor costs the serving processes a delivery
per notice (issue 27: that cost tripled the CPU of a grant while a mail server was down).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from grantd.hookspecs import ChannelContext, DeliveryResult, Recipient
from grantd.notify.message import render
from grantd.services import ciba_pings, notify, push
from grantd.services import review_links as links
from grantd.services.context import Services
from grantd.store.notify import OutboxRow

log = logging.getLogger("grantd.notify")

LEASE_MS = 120_000  # longer than any channel's send may take (their timeouts are at most 120 s)
BATCH = 20  # deliveries under way at once per process
PER_CHANNEL = 5  # of them on one channel: a channel that hangs holds up at most these places
BACKOFF_FIRST_MS = 5_000
BACKOFF_MAX_MS = 900_000
MAX_ERROR = 300
REST_FIRST_MS = 5_000  # how long a channel whose service is down rests before a probe
REST_MAX_MS = 60_000  # the longest rest: a service that is back is used again within a minute


@dataclass(frozen=True)
class _Rest:
    until: int  # no notice of the channel is claimed before this (ms); after it, one probe at a time
    length: int


def backoff_ms(attempts: int) -> int:
    """How long after the ``attempts``-th failed attempt the next one is made."""
    return int(min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** max(0, attempts - 1)))


class DeliveryWorker:
    def __init__(self, services: Services):
        self.services = services
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.woken = asyncio.Event()
        # Deliveries under way: each row is its own task, so a channel that hangs until its timeout
        # holds up only its own rows, never the others' (at most BATCH at once per process).
        self.in_flight: set[asyncio.Task[None]] = set()
        self.sending: dict[str, int] = {}  # channel id -> its deliveries under way (at most PER_CHANNEL)
        self.resting: dict[str, _Rest] = {}  # channel id -> its rest, while its service is down

    def wake(self, channels: Iterable[str] | None = None) -> None:
        """Rows were written; ``channels``: theirs, when known. Rows only of channels that rest now
        are not looked for (the poll finds them when the rest ends)."""
        if channels is not None and self.resting:
            now = self.services.clock.now_ms()
            if all(self._room_on(channel, now) == 0 for channel in channels):
                return
        self.woken.set()

    def _room_on(self, channel: str, now: int) -> int:
        """How many deliveries ``channel`` may have under way: none while it rests, one (the probe)
        once its rest is over, PER_CHANNEL while its service answers."""
        rest = self.resting.get(channel)
        if rest is None:
            return PER_CHANNEL
        return 0 if now < rest.until else 1

    def _heard(self, channel: str, result: DeliveryResult, now: int) -> None:
        """What a delivery's result says of its channel's service. A rest ends only with a notice
        the service took (``sent``, or ``gone`` from a push service): other failures may have been
        decided before the service was asked (an opted-out person, a missing topic)."""
        rest = self.resting.get(channel)
        if not result.channel_down:
            if rest is not None and result.status in ("sent", "gone"):
                del self.resting[channel]
                log.info("notification channel %s answers again: its waiting notices are sent", channel)
            return
        if rest is not None and now < rest.until:
            return  # a delivery that began before the rest did: the rest stands as it is
        length = REST_FIRST_MS if rest is None else min(REST_MAX_MS, rest.length * 2)
        self.resting[channel] = _Rest(now + length, length)
        if rest is None:
            log.warning(
                "notification channel %s is down (%s): its notices wait; probing it every %d s at most",
                channel,
                result.error,
                REST_MAX_MS // 1000,
            )

    async def run_forever(self) -> None:
        interval = self.services.config.notify.poll_ms / 1000
        try:
            await self._loop(interval)
        finally:  # the server stops: deliveries under way end with it (their leases let others retry)
            for task in list(self.in_flight):
                task.cancel()

    async def _loop(self, interval: float) -> None:
        while True:
            self.woken.clear()
            try:
                while await self.run_once():
                    pass
            except Exception:  # noqa: BLE001 - a database hiccup must not end delivery for good
                log.exception("notification delivery failed; retrying")
            try:
                await asyncio.wait_for(self.woken.wait(), interval)
            except TimeoutError:
                pass

    async def run_once(self) -> int:
        """Release due digests, claim due rows (as many as there is room for, none of a channel with
        PER_CHANNEL under way) and start delivering each; how many deliveries were started."""
        services = self.services
        now = services.clock.now_ms()
        await self._digests(now)
        room = BATCH - len(self.in_flight)
        if room <= 0:
            return 0  # woken again when a delivery ends
        busy = [c for c in {*self.sending, *self.resting} if self.sending.get(c, 0) >= self._room_on(c, now)]
        rows = await services.store.notify.claim(self.id, now, LEASE_MS, room, busy)
        started = 0
        for row in rows:
            channel = row["channel"]
            if self.sending.get(channel, 0) >= self._room_on(channel, now):
                # this claim brought more of one channel than it may have under way (or a probe's
                # worth of a channel that rested): the rest goes back unattempted, still due, for
                # when that channel has a place again
                await services.store.notify.finish(
                    row["id"],
                    self.id,
                    status="pending",
                    attempts=row["attempts"],
                    next_at=row["next_at"],
                    error=row["error"],
                    at=row["sent_at"],  # type: ignore[arg-type]
                )
                continue
            self.sending[channel] = self.sending.get(channel, 0) + 1
            task = asyncio.get_running_loop().create_task(self._deliver(row), name="notify-send")
            self.in_flight.add(task)
            task.add_done_callback(functools.partial(self._delivered, channel=channel))
            started += 1
        return started

    def _delivered(self, task: asyncio.Task[None], *, channel: str) -> None:
        self.in_flight.discard(task)
        self.sending[channel] -= 1
        if not task.cancelled() and task.exception() is not None:
            log.error("notification delivery failed", exc_info=task.exception())
        self.woken.set()  # a place is free: claim more

    async def _digests(self, now: int) -> None:
        windows = {r.window for r in self.services.config.notify.routes if r.limit}
        if not windows:
            return
        held = await self.services.store.notify.release_held(now - min(windows) * 1000, 200)
        if held:
            await self.services.store.notify.add(notify.digests(held, now))

    async def _deliver(self, row: OutboxRow) -> None:
        services = self.services
        channel = services.notify_channels.get(row["channel"])
        try:
            if row["channel"] == ciba_pings.PING_CHANNEL and row["grant_id"]:
                result = await ciba_pings.deliver(services, row["grant_id"])  # D16: built in
            elif channel is not None:
                result = await self._send(channel, row)
            else:
                result = DeliveryResult.failed("the channel is no longer configured", retryable=False)
        except Exception as exc:  # noqa: BLE001 - a channel plugin's bug is a failed attempt, not a dead worker
            log.exception("notification channel %s raised", row["channel"])
            result = DeliveryResult.failed(f"the channel failed ({type(exc).__name__})", retryable=True)
        attempts = row["attempts"] + 1
        now = services.clock.now_ms()
        self._heard(row["channel"], result, now)
        if result.status == "sent":
            status, next_at = "sent", now
        elif result.retryable and attempts < services.config.notify.max_attempts:
            status, next_at = "pending", now + backoff_ms(attempts)
        else:
            status, next_at = "failed", now
        error = (result.error or "")[:MAX_ERROR] or None
        await services.store.notify.finish(
            row["id"], self.id, status=status, attempts=attempts, next_at=next_at, error=error, at=now
        )

    async def _send(self, channel: Any, row: OutboxRow) -> DeliveryResult:
        services = self.services
        ids = [row["grant_id"]] if row["grant_id"] else list(row["payload"].get("grants", []))
        grants = [g for g in [await services.store.grants.get(i) for i in ids] if g is not None]
        if not grants:
            return DeliveryResult.failed("the grant no longer exists", retryable=False)
        agents: dict[str, str] = {}
        for grant in grants:
            agent = await services.store.agents.get_by_id(grant["requester_id"])
            if agent is not None and agent.get("name"):
                agents[grant["requester"]] = agent["name"]
        views = [{**g, "status": services_status(services, g)} for g in grants]
        link, deny_link = await review_links(services, row, grants[0], channel)
        notice = render(
            row["kind"],
            views,
            link=link,
            options=channel.options,
            agents=agents,
            deny_link=deny_link,
            level=row["level"] or None,
        )
        context = ChannelContext(
            services.issuer,
            lambda: services.clock.now_ms() // 1000,
            functools.partial(links.spend_signature, services),
        )
        person = await services.store.people.get(row["recipient"])
        name = person["name"] if person is not None else None
        person_id = row["person_id"]
        prefs = (await services.store.notify.prefs([person_id])).get(person_id, {}) if person_id else {}
        setting = prefs.get(row["channel"], True)
        if setting is False:
            return DeliveryResult.failed("the person opted out of this channel", retryable=False)
        topic = setting.get("topic") if isinstance(setting, dict) else None
        if channel.type not in notify.NEEDS_SUBSCRIPTION:
            return await channel.send(context, notice, Recipient(row["recipient"], name, topic))
        subscriptions = await services.store.notify.subscriptions(person_id) if person_id else []
        if not subscriptions:
            return DeliveryResult.failed("this person has no push subscription", retryable=False)
        results = []
        for subscription in subscriptions:  # every browser and phone of the person
            each = Recipient(row["recipient"], name, topic, push.recipient_subscription(subscription))
            result = await channel.send(context, notice, each)
            if result.status == "gone":  # the push service's 404/410: the subscription is no more
                await services.store.notify.delete_subscription(subscription["person_id"], subscription["id"])
            results.append(result)
        return _combined(results)


def _combined(results: list[DeliveryResult]) -> DeliveryResult:
    """Several subscriptions of one person: sent if any got it."""
    if any(r.status == "sent" for r in results):
        return DeliveryResult.sent()
    if any(r.status == "gone" for r in results):
        return next(r for r in results if r.status == "gone")
    return results[0]


def services_status(services: Services, grant: Any) -> str:
    from grantd.core.lifecycle import grant_lapse

    return grant_lapse(services.clock.now_ms(), services.config.grants.pending_ttl).status_of(grant)


async def review_links(
    services: Services, row: OutboxRow, grant: Any, channel: Any
) -> tuple[str, str | None]:
    """The review link of this notice (and the deny link where the channel carries one)."""
    if row["kind"] == "digest":
        return f"{services.issuer}/grants", None
    return await links.for_notice(services, row, grant, channel)


__all__ = ["DeliveryWorker", "backoff_ms"]

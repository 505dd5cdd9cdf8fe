"""Grant events for live clients (D6 Events): the database is the bus, so every process sees all.

Each write that changes a grant records a row in ``grant_events`` in the same transaction.
One ``GrantEventHub`` per server process reads new rows (at once after a local write; for writes
by other processes/nodes when the store says some may have been committed — PostgreSQL's
LISTEN/NOTIFY through ``grants.wait_for_events`` — and at the latest every
``grants.events_poll_ms``) and hands them to the open streams of that process. A stream that falls behind is closed; its client resumes with
``Last-Event-ID`` and the backlog is replayed from the table.

Bounds (D12): each subscription queues at most ``QUEUE_SIZE`` live events (more, and the reader
is cut off; the events are shared by every subscription, so a full queue holds references, not
copies), and a stream holds at most one replay page; a principal may hold
``limits.streams_per_principal`` open streams, an owner — a person with every agent they own, and
the management token with the agents of the management identity — ``limits.streams_per_owner``
together, and the process ``limits.streams_per_process`` in all. All counted per process, so a
principal may hold that many in each process it reaches. Memory therefore grows with the number
of people, not with the number of agents one person enrols.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from grantd.logs import LOGGER
from grantd.store import Store
from grantd.store.records import GrantEvent

if TYPE_CHECKING:
    from grantd.core.principals import Principal
    from grantd.services.limits import Limits

log = logging.getLogger(LOGGER)

QUEUE_SIZE = 256  # live events one stream may have waiting; a reader further behind is cut off
BATCH = 500


async def stream_owner(store: Store, principal: Principal) -> str:
    """Whose budget of open streams a principal's stream counts against (``streams_per_owner``): an
    agent's owner, anyone else's own e-mail (the management token's is the management identity, so
    it shares a budget with the agents enrolled for it). An agent that has vanished counts on its own."""
    if principal.agent_id is not None:
        agent = await store.agents.get_by_id(principal.agent_id)
        if agent is not None:
            return "owner:" + str(agent["owner"]).lower()
        return "agent:" + principal.agent_id
    return "owner:" + principal.email.lower()


class Subscription:
    def __init__(self, principal_id: str, owner: str | None = None) -> None:
        self.principal_id = principal_id
        self.owner = owner
        self.queue: asyncio.Queue[GrantEvent | None] = asyncio.Queue(QUEUE_SIZE)
        self.overflowed = False
        self.ended = False

    def offer(self, event: GrantEvent | None) -> None:
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.overflowed = True


class GrantEventHub:
    def __init__(self, store: Store, poll_ms: int):
        self.store = store
        self.poll_seconds = poll_ms / 1000
        self.subscribers: set[Subscription] = set()
        self.open_per_principal: Counter[str] = Counter()
        self.open_per_owner: Counter[str] = Counter()
        self.last_seq = 0
        self.closing = False
        self._wake = asyncio.Event()
        self._subscribed = asyncio.Event()  # set while this process has an open stream
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="grant-event-hub")

    async def close(self) -> None:
        """Ends every open stream (so a graceful shutdown does not wait for them) and stops polling."""
        self.closing = True
        for sub in list(self.subscribers):
            sub.offer(None)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def changed(self) -> None:
        """A grant changed in this process (the services call this after every write): deliver
        without waiting for the next poll."""
        self._wake.set()

    def end_streams_of(self, principal_id: str) -> None:
        """End this process's open streams of a principal (an agent was disabled or deleted).
        Streams in other processes end at their next credential check (appliance/web/api/grants.py)."""
        for sub in list(self.subscribers):
            if sub.principal_id == principal_id:
                sub.ended = True
                sub.offer(None)

    @contextlib.asynccontextmanager
    async def subscription(
        self, principal_id: str, limits: Limits | None = None, owner: str | None = None
    ) -> AsyncIterator[Subscription]:
        """A live subscription; with ``limits``, a 429/503 Problem (before anything is sent) when the
        principal, its ``owner`` (``stream_owner``; None: the principal is its own owner) or this
        process already holds as many open streams as allowed."""
        owner = owner if owner is not None else "principal:" + principal_id
        if not self.subscribers:
            # Idle hubs do not poll; start from what exists now (streams replay older events themselves).
            self.last_seq = await self.store.grants.last_event_seq()
        if (
            limits is not None
        ):  # checked and taken with no await in between: concurrent opens cannot both pass
            limits.stream_slots(
                self.open_per_principal[principal_id], self.open_per_owner[owner], len(self.subscribers)
            )
        sub = Subscription(principal_id, owner)
        self.subscribers.add(sub)
        self._subscribed.set()
        self.open_per_principal[principal_id] += 1
        self.open_per_owner[owner] += 1
        try:
            yield sub
        finally:
            self.subscribers.discard(sub)
            for counter, key in ((self.open_per_principal, principal_id), (self.open_per_owner, owner)):
                counter[key] -= 1
                if counter[key] <= 0:
                    del counter[key]

    async def _wait(self) -> None:
        """Until a local write (``changed``), a store's word that another process or node wrote
        events (``grants.wait_for_events``, optional in the contract), or the poll interval."""
        store_wait = getattr(self.store.grants, "wait_for_events", None)
        if store_wait is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_seconds)
            return
        waits = {
            asyncio.ensure_future(self._wake.wait()),
            asyncio.ensure_future(store_wait(self.poll_seconds)),
        }
        try:
            await asyncio.wait(waits, timeout=self.poll_seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    async def _run(self) -> None:
        while not self.closing:
            if not self.subscribers:
                # No open stream in this process: nothing to deliver, so sleep until one opens
                # instead of waking for every write of every process (issue 27: each write cost a
                # turn of this loop in every process, with its tasks and timers, for nobody; on
                # PostgreSQL each NOTIFY as well). ``subscription`` reads where the events stand
                # when the first stream opens; a write since then has left ``_wake`` set.
                self._subscribed.clear()
                await self._subscribed.wait()
                continue
            try:
                await self._wait()
            except Exception:  # the store's wake-up failed: fall back to the poll interval
                log.exception("waiting for grant events failed")
                await asyncio.sleep(self.poll_seconds)
            self._wake.clear()
            if not self.subscribers:
                continue
            try:
                await self._deliver()
            except Exception:  # a storage hiccup must not end live updates for good
                log.exception("reading grant events failed; retrying")
                await asyncio.sleep(1)

    async def _deliver(self) -> None:
        while True:
            rows = await self.store.grants.events_after(self.last_seq, BATCH)
            for row in rows:
                self.last_seq = row["seq"]
                for sub in list(self.subscribers):
                    sub.offer(row)
            if len(rows) < BATCH:
                return

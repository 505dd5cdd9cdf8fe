"""The grant event hub (grantd.services.events.GrantEventHub) sleeps while its process has no open
stream: a write then costs it nothing (issue 27), and the first stream that opens still gets every
event from the moment it opened, written here or (through the store's wake-up) elsewhere."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from grantd.services.events import GrantEventHub


class _Grants:
    """The part of the store the hub reads: events in order, and a wake-up for other writers."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.reads = 0  # events_after calls
        self.waits = 0  # wait_for_events calls
        self._written = asyncio.Event()

    def write(self, name: str) -> None:
        self.events.append({"seq": len(self.events) + 1, "event": name})
        self._written.set()

    async def last_event_seq(self) -> int:
        return len(self.events)

    async def events_after(self, seq: int, limit: int) -> list[dict[str, Any]]:
        self.reads += 1
        return self.events[seq : seq + limit]

    async def wait_for_events(self, seconds: float) -> None:
        self.waits += 1
        try:
            await asyncio.wait_for(self._written.wait(), seconds)
        except TimeoutError:
            pass
        self._written.clear()


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def _next(queue: asyncio.Queue[Any]) -> Any:
    return await asyncio.wait_for(queue.get(), 2)


def test_an_idle_hub_does_nothing_per_write_and_the_first_stream_gets_what_follows() -> None:
    async def run() -> None:
        grants = _Grants()
        hub = GrantEventHub(SimpleNamespace(grants=grants), poll_ms=60_000)  # type: ignore[arg-type]
        hub.start()
        await _settle()
        for i in range(50):  # writes here and elsewhere while no stream is open
            grants.write(f"before-{i}")
            hub.changed()
            await _settle()
        assert (grants.reads, grants.waits) == (0, 0)

        async with hub.subscription("agt_1") as sub:
            grants.write("here")  # a write in this process
            hub.changed()
            assert (await _next(sub.queue))["event"] == "here"
            grants.write("elsewhere")  # another process's write: only the store's wake-up says so
            assert (await _next(sub.queue))["event"] == "elsewhere"
            assert sub.queue.empty()  # nothing from before the stream opened (it replays those itself)

        await _settle()
        reads, waits = grants.reads, grants.waits
        for i in range(20):  # idle again once the last stream closed
            grants.write(f"after-{i}")
            hub.changed()
            await _settle()
        assert grants.reads <= reads + 1 and grants.waits <= waits + 1  # at most the turn in flight
        await asyncio.wait_for(hub.close(), 2)  # an idle hub stops at once

    asyncio.run(run())


def test_a_write_between_opening_and_the_first_turn_is_not_lost() -> None:
    """The stream reads where the events stand as it opens; a write before the hub's first turn
    after that is delivered on that turn (the wake it left behind is not cleared while idle)."""

    async def run() -> None:
        grants = _Grants()
        hub = GrantEventHub(SimpleNamespace(grants=grants), poll_ms=60_000)  # type: ignore[arg-type]
        hub.start()
        await _settle()
        async with hub.subscription("agt_1") as sub:
            grants.write("at-once")  # no await since the subscription opened
            hub.changed()
            assert (await _next(sub.queue))["event"] == "at-once"
        await hub.close()

    asyncio.run(run())

"""The decision log in memory (``grantd.store.tlog``)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from grantd.store import Conflict
from grantd.store.tlog import AuditEvent, Host, LeafRow, NodeRow, TlogHead, TlogKey


class _TlogData:
    def __init__(self) -> None:
        self.state: TlogHead = TlogHead(size=0, grant_seq=0, event_seq=0, holder=None, lease_until=0)
        self.leaves: list[tuple[bytes, bytes, str | None, int | None]] = []
        self.nodes: dict[tuple[int, int], bytes] = {}
        self.checkpoints: dict[int, str] = {}
        self.keys: list[TlogKey] = []  # oldest first
        self.events: list[AuditEvent] = []
        self.hosts: dict[str, Host] = {}
        self.receipts: set[str] = set()


def _record(log: _TlogData, event: AuditEvent) -> None:
    seq = (log.events[-1]["seq"] if log.events else 0) + 1
    log.events.append({**copy.deepcopy(event), "seq": seq})


class MemoryTlog:
    def __init__(self, data: Any):
        self._d = data
        if not hasattr(data, "tlog"):
            data.tlog = _TlogData()
        self._t: _TlogData = data.tlog

    async def head(self) -> TlogHead:
        return TlogHead(**self._t.state)

    async def lease(self, holder: str, now: int, ttl_ms: int) -> bool:
        async with self._d.tx:
            s = self._t.state
            if s["holder"] is None or s["holder"] == holder or s["lease_until"] <= now:
                s["holder"], s["lease_until"] = holder, now + ttl_ms
                return True
            return False

    async def release(self, holder: str) -> None:
        async with self._d.tx:
            if self._t.state["holder"] == holder:
                self._t.state["holder"], self._t.state["lease_until"] = None, 0

    async def nodes(self, coords: Sequence[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        leaves, nodes = self._t.leaves, self._t.nodes  # level 0: the leaf hashes, kept once (issue 23)
        found = {c: leaves[c[1]][1] for c in coords if c[0] == 0 and 0 <= c[1] < len(leaves)}
        found.update({c: nodes[c] for c in coords if c[0] != 0 and c in nodes})
        return found

    async def append(
        self,
        *,
        holder: str,
        now: int,
        expect_size: int,
        leaves: Sequence[LeafRow],
        nodes: Sequence[NodeRow],
        grant_seq: int,
        event_seq: int,
    ) -> bool:
        async with self._d.tx:
            s = self._t.state
            if s["size"] != expect_size or s["holder"] != holder or s["lease_until"] <= now:
                return False
            for index, leaf, digest, grant_id, grant_created in leaves:
                assert index == len(self._t.leaves)
                self._t.leaves.append((bytes(leaf), bytes(digest), grant_id, grant_created))
            for level, index, digest in nodes:
                if level:  # level 0 is the leaves' hashes, just kept with them
                    self._t.nodes[(level, index)] = bytes(digest)
            s["size"], s["grant_seq"], s["event_seq"] = expect_size + len(leaves), grant_seq, event_seq
            return True

    async def entries(self, start: int, end: int) -> list[tuple[int, bytes, bytes]]:
        return [
            (i, self._t.leaves[i][0], self._t.leaves[i][1])
            for i in range(max(start, 0), min(end, len(self._t.leaves)))
        ]

    async def grant_indexes(self, grant_id: str, below: int, created_at: int | None) -> list[int]:
        return [
            i
            for i, (_, _, g, created) in enumerate(self._t.leaves[:below])
            if g == grant_id and created in (None, created_at)
        ]

    async def add_checkpoint(self, size: int, note: str, now: int) -> bool:
        async with self._d.tx:
            if size in self._t.checkpoints:
                return False
            self._t.checkpoints[size] = note
            return True

    async def latest_checkpoint(self) -> tuple[int, str] | None:
        if not self._t.checkpoints:
            return None
        size = max(self._t.checkpoints)
        return size, self._t.checkpoints[size]

    async def checkpoints(self) -> list[tuple[int, str]]:
        return sorted(self._t.checkpoints.items())

    async def keys(self) -> list[TlogKey]:
        return [copy.deepcopy(k) for k in reversed(self._t.keys)]

    async def add_first_key(self, key: TlogKey) -> bool:
        async with self._d.tx:
            if any(k["retired_at"] is None for k in self._t.keys):
                return False
            self._t.keys.append({**key, "retired_at": None})
            return True

    async def rotate_key(self, key: TlogKey, now: int) -> list[str]:
        async with self._d.tx:
            retired = []
            for k in self._t.keys:
                if k["retired_at"] is None:
                    k["retired_at"], k["seed"] = now, ""
                    retired.append(k["kid"])
            self._t.keys.append({**key, "retired_at": None})
            _record(
                self._t,
                AuditEvent(
                    seq=0,
                    kind="key.rotated",
                    grant_id=None,
                    actor={"kind": "system"},
                    data={"purpose": "log", "kid": key["kid"], "public_key": key["public"]},
                    created_at=now,
                ),
            )
            return retired

    async def events_after(self, seq: int, limit: int) -> list[AuditEvent]:
        return [copy.deepcopy(e) for e in self._t.events if e["seq"] > seq][:limit]

    async def policy_loaded(self, event: AuditEvent) -> bool:
        async with self._d.tx:
            last = next((e for e in reversed(self._t.events) if e["kind"] == "policy.loaded"), None)
            if last is not None and last["data"].get("policy_hash") == event["data"]["policy_hash"]:
                return False
            _record(self._t, event)
            return True


class MemoryHosts:
    def __init__(self, data: Any):
        self._d = data
        MemoryTlog(data)
        self._t: _TlogData = data.tlog

    async def add(self, host: Host, actor: dict[str, str]) -> Host:
        async with self._d.tx:
            if host["host"] in self._t.hosts:
                raise Conflict("host")
            self._t.hosts[host["host"]] = dict(host)  # type: ignore[assignment]
            _record(
                self._t,
                AuditEvent(
                    seq=0,
                    kind="host.enrolled",
                    grant_id=None,
                    actor=dict(actor),
                    data={"host": host["host"], "public_key": host["public_key"]},
                    created_at=host["created_at"],
                ),
            )
            return host

    async def get(self, host: str) -> Host | None:
        found = self._t.hosts.get(host)
        return copy.deepcopy(found) if found else None


class MemoryReceipts:
    def __init__(self, data: Any):
        self._d = data
        MemoryTlog(data)
        self._t: _TlogData = data.tlog

    async def add(self, key: str, event: AuditEvent) -> bool:
        async with self._d.tx:
            if key in self._t.receipts:
                return False
            self._t.receipts.add(key)
            _record(self._t, event)
            return True


def record_event(data: Any, event: AuditEvent) -> None:
    """An audit event in the caller's critical section (the change's own ``data.tx``)."""
    if not hasattr(data, "tlog"):
        data.tlog = _TlogData()
    _record(data.tlog, event)

"""Where the sequencer's CPU per event goes (issue 23): ``AuditLog.step`` on a real SQLite file, its
phases timed per event by wrapping them (reading the grant events, making the leaves, appending,
hashing, merging, signing). The wrappers add ~1 µs per event to the total; ``bench/tlog_sequencer.py``
gives the clean total.

    .venv/bin/python bench/tlog_phases.py [--grants 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.tlog_sequencer import write_decided_grants  # noqa: E402
from grantd.core.clock import SYSTEM_CLOCK  # noqa: E402
from grantd.plugins.storage_sqlite import SQLiteStore  # noqa: E402
from grantd.services import audit, audit_leaves  # noqa: E402

SPENT: dict[str, float] = {}


def _timed(owner: Any, name: str, label: str) -> None:
    """Replace ``owner.name`` by a wrapper adding its CPU time to ``SPENT[label]``."""
    inner: Callable[..., Any] = getattr(owner, name)
    if asyncio.iscoroutinefunction(inner):

        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            result = await inner(*args, **kwargs)
            SPENT[label] = SPENT.get(label, 0.0) + time.process_time() - started
            return result

        setattr(owner, name, wrapper)
    else:

        def plain(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            result = inner(*args, **kwargs)
            SPENT[label] = SPENT.get(label, 0.0) + time.process_time() - started
            return result

        setattr(owner, name, plain)


class _Decoder:
    """A msgspec decoder standing in for one of ``audit_leaves``' typed readings, so that its
    ``decode`` can be timed (a C object's method cannot be replaced)."""

    def __init__(self, inner: Any) -> None:
        self.decode = inner.decode


async def main(count: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        store = SQLiteStore(Path(directory) / "bench.db")
        await store.migrate()
        await write_decided_grants(store, count)
        log = audit.AuditLog(store, SYSTEM_CLOCK, "bench.example/grantd", "admin@example.com")
        await log.ensure_key()
        for owner, name, label in (
            (store.grants, "event_rows_after", "grant event rows"),
            (audit_leaves, "snapshot_of", "decoding (within leaves)"),
            (store.tlog, "events_after", "audit events_after"),
            (store.tlog, "append", "append"),
            (store.tlog, "nodes", "nodes"),
            (store.tlog, "head", "head"),
            (audit, "row_leaves", "leaves"),
            (audit, "integrate", "integrate"),
            (audit, "_merge", "merge"),
            (log, "sign_pending", "sign"),
        ):
            _timed(owner, name, label)
        # an approval's two events are decoded by the typed reading, not by ``snapshot_of``
        for decoder in ("_VOTE_EVENT", "_APPROVAL"):
            setattr(audit_leaves, decoder, _Decoder(getattr(audit_leaves, decoder)))
            _timed(getattr(audit_leaves, decoder), "decode", "decoding (within leaves)")
        events = count * 3
        started = time.process_time()
        while (await store.tlog.head())["grant_seq"] < events:
            await log.step()
        total = time.process_time() - started
        print(f"{events} events: {total / events * 1e6:.1f} µs CPU per event, of which")
        for label, spent in sorted(SPENT.items(), key=lambda item: -item[1]):
            print(f"  {label}: {spent / events * 1e6:.2f} µs")
        store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--grants", type=int, default=5000)
    asyncio.run(main(parser.parse_args().grants))

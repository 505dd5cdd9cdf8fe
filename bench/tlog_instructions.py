"""What the decision log's sequencer costs per approval in CPU instructions (issue 23), counted by
valgrind's callgrind: deterministic where this shared host's CPU time moves by ±25 % between runs,
so a change of a few per cent shows in one run. Instructions are not time (cache misses, and
callgrind's CPU lacks the SHA extensions, so hashing weighs more here than on the host), but a
change that removes work removes instructions.

A store of N created grants, already integrated, and N deciding votes (a `grant.reviewed` and a
`grant.approved` event each, as ``POST /api/grants/:id/approve`` writes them); a child process
integrates the 2N events under callgrind, and again without integrating; the difference per
approval is printed.

    .venv/bin/python bench/tlog_instructions.py [--approvals 2000] [--package DIR ...]

``--package``: a directory holding a ``grantd`` package to measure instead of this tree's (e.g. a
``git archive`` of another commit, as for ``GRANTD_BENCH_SERVER_PATH``); several are measured in
turn, each against the same store. Needs ``valgrind`` (Debian: ``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


async def _make_store(path: str, approvals: int) -> None:
    from bench.tlog_sequencer import grant, vote
    from grantd.core.clock import SYSTEM_CLOCK
    from grantd.core.lifecycle import grant_lapse
    from grantd.plugins.storage_sqlite import SQLiteStore
    from grantd.services.audit import AuditLog

    store = SQLiteStore(path)
    await store.migrate()
    now = SYSTEM_CLOCK.now_ms()
    for i in range(approvals):
        await store.grants.create({**grant(i, now), "status": "pending"}, ["grant.created"])  # type: ignore[arg-type,typeddict-item]
    log = AuditLog(store, SYSTEM_CLOCK, "bench.example/grantd", "admin@example.com")
    await log.ensure_key()
    while (await store.tlog.head())["grant_seq"] < approvals:
        await log.step()
    lapse = grant_lapse(now, 48 * 3600)
    changes = {"status": "approved", "decided_by": "alice@example.com", "decided_at": now}
    for i in range(approvals):
        await store.grants.add_deciding_vote(
            vote(i, now),  # type: ignore[arg-type]
            seen=0,
            expect=("pending",),
            changes=changes,
            event="grant.approved",
            lapse=lapse,
            now=now,
        )
    await log.close()
    store.close()


async def _integrate(path: str, events: int, integrate: bool) -> None:
    """The child: open the store and (unless told not to) integrate ``events`` more events."""
    from grantd.core.clock import SYSTEM_CLOCK
    from grantd.plugins.storage_sqlite import SQLiteStore
    from grantd.services.audit import AuditLog

    store = SQLiteStore(path)
    log = AuditLog(store, SYSTEM_CLOCK, "bench.example/grantd", "admin@example.com")
    until = (await store.tlog.head())["grant_seq"] + events
    while integrate and (await store.tlog.head())["grant_seq"] < until:
        await log.step()
    store.close()


def _instructions(package: Path | None, template: Path, events: int, integrate: bool) -> int:
    with tempfile.TemporaryDirectory(prefix="grantd-ir-") as scratch:
        db = Path(scratch) / "b.db"
        shutil.copy(template, db)
        path = os.pathsep.join([str(p) for p in (package, ROOT) if p is not None])
        env = {**os.environ, "PYTHONPATH": path, "PYTHONHASHSEED": "0"}
        child = [sys.executable, __file__, "--child", str(db), str(events), "1" if integrate else "0"]
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *child]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)  # noqa: S603
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no count:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--approvals", type=int, default=2000)
    parser.add_argument("--package", type=Path, action="append", default=[])
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        path, events, integrate = args.child
        asyncio.run(_integrate(path, int(events), integrate == "1"))
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (Debian: apt-get install valgrind): nothing measured")
    sys.path[:0] = [str(ROOT)]
    with tempfile.TemporaryDirectory(prefix="grantd-ir-") as scratch:
        template = Path(scratch) / "template.db"
        asyncio.run(_make_store(str(template), args.approvals))
        for package in args.package or [None]:
            events = 2 * args.approvals
            steps = _instructions(package, template, events, True)
            base = _instructions(package, template, events, False)
            label = package or "this tree"
            print(f"{label}: {(steps - base) / args.approvals:,.0f} instructions per approval (two leaves)")


if __name__ == "__main__":
    main()

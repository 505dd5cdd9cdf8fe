#!/usr/bin/env python3
"""Open event streams at scale (issue 27, item 5): N streams of ``GET /api/grants/events`` held open
across the server's workers, then grants created one after another; for every grant, the time from
its create request to its ``grant.created`` event arriving on each stream, and the memory the
streams cost the server.

    .venv/bin/python bench/streams.py                          # 1,000 streams, 2 workers, SQLite
    .venv/bin/python bench/streams.py --streams 200 --grants 10 --storage postgres

The streams are opened from ``--procs`` load processes (asyncio, one raw keep-alive socket a stream,
no HTTP library: a stream costs the client a socket and a small buffer), all with the management
token, so every stream may see every grant (an agent's stream sees only its own grants). The grants
are created by one enrolled agent, one every ``--gap`` seconds (the creator waits for the 201), so
each event's delivery is timed alone. Latency = arrival on the stream - the moment the create
request was sent (one machine, one clock). Memory: the summed RSS of the server's processes before
the streams open, with them all open, and after the events (peak sampled throughout).

The abuse limits are off ([limits] as bench/run.py's "off": the per-principal, per-owner and
per-process stream bounds included), since all streams belong to one principal here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.server import (  # noqa: E402
    MemorySampler,
    management_token,
    postgres_module,
    process_tree,
    rss_kib,
    start_deployment,
    tree_cpu_seconds,
)

FRAME = re.compile(
    rb"id: (\d+)\r?\nevent: ([a-z.]+)\r?\ndata: \{\"grant\":\{[^\n]*?\"id\":\"([0-9a-f-]{36})\""
)


# -- the load processes: hold streams, record arrivals -------------------------------------------------


async def _stream(
    host: str, port: int, token: str, arrivals: dict[str, float], opened: list[int], expect: int
) -> None:
    """One stream, read until it has seen ``expect`` grant.created events (or is cancelled)."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        (
            f"GET /api/grants/events HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
            "Accept: text/event-stream\r\n\r\n"
        ).encode()
    )
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"stream refused: {head[:200]!r}")
    opened[0] += 1
    buffer = b""
    try:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return
            now = time.time()
            buffer += chunk
            end = 0
            for match in FRAME.finditer(buffer):
                if match.group(2) == b"grant.created":
                    arrivals.setdefault(match.group(3).decode(), now)
                end = match.end()
            buffer = buffer[end:][-4096:]
            if len(arrivals) >= expect:
                return
    finally:
        writer.close()


async def _hold(
    url: str, token: str, count: int, expect: int, open_by: float, hold_until: float
) -> dict[str, Any]:
    parts = urlsplit(url)
    opened = [0]
    per_stream: list[dict[str, float]] = [{} for _ in range(count)]
    tasks = []
    for i in range(count):
        tasks.append(
            asyncio.create_task(
                _stream(parts.hostname or "", parts.port or 80, token, per_stream[i], opened, expect)
            )
        )
        if i % 50 == 49:
            await asyncio.sleep(0.05)  # a burst of 1,000 connects at once overflows the listen backlog
    while opened[0] < count and time.time() < open_by:
        await asyncio.sleep(0.05)
        failed = [t for t in tasks if t.done() and t.exception()]
        if failed:
            raise RuntimeError(f"{len(failed)} streams failed, e.g. {failed[0].exception()!r}")
    opened_count = opened[0]
    await asyncio.wait(tasks, timeout=max(0.0, hold_until - time.time()))
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"opened": opened_count, "arrivals": per_stream}


def hold_streams(
    url: str, token: str, count: int, expect: int, open_by: float, hold_until: float
) -> dict[str, Any]:
    return asyncio.run(_hold(url, token, count, expect, open_by, hold_until))


# -- the driver ---------------------------------------------------------------------------------------------


def _tree_rss_mib(roots: list[int]) -> float:
    return sum(rss_kib(pid) for root in roots for pid in process_tree(root)) / 1024


def _established(port: int) -> int:
    """Established TCP connections whose local port is the server's (IPv4)."""
    count = 0
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                count += 1
    return count


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _enroll_agent(url: str, token: str) -> str:
    """One agent, signed in; returns its bearer token (bench.prepare's enrolment, synchronously)."""
    from bench.load import run_async
    from bench.prepare import connections, enroll_agents

    async def one() -> str:
        async with connections(url) as conns:
            return (await enroll_agents(conns, token, 1))[0].token

    return str(run_async(one()))


def run(args: argparse.Namespace) -> dict[str, Any]:
    import httpx

    from bench.load import grant_body

    postgres = None
    if args.storage == "postgres":
        postgres = postgres_module().Postgres().start()
    try:
        with tempfile.TemporaryDirectory(prefix="grantd-streams-") as tmp:
            deployment = start_deployment(Path(tmp), args.storage, 1, args.workers, postgres)
            try:
                return _measure(deployment, args, httpx, grant_body)
            finally:
                deployment.stop()
    finally:
        if postgres is not None:
            postgres.stop()


def _measure(deployment: Any, args: argparse.Namespace, httpx: Any, grant_body: Any) -> dict[str, Any]:
    node = deployment.nodes[0]
    token = management_token(node)
    agent_token = _enroll_agent(node.url, token)
    roots = deployment.server_roots()
    time.sleep(1.0)
    rss_before = _tree_rss_mib(roots)
    shares = [
        args.streams // args.procs + (1 if i < args.streams % args.procs else 0) for i in range(args.procs)
    ]
    open_by = time.time() + args.open_timeout
    hold_until = open_by + args.grants * args.gap + args.settle
    ctx = multiprocessing.get_context("spawn")
    with (
        ProcessPoolExecutor(max_workers=args.procs, mp_context=ctx) as pool,
        MemorySampler(roots, interval=0.2) as memory,
    ):
        futures = [
            pool.submit(hold_streams, node.url, token, n, args.grants, open_by, hold_until) for n in shares
        ]
        # until every stream's connection is established at the server (its sockets in
        # /proc/net/tcp), and a moment for the answers' headers; the load processes' own count of
        # 200s is checked at the end
        while time.time() < open_by and _established(node.port) < args.streams:
            if any(f.done() for f in futures):
                futures[[f.done() for f in futures].index(True)].result()  # raises why it stopped
            time.sleep(0.25)
        time.sleep(1.0)
        rss_open = _tree_rss_mib(roots)
        cpu_before = tree_cpu_seconds(roots)
        sent: dict[str, float] = {}
        with httpx.Client(base_url=node.url, timeout=10) as http:
            for _ in range(args.grants):
                started = time.time()
                answer = http.post(
                    "/api/grants", json=grant_body(), headers={"Authorization": f"Bearer {agent_token}"}
                )
                if answer.status_code != 201:
                    raise RuntimeError(f"create: {answer.status_code} {answer.text[:200]}")
                sent[answer.json()["id"]] = started
                time.sleep(max(0.0, started + args.gap - time.time()))
        results = [f.result() for f in futures]
        cpu_events = tree_cpu_seconds(roots) - cpu_before
        rss_after = _tree_rss_mib(roots)
    latencies: list[float] = []
    missing = 0
    opened = sum(r["opened"] for r in results)
    for result in results:
        for arrivals in result["arrivals"]:
            for grant_id, at in sent.items():
                if grant_id in arrivals:
                    latencies.append((arrivals[grant_id] - at) * 1000)
                else:
                    missing += 1
    return {
        "storage": args.storage,
        "workers": args.workers,
        "streams": args.streams,
        "opened": opened,
        "grants": args.grants,
        "deliveries": len(latencies),
        "missing": missing,
        "p50_ms": round(statistics.median(latencies), 1) if latencies else None,
        "p99_ms": round(_percentile(latencies, 0.99), 1) if latencies else None,
        "max_ms": round(max(latencies), 1) if latencies else None,
        "rss_before_mib": round(rss_before, 1),
        "rss_open_mib": round(rss_open, 1),
        "rss_after_mib": round(rss_after, 1),
        "rss_peak_mib": round(memory.peak_mib, 1),
        "rss_added_mib": round(max(rss_open, rss_after, memory.peak_mib) - rss_before, 1),
        "server_cpu_s_during_events": round(cpu_events, 2),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--procs", type=int, default=2, help="load processes holding the streams")
    parser.add_argument("--grants", type=int, default=20, help="grants created, one at a time")
    parser.add_argument("--gap", type=float, default=0.5, help="seconds between two creates")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds the streams stay open after")
    parser.add_argument("--open-timeout", type=float, default=30.0, help="seconds allowed to open them")
    parser.add_argument("--storage", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = run(args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{result['opened']}/{result['streams']} streams on {result['workers']} workers ({result['storage']}), "
            f"{result['grants']} grants: {result['deliveries']} deliveries, {result['missing']} missing; "
            f"p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms, max {result['max_ms']} ms; "
            f"RSS {result['rss_before_mib']} MiB before, {result['rss_open_mib']} open, "
            f"{result['rss_after_mib']} after (peak {result['rss_peak_mib']}, +{result['rss_added_mib']} MiB); "
            f"server CPU {result['server_cpu_s_during_events']} s while the events flowed; "
            f"load average {result['load_avg_1m']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""bench/run.py's command line: the operations it knows, its options and the presets (--issue14,
--issue27) that fill in what is not given."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.load import CLIENT_KINDS  # noqa: E402
from bench.peer import ISSUE14_OPS  # noqa: E402
from bench.server import LIMIT_MODES, STORAGES  # noqa: E402

DEFAULT_OPS = [
    "healthz",
    "authenticate",
    "create",
    "get_etag",
    "token",
    "verify",
    "approve",
    "consume",
    "flow",
]
ALL_OPS = [*DEFAULT_OPS, "consume_always", "list", "list_all"]
DESCRIPTIONS = {
    "healthz": "GET /healthz (no work: the ceiling of server + load generator)",
    "authenticate": "POST challenge + POST authenticate (one = the pair)",
    "create": "POST /api/grants (agent token) -> 201",
    "get_etag": "GET /api/grants/:id + If-None-Match -> 304",
    "token": "POST /api/grants/:id/token (requester) -> AuthZ-JWT",
    "verify": "POST /api/grants/verify -> valid",
    "approve": "POST /api/grants/:id/approve (management token), each grant once",
    "consume": "POST /api/grants/:id/consume (AuthZ-JWT), each once grant once",
    "consume_always": "POST /api/grants/:id/consume (AuthZ-JWT of an always grant) -> valid",
    "flow": "create -> approve -> token -> consume (one = the four requests)",
    "list": "GET /api/grants?limit=50 (agent token: its own grants, newest first)",
    "list_all": "GET /api/grants?limit=50 (management token: every grant, newest first)",
}
# With a closed loop of C clients, mean latency = C / throughput (Little's law): 500 flows/s from 64
# clients means 128 ms a flow on average, so "p99 < 50 ms" can only be meant per request.

# -- command line ------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None, description: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--clients",
        type=int,
        nargs="+",
        default=None,
        dest="client_counts",
        help="concurrent clients; several counts: one run each (default 64)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="interleaved rounds: each runs every setup and client count once on fresh servers (default 1)",
    )
    parser.add_argument(
        "--issue14",
        action="store_true",
        help="issue 14's clients and operations, 3 rounds, with the peer's figures beside grantd's",
    )
    parser.add_argument(
        "--peer", action="store_true", help="print the peer's reference figures beside the medians"
    )
    parser.add_argument(
        "--issue27",
        action="store_true",
        help="issue 27: the peer's IdP started and measured beside grantd in the same run (interleaved: "
        "peer, then grantd, per agent count and round), 2 workers, 16 and 64 agents, 3 rounds, rate "
        "limits counted, /healthz and one Ed25519 verify as the floor",
    )
    parser.add_argument(
        "--peer-live",
        action="store_true",
        help="start the peer's IdP (bench/peer_live.py) and measure it before grantd in every round",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a folder holding an earlier `grantd` package (a copy of appliance/ as grantd/, plugins/ "
        "as grantd/plugins/): every setup of every round also runs on servers of that code, "
        "just before this tree's, so before and after meet the same machine",
    )
    parser.add_argument(
        "--seeded",
        type=int,
        default=0,
        metavar="GRANTS",
        help="issue 27 item 5: also run every setup on a database seeded with GRANTS grants and "
        "GRANTS/10 agents (bench/seed.py; made once per run), interleaved with the empty one",
    )
    parser.add_argument(
        "--seeded-from",
        type=Path,
        help="with --seeded on SQLite: a file bench/seed.py made earlier (copied for each server)",
    )
    parser.add_argument(
        "--notify-down",
        action="store_true",
        help="issue 27 item 4: also run every setup with a mail channel configured whose SMTP server "
        "is down (the outbox written with each grant, the delivery worker retrying), interleaved",
    )
    parser.add_argument(
        "--log-apart",
        action="store_true",
        help='issue 23: also run every setup of this tree with [audit] sequencer = "process" '
        "(variant 'apart', interleaved): its 'serving' CPU is the write path without the decision "
        "log's integration, the same code otherwise; the tree's whole-server CPU has it inline",
    )
    parser.add_argument("--duration", type=float, default=None, help="seconds per operation (default 10)")
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2], help="server worker counts, per node (default 1 2)"
    )
    parser.add_argument(
        "--storage",
        choices=STORAGES,
        default="sqlite",
        help="sqlite (default; one file) or postgres (a private PostgreSQL server this run starts "
        "and stops, from Debian's postgresql package as the tests use it)",
    )
    parser.add_argument(
        "--limits",
        choices=LIMIT_MODES,
        default="off",
        help="off (default): every abuse limit 0, as the peer comparison runs; counted: every rate "
        "limit on but out of reach, so requests pay for their counters as in production",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        nargs="+",
        default=[1],
        help="grantd servers on separate ports sharing one database; the clients are spread "
        "evenly over them (default 1; several counts: one run each)",
    )
    parser.add_argument(
        "--pg-pool-size",
        type=int,
        help="[storage] pool_size of each grantd process on PostgreSQL (default: the config default)",
    )
    parser.add_argument(
        "--ops",
        nargs="+",
        choices=ALL_OPS,
        default=None,
        metavar="OP",
        help=f"operations to measure, in order (default all: {' '.join(DEFAULT_OPS)})",
    )
    parser.add_argument(
        "--client",
        choices=CLIENT_KINDS,
        default=None,
        help="HTTP client of the load: lean (default; a minimal keep-alive client) or httpx "
        "(~1 ms CPU a request: it caps the figures near 900/s on this machine)",
    )
    parser.add_argument(
        "--client-procs",
        type=int,
        default=None,
        help="load generator processes sharing the clients (default 1)",
    )
    parser.add_argument("--agents", type=int, help="agents to enroll (default: one per client)")
    parser.add_argument(
        "--pool-size",
        type=int,
        help="grants prepared for approve/consume (default: create rate x duration x 1.5)",
    )
    parser.add_argument(
        "--max-pool", type=int, default=60_000, help="cap on the automatic pool size (default 60000)"
    )
    parser.add_argument(
        "--reuse-pool",
        type=int,
        default=1024,
        help="distinct grants/tokens for get_etag, token, verify (default 1024)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of tables")
    parser.add_argument(
        "--profile",
        choices=ALL_OPS,
        metavar="OP",
        help="run OP against one server worker under cProfile and print where the time goes",
    )
    parser.add_argument(
        "--profile-out", type=Path, help="where to keep the cProfile file (default: a temp file)"
    )
    parser.add_argument("--top", type=int, default=25, help="functions to list with --profile (default 25)")
    args = parser.parse_args(argv)
    preset: dict[str, Any] = {
        "client_counts": [64],
        "rounds": 1,
        "ops": DEFAULT_OPS,
        "client": "lean",
        "client_procs": 1,
        "duration": 10.0,
    }
    if args.issue14:
        preset.update(client_counts=[16, 64], rounds=3, ops=ISSUE14_OPS, client="httpx", client_procs=2)
        args.peer = True
    if args.issue27:
        preset.update(
            client_counts=[16, 64],
            rounds=3,
            ops=["healthz", *ISSUE14_OPS],
            client="httpx",
            client_procs=2,
        )
        args.peer_live = True
        if args.workers == [1, 2]:
            args.workers = [2]
        if args.limits == "off":
            args.limits = "counted"
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.clients = args.client_counts[0]  # --profile and a single run use the first count
    args.agents_given = args.agents
    args.agents = args.agents or args.clients
    if (
        min(*args.client_counts, args.client_procs, args.agents, args.rounds, *args.workers, *args.nodes) < 1
        or args.duration <= 0
    ):
        parser.error("counts and the duration must be positive")
    if args.client_procs > min(args.client_counts):
        parser.error("--client-procs may not exceed --clients")
    return args

#!/usr/bin/env python3
"""Benchmark a real grantd server (issues 3 and 12): N concurrent HTTP/1.1 keep-alive clients repeat
one operation for a fixed time; per operation it prints requests/s, p50/p99 latency, errors, the
server CPU per answer and the peak memory of the server's process tree, for 1 and 2 server
workers (SQLite by default; PostgreSQL and several nodes on one database on request).

    .venv/bin/python bench/run.py                      # everything, 64 clients, 10 s per operation
    .venv/bin/python bench/run.py --duration 5 --ops verify create --workers 2
    .venv/bin/python bench/run.py --storage postgres --workers 1 --nodes 1 2   # a private PostgreSQL
    .venv/bin/python bench/run.py --client-procs 2     # the load from two processes
    .venv/bin/python bench/run.py --client httpx       # load through httpx (costly: see --help)
    .venv/bin/python bench/run.py --profile consume    # where one operation's time goes (cProfile)
    .venv/bin/python bench/run.py --json > figures.json
    .venv/bin/python bench/run.py --issue14            # as issue 14's clients load it, beside the peer's figures
    .venv/bin/python bench/run.py --issue14 --baseline /tmp/before/pkg   # before/after, interleaved per round
    .venv/bin/python bench/levers.py                   # issue 14's changes one at a time, CPU per call
    .venv/bin/python bench/run.py --issue27            # the peer's IdP started and measured beside grantd

--issue14 is: httpx clients (one keep-alive connection per agent), 2 load processes, 16 and 64 agents,
10 s per operation, 1 and 2 workers, 3 interleaved rounds (each round: every setup and agent count on a
fresh server, in turn; one worker only at 16 agents), issue 14's operations; it prints the medians over the rounds and the peer's
figures (bench/peer_reference.json, recorded on another day and machine: history, no comparison)
beside them. --issue27 measures the peer itself in the same run (bench/peer_live.py): every round
runs the peer, then grantd, per agent count (2 workers, 16 and 64 agents, 3 rounds, limits counted,
/healthz and one Ed25519 verify as the floor). Any option given as well overrides the preset.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing
import os
import platform
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the `bench` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.load import USE_ONCE, AgentCred, Plan, Tally, run_async, run_plan, warm_up  # noqa: E402
from bench.options import DESCRIPTIONS, parse_args  # noqa: E402
from bench.peer import (  # noqa: E402
    print_peer_comparison,
    print_rounds,
    print_same_run,
    summarize_rounds,
)
from bench.peer_live import ed25519_verify_ms, peer_missing, start_peer  # noqa: E402
from bench.prepare import POOLED_OPS, connections, enroll_agents, pool_for  # noqa: E402
from bench.profile import print_profile  # noqa: E402
from bench.results import CpuUse, OpResult, summarize  # noqa: E402
from bench.seed import seed_template  # noqa: E402
from bench.server import (  # noqa: E402
    Deployment,
    MemorySampler,
    management_token,
    notify_down_table,
    postgres_module,
    restart_profiled,
    start_deployment,
)

# create runs before approve and consume: its measured rate sizes their use-once pools.
LATENCY_AIM_NOTE = (
    "the p99 aim is checked per HTTP request: with 64 clients in a closed loop a flow (4 requests) "
    "takes 64 / rate on average (Little's law), 128 ms at 500 flows/s"
)
PEER_REUSE_POOL = 128  # distinct grants/tokens for the peer's get_etag, token, verify, consume_always
PEER_USE_ONCE_POOL = 400  # grants for the peer's approve (it stops when they are used up)
FALLBACK_RATE_ESTIMATE = 1500.0  # ops/s, for sizing use-once pools when create has not been measured
POOL_HEADROOM = 1.5


def log(message: str) -> None:
    """Progress goes to stderr so that --json output stays clean."""
    print(message, file=sys.stderr, flush=True)


# -- one measured operation -----------------------------------------------------------------------------------


def _split(count: int, parts: int) -> list[range]:
    """`count` indices cut into `parts` contiguous, nearly equal ranges."""
    bounds = [count * i // parts for i in range(parts + 1)]
    return [range(bounds[i], bounds[i + 1]) for i in range(parts)]


def make_plans(
    op: str,
    urls: list[str],
    token: str,
    agents: list[AgentCred],
    items: list[Any],
    args: argparse.Namespace,
    start_at: float,
) -> list[Plan]:
    """One plan per load process: its clients, their agents and nodes (client i keeps agent i mod K
    and node i mod N across processes) and its share of the pool (use-once items are never shared
    between processes)."""
    plans = []
    dialect = getattr(args, "dialect", "grantd")
    item_ranges = _split(len(items), args.client_procs)
    for proc, clients in enumerate(_split(args.clients, args.client_procs)):
        if not clients:
            continue
        offset, node = clients.start % len(agents), clients.start % len(urls)
        share = [items[i] for i in item_ranges[proc]] if op in USE_ONCE else items[proc :: args.client_procs]
        plans.append(
            Plan(
                op,
                urls[node:] + urls[:node],
                len(clients),
                start_at,
                args.duration,
                token,
                agents[offset:] + agents[:offset],
                share,
                args.client,
                dialect,
            )
        )
    return plans


def run_load(plans: list[Plan], executor: Executor | None) -> Tally:
    tally = Tally()
    tallies = [run_plan(plans[0])] if executor is None else list(executor.map(run_plan, plans))
    for part in tallies:
        tally.merge(part)
    return tally


@dataclass(frozen=True)
class Setup:
    storage: str
    nodes: int
    workers: int

    @property
    def label(self) -> str:
        name = "SQLite" if self.storage == "sqlite" else "PostgreSQL"
        nodes = f"{self.nodes} node{'s' if self.nodes > 1 else ''}"
        return f"{name}, {nodes} x {self.workers} worker{'s' if self.workers > 1 else ''}"


def measure(
    op: str,
    deployment: Deployment,
    setup: Setup,
    agents: list[AgentCred],
    items: list[Any],
    args: argparse.Namespace,
    executor: Executor | None,
) -> OpResult:
    # The clock starts a moment ahead, so every load process has opened its connections by then.
    start_at = time.time() + (2.0 if executor else 0.5)
    plans = make_plans(
        op, deployment.urls, management_token(deployment.nodes[0]), agents, items, args, start_at
    )
    snapshots: list[CpuUse] = []
    # CPU is counted from the moment the clock starts, not while the clients connect; the timer
    # thread takes that reading while this thread may be running the load itself.
    start_reading = threading.Timer(
        max(0.0, start_at - time.time()), lambda: snapshots.append(CpuUse.read(deployment))
    )
    start_reading.start()
    postgres_memory = MemorySampler(
        deployment.postgres_roots(), interval=0.5, relist_every=2, proportional=True
    )
    with MemorySampler(deployment.server_roots()) as memory, postgres_memory:
        tally = run_load(plans, executor)
    after = CpuUse.read(deployment)
    start_reading.join()
    cpu = after - snapshots[0]
    pool = len(items) if op in USE_ONCE else None
    postgres_mib = postgres_memory.peak_mib if deployment.postgres is not None else None
    result = summarize(op, setup, args, tally, start_at, memory.peak_mib, postgres_mib, cpu, pool)
    result.load_avg_1m = round(os.getloadavg()[0], 2)
    return result


# -- set-up --------------------------------------------------------------------------------------------------


def pool_size(op: str, args: argparse.Namespace, measured: dict[str, float]) -> int:
    """Use-once pools must last the whole run: the expected rate x duration, with headroom. The rate
    is guessed from create (approve and consume are writes of the same size). Reusable pools are
    fixed: enough distinct grants/tokens that nothing is served from a single hot row."""
    if op not in USE_ONCE:
        return args.reuse_pool
    if args.pool_size:
        return int(args.pool_size)
    estimate = max(measured.get("create", 0.0), measured.get("approve", 0.0)) or FALLBACK_RATE_ESTIMATE
    return max(500, min(args.max_pool, math.ceil(estimate * args.duration * POOL_HEADROOM)))


async def _enroll(server: Any, count: int, dialect: str) -> list[AgentCred]:
    """Set-up goes to the first node: they share one database."""
    async with connections(server.url) as conns:
        return await enroll_agents(conns, management_token(server), count, dialect)


async def _prepare(server: Any, op: str, agents: list[AgentCred], size: int, dialect: str) -> list[Any]:
    async with connections(server.url) as conns:
        return await pool_for(op, conns, management_token(server), agents, size, dialect)


def enroll(server: Any, count: int, dialect: str = "grantd") -> list[AgentCred]:
    return run_async(_enroll(server, count, dialect))  # type: ignore[no-any-return]


def prepare_pool(
    server: Any, op: str, agents: list[AgentCred], size: int, dialect: str = "grantd"
) -> list[Any]:
    if op not in POOLED_OPS:
        return []
    started = time.monotonic()
    items: list[Any] = run_async(_prepare(server, op, agents, size, dialect))
    log(f"    prepared {len(items)} grants for {op} in {time.monotonic() - started:.1f} s")
    return items


@contextmanager
def client_processes(count: int) -> Iterator[Executor | None]:
    """Load processes that live as long as one server; spawned, not forked: the parent runs a
    memory-sampling thread, and forking a threaded process is unsafe."""
    if count <= 1:
        yield None
        return
    with ProcessPoolExecutor(max_workers=count, mp_context=multiprocessing.get_context("spawn")) as executor:
        # as many overlapping sleeps as processes: every process is started (and has imported the
        # load code) before the first measurement gives it two seconds to connect
        list(executor.map(warm_up, [0.5] * count))
        yield executor


def deploy(setup: Setup, directory: Path, args: argparse.Namespace, postgres: Any) -> Deployment:
    return start_deployment(
        directory / f"{setup.storage}-{setup.nodes}n-{setup.workers}w",
        setup.storage,
        setup.nodes,
        setup.workers,
        postgres,
        args.pg_pool_size,
        args.limits,
        getattr(args, "seed_template", None),
        getattr(args, "extra_config", ""),
    )


def wait_for_log(url: str, timeout: float = 120.0) -> None:
    """Issue 23: let the decision log integrate what the preparation wrote (the size of the newest
    signed checkpoint stops growing) so the measurement does not also pay for that backlog. A server
    without the log (an older --baseline) answers 404: nothing to wait for."""
    import httpx

    deadline = time.monotonic() + timeout
    last = -1
    with httpx.Client(timeout=5) as http:
        while time.monotonic() < deadline:
            r = http.get(f"{url}/api/audit/checkpoint")
            if r.status_code == 404:
                return
            size = int(r.text.split("\n")[1]) if r.status_code == 200 else -1
            if size == last and size >= 0:
                return
            last = size
            time.sleep(1.0)  # longer than a sequencer step (200 ms) and the signing after it


def bench_setup(setup: Setup, args: argparse.Namespace, postgres: Any, peer: bool = False) -> list[OpResult]:
    """Every operation on one fresh deployment: grantd's (`setup`), or with `peer` the peer's IdP
    (bench/peer_live.py) driven by the same load, recorded under `setup` with variant "peer"."""
    results: list[OpResult] = []
    measured: dict[str, float] = {}
    args = argparse.Namespace(**{**vars(args), "dialect": "peer" if peer else "grantd"})
    if peer:
        # The peer's create reads every stored grant (its file store has no index), so set-up time
        # grows with the square of the pools: smaller pools (its reads do not depend on the count).
        args.reuse_pool = min(args.reuse_pool, PEER_REUSE_POOL)
        args.pool_size = args.pool_size or PEER_USE_ONCE_POOL
    with tempfile.TemporaryDirectory(prefix="grantd-bench-") as tmp:
        deployment: Any = start_peer(Path(tmp) / "peer") if peer else deploy(setup, Path(tmp), args, postgres)
        try:
            label = "the peer's IdP (one Node process)" if peer else setup.label
            log(f"{label} at {' '.join(deployment.urls)}; enrolling {args.agents} agents")
            server = deployment.nodes[0]
            agents = enroll(server, args.agents, args.dialect)
            with client_processes(args.client_procs) as executor:
                for op in args.ops:
                    if peer and op == "healthz":
                        continue  # grantd's floor; the peer has no such route
                    items = prepare_pool(server, op, agents, pool_size(op, args, measured), args.dialect)
                    if not peer:
                        wait_for_log(server.url)
                    log(f"  {op}: {args.duration:g} s with {args.clients} clients")
                    result = measure(op, deployment, setup, agents, items, args, executor)
                    measured[op] = result.rate
                    if peer:
                        result.variant = "peer"
                    results.append(result)
                    log(
                        f"    {result.rate:,.0f}/s p99 {result.p99_ms} ms, {result.errors} errors, "
                        f"{_cell(result.server_cpu_ms, 2)} ms grantd CPU per answer "
                        f"({_cell(result.serving_cpu_ms, 2)} serving, {_cell(result.sequencer_cpu_ms, 2)} log sequencer)"
                    )
        finally:
            deployment.stop()
    return results


@contextmanager
def private_postgres(storage: str) -> Iterator[Any]:
    """The PostgreSQL server of this run (tests/support/postgres.py: a fresh cluster on a unix socket
    in a temporary directory), one database per setup; None on SQLite."""
    if storage != "postgres":
        yield None
        return
    pg = postgres_module()
    why = pg.available()
    if why is not None:
        raise SystemExit(f"--storage postgres: {why}")
    log("starting a private PostgreSQL server")
    server = pg.Postgres().start()
    try:
        yield server
    finally:
        server.stop()


# -- report ------------------------------------------------------------------------------------------------------


def machine_facts() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(
                (line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), ""
            )
    except OSError:
        pass
    return {
        "cpu_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def _cell(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _notes(r: OpResult) -> str:
    notes = []
    if r.op in ("authenticate", "flow"):
        notes.append(f"{r.request_rate:,.0f} req/s")
    if r.pool_prepared is not None:
        used = f"{r.operations:,} of {r.pool_prepared:,} used"
        ran_out = (
            f", ran out at {r.pool_exhausted_after_s:g} s" if r.pool_exhausted_after_s is not None else ""
        )
        notes.append(used + ran_out)
    if r.error_examples:
        notes.append("errors: " + "; ".join(r.error_examples))
    return "; ".join(notes)


def print_table(setup: Setup, results: list[OpResult], clients: int | str) -> None:
    print(f"\n== {setup.label}, {clients} clients ==")
    header = (
        f"{'operation':<13}{'ops/s':>8}{'aim':>7}{'p50 ms':>8}{'p99 ms':>8}{'req p99':>8}{'aim':>5}{'met':>5}"
        f"{'errors':>7}{'ms/op':>7}{'pg':>6}{'peak MiB':>9}{'pg':>5}"
        f"{'CPU: srv':>9}{'pg':>5}{'load':>5}{'other':>6}{'idle':>5}  notes"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        met = "-" if r.meets_aim is None else ("yes" if r.meets_aim else "NO")
        aim_rate = "-" if r.aim_rate is None else f"{r.aim_rate:,.0f}"
        aim_p99 = "-" if r.aim_p99_ms is None else f"<{r.aim_p99_ms:g}"
        print(
            f"{r.op:<13}{_cell(r.rate, 0):>8}{aim_rate:>7}{_cell(r.p50_ms):>8}{_cell(r.p99_ms):>8}"
            f"{_cell(r.request_p99_ms):>8}{aim_p99:>5}{met:>5}{r.errors:>7}{_cell(r.server_cpu_ms, 2):>7}"
            f"{_cell(r.postgres_cpu_ms, 2):>6}{_cell(r.peak_rss_mib):>9}{_cell(r.postgres_peak_mib, 0):>5}"
            f"{r.server_cpu_cores:>9.2f}{r.postgres_cpu_cores:>5.1f}{r.client_cpu_cores:>5.1f}"
            f"{r.other_cpu_cores:>6.1f}{r.idle_cpu_cores:>5.1f}"
            f"  {_notes(r)}"
        )


def storage_note(args: argparse.Namespace) -> str:
    if args.storage == "sqlite":
        return "SQLite (one file shared by all nodes)"
    pool = args.pg_pool_size or "default"
    return (
        f"PostgreSQL (a private server from tests/support/postgres.py: unix socket, fsync off; "
        f"pool_size {pool} per process)"
    )


def print_report(facts: dict[str, Any], args: argparse.Namespace, results: list[OpResult]) -> None:
    print(
        f"grantd benchmark - {facts['cpu_cores']} cores ({facts['cpu_model']}), {facts['implementation']} "
        f"{facts['python']}, {facts['platform']}; load average at start {facts['load_average_at_start']}, "
        f"at end {facts.get('load_average_at_end')}"
    )
    print(
        f"{'/'.join(map(str, args.client_counts))} concurrent clients ({args.client} client, one HTTP/1.1 keep-alive connection each, "
        f"{args.client_procs} load process(es), spread evenly over the nodes), {args.duration:g} s per operation, "
        f"{args.rounds} round(s), "
        f"{storage_note(args)}, access log off, "
        + (
            "[limits] off (every abuse limit 0)"
            if args.limits == "off"
            else "[limits] counted (every rate limit on, out of reach: each request pays for its counters)"
        )
    )
    for op in args.ops:
        print(f"  {op:<13}{DESCRIPTIONS[op]}")
    for setup in setups(args):
        for clients in args.client_counts:
            for variant in sorted({r.variant for r in results}, reverse=True):
                rows = [
                    r
                    for r in results
                    if (r.storage, r.nodes, r.workers) == dataclasses.astuple(setup)
                    and r.clients == clients
                    and r.variant == variant
                ]
                if rows:
                    label = {
                        "tree": "",
                        "baseline": " (baseline code)",
                        "peer": " (the peer's IdP)",
                        "seeded": " (seeded database)",
                        "notify": " (mail server down)",
                        "apart": " (log sequencer in its own process)",
                    }[variant]
                    print_table(setup, rows, f"{clients}{label}")
    print(
        f"\naim: issue 3's figures; 'met' needs the rate, no errors and a request p99 under the aim ({LATENCY_AIM_NOTE})."
    )
    print(
        "p50/p99 ms: whole operation; req p99: single HTTP requests (they differ for authenticate and flow)."
    )
    print("ms/op: CPU (user + system, from /proc/PID/stat, reaped children included) of all grantd processes")
    print(
        "over the measured window divided by the correct answers (operations); pg: the same for PostgreSQL's"
    )
    print("processes. It depends far less than ops/s on how busy the machine is. peak MiB: summed RSS of")
    print("the grantd processes; pg: summed PSS of PostgreSQL's (shared buffers counted once).")
    print("CPU: mean cores kept busy during the run by the grantd processes (srv), PostgreSQL (pg), the load")
    print(
        "generator (load) and everything else on the machine (other), and the cores left idle. The load generator"
    )
    print("shares the cores with the server, and 'other' is work of other people on a shared machine: when")
    print("it is high the figures are low and noisy (compare runs, not single numbers). Idle cores while")
    print("the rate is short of the aim mean the server waits (on SQLite's lock, say) rather than computes.")


def variants(args: argparse.Namespace) -> list[tuple[str, Path | None]]:
    """The server code each setup runs, in turn within every round: --baseline first, then this tree;
    with --seeded, this tree on an empty database ("tree"), then on a seeded one ("seeded"); with
    --notify-down, then with a mail channel whose server is down ("notify"); with --log-apart, then
    with the decision log integrated by a process of its own ("apart")."""
    tree = [("tree", None)] + ([("seeded", None)] if args.seeded else [])
    tree += [("notify", None)] if args.notify_down else []
    tree += [("apart", None)] if args.log_apart else []
    return ([("baseline", args.baseline)] if args.baseline else []) + tree


def variant_config(variant: str) -> str:
    """More configuration for a variant: the mail channel whose server is down ("notify"), the log's
    sequencer in a process of its own ("apart": its serving CPU is the write path without the log)."""
    if variant == "notify":
        return notify_down_table()
    if variant == "apart":
        return '[audit]\nsequencer = "process"\n'
    return ""


@contextmanager
def server_code(path: Path | None) -> Iterator[None]:
    """Servers started inside run the `grantd` package under `path` (bench.server: GRANTD_BENCH_SERVER_PATH)."""
    if path is None:
        yield
        return
    before = os.environ.get("GRANTD_BENCH_SERVER_PATH")
    os.environ["GRANTD_BENCH_SERVER_PATH"] = str(path)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("GRANTD_BENCH_SERVER_PATH", None)
        else:
            os.environ["GRANTD_BENCH_SERVER_PATH"] = before


def setups(args: argparse.Namespace) -> list[Setup]:
    return [Setup(args.storage, nodes, workers) for nodes in args.nodes for workers in args.workers]


def profile(args: argparse.Namespace) -> None:
    """Set up on a plain server, then restart it under cProfile and measure one operation."""
    op = args.profile
    out = args.profile_out or Path(tempfile.gettempdir()) / f"grantd-bench-{op}.prof"
    out.unlink(missing_ok=True)  # so that the existence check below proves this run wrote it
    setup = Setup(args.storage, 1, 1)
    with (
        tempfile.TemporaryDirectory(prefix="grantd-bench-") as tmp,
        private_postgres(args.storage) as postgres,
        seed_template(args, postgres) as template,
    ):
        args.extra_config = notify_down_table() if args.notify_down else ""
        args.seed_template = template  # --seeded: profile on the seeded database
        deployment = deploy(setup, Path(tmp), args, postgres)
        try:
            agents = enroll(deployment.nodes[0], args.agents)
            items = prepare_pool(deployment.nodes[0], op, agents, pool_size(op, args, {}))
            deployment.nodes[0] = restart_profiled(deployment.nodes[0], out)
            log(f"  {op} under cProfile: {args.duration:g} s with {args.clients} clients")
            with client_processes(args.client_procs) as executor:
                result = measure(op, deployment, setup, agents, items, args, executor)
        finally:
            code = deployment.nodes[
                0
            ].stop()  # SIGTERM: Sanic stops gracefully and cProfile writes its file on exit
    if not out.exists():
        raise SystemExit(f"the profiled server (exit {code}) did not write {out}")
    print(
        f"{op} under cProfile (slower than without): {result.rate:,.0f}/s, p50 {result.p50_ms} ms, "
        f"p99 {result.p99_ms} ms, {result.errors} errors; profile in {out}"
    )
    print_profile(out, args.top)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, __doc__)
    if args.profile:
        profile(args)
        return 0
    facts = machine_facts()
    results: list[OpResult] = []
    floor_ms: list[float] = []
    peer_why = peer_missing() if args.peer_live else None
    if peer_why:
        log(f"THE PEER IS NOT MEASURED: {peer_why}")
        facts["peer"] = f"not measured: {peer_why}"
    with private_postgres(args.storage) as postgres, seed_template(args, postgres) as template:
        # Interleaved: each round runs every setup and agent count once, on a fresh server each time,
        # so slow drifts of the shared machine spread over all of them instead of one.
        for round_number in range(1, args.rounds + 1):
            if args.rounds > 1:
                log(f"== round {round_number} of {args.rounds}")
            floor_ms.append(ed25519_verify_ms())
            for number, setup in enumerate(setups(args)):
                for clients in args.client_counts:
                    if args.issue14 and setup.workers == 1 and clients != min(args.client_counts):
                        continue  # as in the issue: one worker only at the smaller agent count
                    run_args = argparse.Namespace(
                        **{**vars(args), "clients": clients, "agents": args.agents_given or clients}
                    )
                    if args.peer_live and not peer_why and number == 0:
                        log("-- peer")
                        results.extend(bench_setup(setup, run_args, None, peer=True))
                    for variant, server_path in variants(args):
                        with server_code(server_path):
                            if args.baseline or args.seeded or args.notify_down or args.log_apart:
                                log(f"-- {variant}")
                            run_args.seed_template = template if variant == "seeded" else None
                            run_args.extra_config = variant_config(variant)
                            for result in bench_setup(setup, run_args, postgres):
                                result.variant = variant
                                results.append(result)
    facts["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    facts["ed25519_verify_ms"] = floor_ms
    summaries = summarize_rounds([asdict(r) for r in results])
    if args.json:
        print(
            json.dumps(
                {
                    "machine": facts,
                    "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                    "results": [asdict(r) for r in results],
                    "medians": [asdict(s) for s in summaries],
                },
                indent=2,
            )
        )
    else:
        print_report(facts, args, results)
        print_rounds(summaries)
        if args.peer:
            print_peer_comparison([s for s in summaries if s.variant != "peer"])
        if args.peer_live:
            print_same_run(summaries, floor_ms, facts.get("peer"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

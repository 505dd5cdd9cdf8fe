"""What one measured operation yields (bench/run.py): its result row, CPU use from /proc, the
medians and percentiles the report prints."""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bench.load import Tally
from bench.server import (
    Deployment,
    machine_busy_seconds,
    sequencer_cpu_seconds,
    tree_cpu_seconds,
)

# The aims of issue 3, at 64 concurrent clients on a 2-core machine: operations/s and p99 in ms.
AIMS: dict[str, tuple[float, float]] = {
    "verify": (4000, 50),
    "create": (2500, 50),
    "authenticate": (1500, 50),
    "flow": (500, 50),
}
# create runs before approve and consume: its measured rate sizes their use-once pools.


if TYPE_CHECKING:
    from bench.run import Setup


# -- results ----------------------------------------------------------------------------------------------


@dataclass
class OpResult:
    op: str
    storage: str
    nodes: int  # grantd servers on separate ports sharing one database
    workers: int  # processes per node
    clients: int
    client_procs: int
    operations: int
    requests: int
    elapsed_s: float
    rate: float  # operations/s
    request_rate: float
    p50_ms: float | None  # of whole operations
    p99_ms: float | None
    request_p50_ms: float | None  # of single HTTP requests (differs for authenticate and flow)
    request_p99_ms: float | None
    errors: int
    peak_rss_mib: float  # summed RSS of every node's process tree
    server_cpu_ms: float | None  # CPU (user + system) of every grantd process per correct operation
    serving_cpu_ms: float | None  # the same without the decision log's sequencer process (issue 23)
    sequencer_cpu_ms: float | None  # the sequencer process alone, per correct operation
    postgres_cpu_ms: float | None  # the same for PostgreSQL's processes (None on SQLite)
    postgres_peak_mib: float | None  # summed PSS of PostgreSQL's processes (shared buffers counted once)
    server_cpu_cores: float  # mean CPU cores the grantd processes kept busy
    postgres_cpu_cores: float  # mean CPU cores PostgreSQL's processes kept busy
    client_cpu_cores: float  # mean CPU cores the load generator kept busy
    other_cpu_cores: float  # mean CPU cores busy with anything else on the machine (noise)
    idle_cpu_cores: float  # mean CPU cores left idle: capacity nobody used
    pool_prepared: int | None = None
    pool_exhausted_after_s: float | None = None
    aim_rate: float | None = None
    aim_p99_ms: float | None = None
    meets_aim: bool | None = None
    error_examples: list[str] = field(default_factory=list)
    variant: str = "tree"  # "tree": this working tree's servers; "baseline": --baseline's; "peer": the peer's
    load_avg_1m: float | None = None  # the machine's 1-minute load average at the end of the window


def percentile(sorted_values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile."""
    if not sorted_values:
        return None
    return sorted_values[max(0, math.ceil(fraction * len(sorted_values)) - 1)]


@dataclass
class CpuUse:
    """CPU seconds spent during one measurement (or used so far, for a reading)."""

    server: float
    postgres: float
    machine: float
    sequencer: float = 0.0  # part of `server`: the decision log's sequencer process

    @classmethod
    def read(cls, deployment: Deployment) -> CpuUse:
        return cls(
            tree_cpu_seconds(deployment.server_roots()),
            tree_cpu_seconds(deployment.postgres_roots()),
            machine_busy_seconds(),
            sequencer_cpu_seconds(deployment.server_roots()),
        )

    def __sub__(self, before: CpuUse) -> CpuUse:
        return CpuUse(
            self.server - before.server,
            self.postgres - before.postgres,
            self.machine - before.machine,
            self.sequencer - before.sequencer,
        )


def per_operation_ms(cpu_s: float, operations: int) -> float | None:
    # four decimals: the decision log's share is ~0.02-0.05 ms, which three would round by up to 2.5 %
    return round(cpu_s * 1000 / operations, 4) if operations else None


def summarize(
    op: str,
    setup: Setup,
    args: argparse.Namespace,
    tally: Tally,
    start_at: float,
    peak_mib: float,
    postgres_mib: float | None,
    cpu: CpuUse,
    pool: int | None,
) -> OpResult:
    deadline = start_at + args.duration
    elapsed = max(tally.finished_at, tally.exhausted_at or deadline) - start_at
    latencies = sorted(tally.latencies_ms)
    request_latencies = sorted(tally.request_latencies_ms)
    aim = AIMS.get(op)
    result = OpResult(
        op=op,
        storage=setup.storage,
        nodes=setup.nodes,
        workers=setup.workers,
        clients=args.clients,
        client_procs=args.client_procs,
        operations=len(latencies),
        requests=len(request_latencies),
        elapsed_s=round(elapsed, 2),
        rate=round(len(latencies) / elapsed, 1),
        request_rate=round(len(request_latencies) / elapsed, 1),
        p50_ms=_round(percentile(latencies, 0.50)),
        p99_ms=_round(percentile(latencies, 0.99)),
        request_p50_ms=_round(percentile(request_latencies, 0.50)),
        request_p99_ms=_round(percentile(request_latencies, 0.99)),
        errors=sum(tally.errors.values()),
        peak_rss_mib=round(peak_mib, 1),
        server_cpu_ms=per_operation_ms(cpu.server, len(latencies)),
        serving_cpu_ms=per_operation_ms(cpu.server - cpu.sequencer, len(latencies)),
        sequencer_cpu_ms=per_operation_ms(cpu.sequencer, len(latencies)),
        postgres_cpu_ms=per_operation_ms(cpu.postgres, len(latencies))
        if setup.storage == "postgres"
        else None,
        postgres_peak_mib=None if postgres_mib is None else round(postgres_mib, 1),
        server_cpu_cores=round(cpu.server / elapsed, 2),
        postgres_cpu_cores=round(cpu.postgres / elapsed, 2),
        client_cpu_cores=round(tally.client_cpu_s / elapsed, 2),
        other_cpu_cores=round(
            max(0.0, cpu.machine - cpu.server - cpu.postgres - tally.client_cpu_s) / elapsed, 2
        ),
        idle_cpu_cores=round(max(0.0, (os.cpu_count() or 1) - cpu.machine / elapsed), 2),
        pool_prepared=pool,
        error_examples=[f"{n} x {text}" for text, n in tally.errors.most_common(3)],
    )
    if tally.exhausted_at is not None:
        result.pool_exhausted_after_s = round(tally.exhausted_at - start_at, 2)
    if aim:
        result.aim_rate, result.aim_p99_ms = aim
        p99 = result.request_p99_ms or math.inf  # see LATENCY_AIM_NOTE
        result.meets_aim = result.rate >= aim[0] and p99 < aim[1] and not result.errors
    return result


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)

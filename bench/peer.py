"""Rounds and the peer: medians over interleaved rounds, and the peer IdP's reference figures
(bench/peer_reference.json, from issue 14) printed beside grantd's."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REFERENCE = Path(__file__).resolve().parent / "peer_reference.json"
# Issue 14's operations, in its order; "reads" must answer with request p99 < 50 ms at 16 agents.
ISSUE14_OPS = ["authenticate", "create", "approve", "token", "verify", "consume_always", "get_etag", "flow"]
READS = {"verify", "consume_always", "get_etag", "token"}
READ_P99_AIM_MS = 50.0
READ_P99_AIM_CLIENTS = 16


def load_reference(path: Path = REFERENCE) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


@dataclass
class Summary:
    """One (setup, clients, operation) over its rounds: medians, and the spread of the CPU figure."""

    storage: str
    nodes: int
    workers: int
    clients: int
    op: str
    variant: str  # "tree", "baseline" (--baseline), "apart" and its "serving" part (--log-apart), ...
    rounds: int
    cpu_ms: float | None  # median server CPU ms per correct answer
    cpu_ms_all: list[float]  # every round's figure, in round order
    postgres_cpu_ms: float | None
    rate: float
    p50_ms: float | None
    p99_ms: float | None  # median of the rounds' whole-operation p99
    request_p99_ms: float | None  # median of the rounds' single-request p99
    errors: int  # summed over the rounds
    peak_rss_mib: float  # the highest of the rounds
    other_cpu_cores: float  # mean cores taken by other work on the machine during the rounds
    load_avg_1m: float | None = None  # median of the rounds' 1-minute load average


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def summarize_rounds(results: list[dict[str, Any]]) -> list[Summary]:
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        groups[
            (r["storage"], r["nodes"], r["workers"], r["clients"], r["op"], r.get("variant", "tree"))
        ].append(r)
    for key, rows in list(groups.items()):
        if key[-1] == "apart":  # --log-apart: its serving processes alone, the write path without the log
            groups[(*key[:-1], "serving")] = [
                {**r, "server_cpu_ms": r.get("serving_cpu_ms"), "postgres_cpu_ms": None} for r in rows
            ]
    summaries = []
    for (storage, nodes, workers, clients, op, variant), rows in groups.items():
        summaries.append(
            Summary(
                storage=storage,
                nodes=nodes,
                workers=workers,
                clients=clients,
                op=op,
                variant=variant,
                rounds=len(rows),
                cpu_ms=_median([r["server_cpu_ms"] for r in rows]),
                cpu_ms_all=[r["server_cpu_ms"] for r in rows if r["server_cpu_ms"] is not None],
                postgres_cpu_ms=_median([r["postgres_cpu_ms"] for r in rows]),
                rate=_median([r["rate"] for r in rows]) or 0.0,
                p50_ms=_median([r["p50_ms"] for r in rows]),
                p99_ms=_median([r["p99_ms"] for r in rows]),
                request_p99_ms=_median([r["request_p99_ms"] for r in rows]),
                errors=sum(r["errors"] for r in rows),
                peak_rss_mib=max(r["peak_rss_mib"] for r in rows),
                other_cpu_cores=round(statistics.mean(r["other_cpu_cores"] for r in rows), 2),
                load_avg_1m=_median([r.get("load_avg_1m") for r in rows]),
            )
        )
    return summaries


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def print_rounds(summaries: list[Summary]) -> None:
    print("\n== medians over the rounds (CPU ms per answer: median [each round]) ==")
    header = (
        f"{'code':<9}{'setup':<16}{'C':>4} {'operation':<15}{'CPU ms':>8}  {'rounds':<22}{'ops/s':>8}{'p50':>7}{'p99':>7}"
        f"{'req p99':>8}{'errors':>7}{'RSS MiB':>8}{'other':>6}"
    )
    print(header)
    print("-" * len(header))
    for s in sorted(summaries, key=lambda s: (s.storage, s.nodes, s.workers, s.clients, s.variant)):
        setup = f"{s.storage} {s.nodes}x{s.workers}w"
        each = " ".join(f"{v:.2f}" for v in s.cpu_ms_all)
        print(
            f"{s.variant:<9}{setup:<16}{s.clients:>4} {s.op:<15}{_f(s.cpu_ms):>8}  {each:<22}{_f(s.rate, 0):>8}{_f(s.p50_ms, 1):>7}"
            f"{_f(s.p99_ms, 1):>7}{_f(s.request_p99_ms, 1):>8}{s.errors:>7}{_f(s.peak_rss_mib, 0):>8}"
            f"{s.other_cpu_cores:>6.2f}"
        )


def print_peer_comparison(summaries: list[Summary], reference: dict[str, Any] | None = None) -> None:
    """grantd's medians beside the peer's figures; ratio = peer ÷ grantd (higher is better for grantd)."""
    reference = reference or load_reference()
    for variant in sorted({s.variant for s in summaries}, reverse=True):  # this tree first
        _print_peer_comparison(
            [s for s in summaries if s.variant == variant],
            reference,
            "" if variant == "tree" else " (the --baseline code)",
        )
    print(
        "ratio: peer ÷ grantd with 2 workers at 16 / 64 agents; aim: issue 14's least ratio; '!' marks a read whose "
        f"request p99 at {READ_P99_AIM_CLIENTS} agents is not under {READ_P99_AIM_MS:g} ms."
    )


def _print_peer_comparison(summaries: list[Summary], reference: dict[str, Any], label: str) -> None:
    by_key = {(s.storage, s.workers, s.clients, s.op): s for s in summaries if s.nodes == 1}
    storages = sorted({s.storage for s in summaries})
    print(
        f"\n== against the peer's RECORDED figures (issue 14, {reference['recorded']}, another machine: history, no "
        f"comparison; --issue27 measures the peer in this run): server CPU ms per correct answer{label} =="
    )
    print(f"peer: {reference['peer']}; its figures and grantd's at filing are in {REFERENCE.name}")
    for storage in storages:
        header = (
            f"{'operation':<15}{'peer C16':>9}{'peer C64':>9}{'2w C16':>8}{'2w C64':>8}{'ratio':>16}"
            f"{'aim':>6}{'met':>5}{'1w C16':>8}{'filed 2w':>12}{'req p99 C16':>12}"
        )
        print(f"\n{storage}:")
        print(header)
        print("-" * len(header))
        for op, ref in reference["ops"].items():
            two = [by_key.get((storage, 2, c, op)) for c in (16, 64)]
            one = by_key.get((storage, 1, 16, op))
            if not any(two) and one is None:
                continue
            ratios = []
            for c, s in zip(("16", "64"), two, strict=True):
                ratios.append(None if s is None or not s.cpu_ms else ref["peer"][c] / s.cpu_ms)
            aim = ref["aim_ratio"]
            met = (
                "-"
                if None in ratios
                else (
                    "yes"
                    if all(r >= aim for r in ratios if r is not None) and not any(s.errors for s in two if s)
                    else "NO"
                )
            )
            ratio_text = " / ".join(
                "-" if r is None else f"{r:.1f}x" if r < 100 else f"{r:.0f}x" for r in ratios
            )
            filed = " / ".join(f"{v:g}" for v in ref["grantd_2w"].values())
            p99 = two[0].request_p99_ms if two[0] else None
            p99_text = _f(p99, 1) + (
                " !" if op in READS and p99 is not None and p99 >= READ_P99_AIM_MS else ""
            )
            print(
                f"{op:<15}{ref['peer']['16']:>9g}{ref['peer']['64']:>9g}{_f(two[0].cpu_ms if two[0] else None):>8}"
                f"{_f(two[1].cpu_ms if two[1] else None):>8}{ratio_text:>16}{aim:>5g}x{met:>5}"
                f"{_f(one.cpu_ms if one else None):>8}{filed:>12}{p99_text:>12}"
            )
        rss = [s.peak_rss_mib for s in summaries if s.storage == storage and s.workers == 2 and s.nodes == 1]
        errors = sum(s.errors for s in summaries if s.storage == storage)
        if rss:
            limit = reference["peak_rss_mib"]["aim_grantd_2w_below"]
            print(
                f"peak RSS with 2 workers: {max(rss):.0f} MiB (aim < {limit} MiB: {'met' if max(rss) < limit else 'NOT met'}; "
                f"peer {reference['peak_rss_mib']['peer']} MiB); errors in all runs: {errors}"
            )


def _total(s: Summary | None) -> float | None:
    """CPU per answer of every serving process, PostgreSQL's added where it serves."""
    if s is None or s.cpu_ms is None:
        return None
    return s.cpu_ms + (s.postgres_cpu_ms or 0.0)


def print_same_run(summaries: list[Summary], floor_ms: list[float], peer_note: str | None = None) -> None:
    """Issue 27: the peer measured in this very run beside grantd (2 workers); ratio = peer ÷ grantd;
    'above floor' = grantd's figure minus its /healthz (Sanic's cheapest answer) in the same round set."""
    print("\n== against the peer, measured in this run (CPU ms per correct answer, medians) ==")
    if peer_note:
        print(f"the peer was {peer_note}")
    if floor_ms:
        print(
            f"one Ed25519 verify in this run: {statistics.median(floor_ms):.3f} ms (each round: {floor_ms})"
        )
    grantd = {(s.storage, s.clients, s.op): s for s in summaries if s.variant == "tree" and s.workers == 2}
    peer = {(s.clients, s.op): s for s in summaries if s.variant == "peer"}
    counts = sorted({c for _, c, _ in grantd})
    for storage in sorted({k[0] for k in grantd}):
        pg = " (+ PostgreSQL)" if storage == "postgres" else ""
        print(f"\n{storage}, grantd 2 workers{pg}; load = median 1-minute load average of the rounds")
        header = f"{'operation':<15}" + "".join(
            f"{'peer C' + str(c):>10}{'grantd':>8}{'ratio':>7}{'above floor':>12}{'load p/g':>11}{'err p/g':>10}"
            for c in counts
        )
        print(header)
        print("-" * len(header))
        for op in ["healthz", *ISSUE14_OPS]:
            cells = []
            for c in counts:
                g, p = grantd.get((storage, c, op)), peer.get((c, op))
                floor = _total(grantd.get((storage, c, "healthz")))
                gt, pt = _total(g), _total(p)
                ratio = "-" if not gt or pt is None else f"{pt / gt:.1f}x"
                above = "-" if gt is None or floor is None or op == "healthz" else f"{gt - floor:+.2f}"
                load = f"{_f(p.load_avg_1m if p else None, 1)}/{_f(g.load_avg_1m if g else None, 1)}"
                errors = f"{p.errors if p else '-'}/{g.errors if g else '-'}"
                cells.append(f"{_f(pt):>10}{_f(gt):>8}{ratio:>7}{above:>12}{load:>11}{errors:>10}")
            if any(grantd.get((storage, c, op)) or peer.get((c, op)) for c in counts):
                print(f"{op:<15}" + "".join(cells))

"""bench/peer.py's medians over rounds: with --log-apart, the "apart" variant also yields its serving
processes alone ("serving"), the write path without the decision log's integration (issue 23)."""

from __future__ import annotations

import sys
from typing import Any

from conftest import ROOT

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.peer import summarize_rounds  # noqa: E402


def result(variant: str, server: float, serving: float, round_load: float = 1.0) -> dict[str, Any]:
    return {
        "storage": "sqlite",
        "nodes": 1,
        "workers": 1,
        "clients": 16,
        "op": "create",
        "variant": variant,
        "server_cpu_ms": server,
        "serving_cpu_ms": serving,
        "postgres_cpu_ms": None,
        "rate": 1000.0,
        "p50_ms": 1.0,
        "p99_ms": 2.0,
        "request_p99_ms": 2.0,
        "errors": 0,
        "peak_rss_mib": 70.0,
        "other_cpu_cores": 0.1,
        "load_avg_1m": round_load,
    }


def test_the_apart_variant_also_gives_its_serving_processes_alone() -> None:
    rows = [result("tree", 0.37, 0.37), result("apart", 0.38, 0.33), result("apart", 0.36, 0.34)]
    by_variant = {s.variant: s for s in summarize_rounds(rows)}
    assert set(by_variant) == {"tree", "apart", "serving"}
    assert by_variant["apart"].cpu_ms == 0.37 and by_variant["apart"].cpu_ms_all == [0.38, 0.36]
    assert by_variant["serving"].cpu_ms == 0.335 and by_variant["serving"].cpu_ms_all == [0.33, 0.34]
    assert by_variant["tree"].cpu_ms == 0.37


def test_other_variants_get_no_serving_row() -> None:
    rows = [result("tree", 0.37, 0.30), result("baseline", 0.35, 0.35)]
    assert {s.variant for s in summarize_rounds(rows)} == {"tree", "baseline"}

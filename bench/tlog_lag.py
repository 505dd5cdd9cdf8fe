"""How long from a decision to a signed checkpoint that holds it (issue 23: "within about 1 s")? A real
`grantd serve` (its sequencer in a process of its own, the default), SQLite: create N grants one
after another; after each, poll ``GET /api/audit/checkpoint`` every 10 ms until the signed size
covers it; print the median, p90 and maximum lag. ``--background N``: N more clients keep creating
grants meanwhile (the sequencer then integrates under load).

    .venv/bin/python bench/tlog_lag.py [--samples 30] [--background 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.server import _conftest  # noqa: E402

BODY = {"target_host": "web-1", "audience": "escapes", "grant_type": "once", "command": ["true"]}


def signed_size(http: httpx.Client) -> int:
    r = http.get("/api/audit/checkpoint")
    return int(r.text.split("\n")[1]) if r.status_code == 200 else 0


def main(samples: int, background: int) -> None:
    conftest = _conftest()
    with tempfile.TemporaryDirectory(prefix="grantd-lag-") as tmp:
        srv = conftest.make_server(
            Path(tmp) / "srv",
            extra="\n[limits]\ngrants_per_agent = 0\npending_per_agent = 0\npending_per_owner = 0\n",
        ).start()
        stop = threading.Event()
        try:
            agent = conftest.signed_in(srv, Path(tmp) / "keys")
            headers = {"Authorization": f"Bearer {agent.token}"}

            def load() -> None:
                with httpx.Client(base_url=srv.url, headers=headers, timeout=10) as http:
                    while not stop.is_set():
                        http.post("/api/grants", json=BODY)

            threads = [threading.Thread(target=load, daemon=True) for _ in range(background)]
            for t in threads:
                t.start()
            lags: list[float] = []
            with httpx.Client(base_url=srv.url, headers=headers, timeout=10) as http:
                for _ in range(samples):
                    r = http.post("/api/grants", json=BODY)
                    assert r.status_code == 201, r.text
                    written = time.monotonic()
                    # this grant is in the log once the signed size reaches the number of events
                    # stored now (each of these events is one leaf)
                    size_now = _events_now(srv)
                    while signed_size(http) < size_now:
                        time.sleep(0.01)
                    lags.append(time.monotonic() - written)
            stop.set()
            for t in threads:
                t.join(5)
            lags.sort()
            print(
                f"{samples} grants, {background} background clients: checkpoint lag median "
                f"{statistics.median(lags) * 1000:.0f} ms, p90 {lags[int(0.9 * len(lags)) - 1] * 1000:.0f} ms, "
                f"max {lags[-1] * 1000:.0f} ms"
            )
        finally:
            stop.set()
            srv.stop()


def _events_now(srv: object) -> int:
    """Leaves the log will hold once everything written so far is integrated: one per event."""
    from support import postgres as pg  # tests/support: the server's database, whichever backend

    directory = srv.directory  # type: ignore[attr-defined]
    grant_events = pg.server_sql(directory, "SELECT count(*) FROM grant_events")[0][0]
    audit_events = pg.server_sql(directory, "SELECT count(*) FROM audit_events")[0][0]
    return int(grant_events) + int(audit_events)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--background", type=int, default=0)
    args = parser.parse_args()
    main(args.samples, args.background)

"""Many open event streams (issue 27, item 5), at a fifth of the issue's 1,000: bench/streams.py opens
200 ``GET /api/grants/events`` streams across a real server's two workers from two load processes,
creates grants one at a time, and every stream must get every ``grant.created`` event, the slowest
1 % within 500 ms of the create request, for less than 50 MiB more server memory."""

from __future__ import annotations

import sys

from conftest import ROOT

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.streams import parse_args, run  # noqa: E402


def test_200_streams_on_two_workers_each_get_every_event_quickly() -> None:
    result = run(parse_args(["--streams", "200", "--grants", "6", "--gap", "0.4", "--settle", "1.5"]))
    assert result["opened"] == 200, result
    assert result["missing"] == 0, result
    assert result["deliveries"] == 200 * 6, result
    assert result["p99_ms"] < 500, result
    assert result["rss_added_mib"] < 50, result

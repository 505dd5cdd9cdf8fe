"""Ports for the servers the tests start (grantd, PostgreSQL, the notification doubles).

A port is chosen here and bound later by another process, so something else may take it in
between. Asking the kernel for port 0 gives one from its *ephemeral* range — the range every
outgoing connection of the suite (thousands of httpx clients) draws its local port from — so such
a port could be taken by a client connection before the server binds it, and the server then fails
to start ("address already in use": a flaky fixture error). These ports come from below that range
instead, and each pytest-xdist worker draws from its own slice, so two workers never pick the same
one; a port is never handed out twice by one process.
"""

from __future__ import annotations

import itertools
import os
import random
import socket

LOWEST = 10_000
# Ports browsers refuse to connect to (Chromium's restricted list, net/base/port_util.cc; Firefox's
# is a superset below 10000): a browser test on one fails with net::ERR_UNSAFE_PORT. Of that list
# only 10080 (amanda) lies in the range drawn from here.
BROWSER_UNSAFE = frozenset({10080})


def _ephemeral_start() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
            return int(ranges.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def _slice() -> range:
    top = max(_ephemeral_start(), LOWEST + 2_000)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    width = (top - LOWEST) // max(count, 1)
    start = LOWEST + (index % max(count, 1)) * width
    return range(start, start + width)


_handed_out: set[int] = set()
_candidates = None


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now, outside the ephemeral range."""
    global _candidates
    if _candidates is None:
        ports = list(_slice())
        random.Random(os.getpid()).shuffle(ports)  # processes of one worker slice start apart
        _candidates = itertools.cycle(ports)
    for _ in range(5_000):
        port = next(_candidates)
        if port in _handed_out or port in BROWSER_UNSAFE:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError("no free port below the ephemeral range")

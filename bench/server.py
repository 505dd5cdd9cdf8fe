"""The server under test: a real `grantd serve` process (tests/conftest.py's helpers) and the
memory of its whole process tree."""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"


def _conftest() -> Any:
    """tests/conftest.py starts servers exactly as the test-suite does (free port, TOML config with
    SQLite, management token file); the bench reuses it rather than keeping a second copy."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    return importlib.import_module("conftest")


def _disable_access_log(config_path: Path) -> None:
    """One access line per request would make logging a large share of what we measure.

    make_server's `extra=` is appended after the [storage] table, and the generated config already
    has a [log] table (TOML forbids declaring it twice), so the key is written into that table."""
    text = config_path.read_text()
    if "[log]\n" not in text:
        raise RuntimeError(f"{config_path}: no [log] table to put 'access = false' in")
    config_path.write_text(text.replace("[log]\n", "[log]\naccess = false\n", 1))


# The load comes from one address and 64 agents at thousands of requests/s: far beyond the abuse
# limits (D12), which would answer most of it 429. The bench measures the work, so they are off.
LIMITS_OFF = "[limits]\n" + "".join(f"{key} = 0\n" for key in (
    "authenticate_per_agent", "authenticate_per_address", "enroll_per_address", "failed_bearer_per_address",
    "grants_per_agent", "pending_per_agent", "verify_per_address", "streams_per_principal", "streams_per_process"))


def start_server(directory: Path, workers: int) -> Any:
    """A started `grantd serve` with `workers` processes, its SQLite file and token in `directory`."""
    server = _conftest().make_server(directory, workers=workers, extra=LIMITS_OFF)
    _disable_access_log(server.config_path)
    return server.start(timeout=60)


def restart_profiled(server: Any, profile_to: Path) -> Any:
    """Stop the server and start it again on the same directory (same port, database, keys and
    tokens) under cProfile, so the profile holds the measured load and not the set-up before it.
    Only with workers = 1: then Sanic serves in the very process cProfile watches."""
    server.stop()
    command = [sys.executable, "-m", "cProfile", "-o", str(profile_to), "-m", "grantd"]
    return dataclasses.replace(server, command=command, proc=None).start(timeout=60)


def management_token(server: Any) -> str:
    return (Path(server.directory) / "management-token").read_text().strip()


# -- memory ------------------------------------------------------------------------------------------


def _children_by_parent() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                # the command name (field 2) may hold spaces and parentheses: split after the last ")"
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def process_tree(root: int) -> list[int]:
    tree = _children_by_parent()
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(tree.get(pid, []))
    return found


def rss_kib(pid: int) -> int:
    """Resident memory of one process; 0 once it has ended (it may end between listing and reading)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            lines = status.readlines()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in lines if line.startswith("VmRSS:")), 0)


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time the processes have used so far."""
    ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
    return ticks / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU time all cores have spent not idle since boot (the first line of /proc/stat)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    # guest time is already counted in user time, so only the first eight fields are summed
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class MemorySampler:
    """Samples the summed RSS of a process tree every `interval` seconds in a thread and keeps the peak.

    The tree is re-listed once a second only: scanning all of /proc ten times a second would take
    CPU away from the load generator on a small machine."""

    def __init__(self, root_pid: int, interval: float = 0.1, relist_every: int = 10):
        self.root_pid = root_pid
        self.interval = interval
        self.relist_every = relist_every
        self.peak_kib = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)

    def _run(self) -> None:
        pids: list[int] = []
        while not self._stop.is_set():
            if self.samples % self.relist_every == 0:
                pids = process_tree(self.root_pid)
            self.peak_kib = max(self.peak_kib, sum(rss_kib(pid) for pid in pids))
            self.samples += 1
            self._stop.wait(self.interval)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak_mib(self) -> float:
        return self.peak_kib / 1024

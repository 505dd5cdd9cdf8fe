"""What the start and stop tests of real `grantd serve` processes share (tests/system/test_startup_failures.py,
test_stop_signals.py, test_server_processes.py): the process in a session of its own, and looks at
/proc for what it left behind (no procps or iproute2 needed)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

GRACE = 3  # tests/conftest.py writes graceful_shutdown_timeout = 3
ALLOWED = GRACE + 2.5  # the grace, the watchdog's second, and Sanic's own clean-up


@contextlib.contextmanager
def serve_process(srv: Any) -> Iterator[subprocess.Popen[bytes]]:
    """`grantd serve` of ``srv`` (tests/conftest.py ``Server``) as its own process group, its output
    in ``srv.log_path`` (started afresh). Whatever of the group is still running afterwards is
    killed, after the test has looked at it."""
    with open(srv.log_path, "wb") as log:
        proc = subprocess.Popen(
            [*srv.command, "serve", "--config", str(srv.config_path)],
            cwd=srv.directory,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=srv.env,
            start_new_session=True,
        )
        try:
            yield proc
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # an orphan of the group


def run_serve(
    srv: Any, *, wrap: list[str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`grantd serve` of ``srv`` to its end (a start that fails), its output captured."""
    return subprocess.run(
        [*(wrap or []), *srv.command, "serve", "--config", str(srv.config_path)],
        cwd=srv.directory,
        env=srv.env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def wait_for(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(what)


def wait_for_log(srv: Any, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while text not in srv.log():
        assert time.monotonic() < deadline, srv.log()
        time.sleep(0.01)


def wait_ready(srv: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{srv.url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.02)
    raise AssertionError(srv.log())


def group_gone(pgid: int, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def listening_sockets(port: int) -> int:
    """IPv4 sockets in LISTEN on ``port``, from /proc/net/tcp."""
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for row in rows if row.split()[1].endswith(f":{port:04X}") and row.split()[3] == "0A")


def children(pid: int, *, sequencer: bool = False) -> list[int]:
    """Live child server processes of ``pid``; with ``sequencer``, the decision log's sequencer
    process instead (grantd.web.sequencer)."""
    found: list[int] = []
    try:
        parent_command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return found
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue  # ended meanwhile
        if command == parent_command:
            continue  # forked, not yet exec'd: what it becomes is not known yet
        if fields[1] == str(pid) and fields[0] != "Z" and (b"grantd.web.sequencer" in command) == sequencer:
            found.append(int(stat.parent.name))
    return found

"""A started `grantd serve` stops within its grace on SIGTERM or SIGINT whenever it comes (issue 12,
issue 20 item 2, D18), with one process or several, and a second signal to it does not wait.

Real `grantd serve` processes (tests/conftest.py `make_server`). The races around "ready" are
made certain by plugins (tests/plugins) that signal the server from inside the moment that once
lost a stop: Sanic setting the signals to ignored, the after-start listeners, the loop between
runs. Several processes and the log's sequencer: test_server_processes.py."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.serving import (
    ALLOWED,
    GRACE,
    group_gone,
    listening_sockets,
    serve_process,
    wait_for,
    wait_for_log,
    wait_ready,
)

from conftest import Server, make_server


def _open_stream(srv: Server, opened: threading.Event, ended: threading.Event) -> None:
    try:
        with httpx.stream(
            "GET",
            f"{srv.url}/api/grants/events",
            headers={"Authorization": f"Bearer {srv.token}"},
            timeout=httpx.Timeout(30, read=30),
        ) as response:
            assert response.status_code == 200
            opened.set()
            for _ in response.iter_raw():
                pass
    except httpx.HTTPError:
        pass
    finally:
        ended.set()


@pytest.mark.parametrize("workers", [2, 1])
@pytest.mark.parametrize("moment", ["0.05s", "0.3s", "manager-up", "manager-up+0.3s", "ready", "stream"])
def test_sigterm_at_any_moment_ends_in_time(tmp_path: Path, moment: str, workers: int) -> None:
    """ "manager-up": the moment the first process starts the others; "ready": the moment a server
    answers, when SIGTERM used to be lost in Sanic's after-start phase (grantd.web.stopping.Stopper)."""
    srv = make_server(tmp_path / "srv", workers=workers)
    stream_ended = threading.Event()
    with serve_process(srv) as proc:
        if moment.endswith("s") and moment[0].isdigit():
            time.sleep(float(moment[:-1]))
        elif moment.startswith("manager-up"):
            wait_for_log(srv, "listening on")  # the worker manager starts right after this line
            time.sleep(0.3 if moment.endswith("0.3s") else 0.0)
        else:
            wait_ready(srv)
            if moment == "stream":
                opened = threading.Event()
                threading.Thread(target=_open_stream, args=(srv, opened, stream_ended), daemon=True).start()
                assert opened.wait(20), srv.log()
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(ALLOWED + 10)
        except subprocess.TimeoutExpired:
            pytest.fail(f"grantd did not stop within {ALLOWED + 10} s of SIGTERM at {moment}:\n{srv.log()}")
        took = time.monotonic() - sent
        assert took < ALLOWED, f"stopping took {took:.1f} s (SIGTERM at {moment}):\n{srv.log()}"
        assert code in (0, -signal.SIGTERM), (
            srv.log()
        )  # -15: the signal came before grantd set up its handlers
        assert group_gone(proc.pid), f"worker processes left behind:\n{srv.log()}"
        assert "Traceback" not in srv.log(), srv.log()
        if moment == "stream":
            assert stream_ended.wait(5), "the event stream did not end"


# -- issue 20 item 2: the race around "ready", repeated ---------------------------------------------------
RACE_RUNS = 30


def _serve_once(srv: Server, rng: Any, ready_after: float) -> tuple[str, float, int | None, str, str]:
    """Start `grantd serve`, send SIGTERM at a random moment near the one it becomes ready, and
    return (moment, seconds it took to end, exit code or None if it kept running, what it left
    behind, log). Whatever is left is killed afterwards, not before it is counted."""
    started = time.monotonic()
    with serve_process(srv) as proc:
        kind = rng.choice(["from-start", "listening", "ready"])
        delay = rng.uniform(0.0, ready_after * 1.2 if kind == "from-start" else 0.4)
        if kind == "listening":  # the first process is about to serve (and start the others)
            wait_for_log(srv, "listening on")
        elif kind == "ready":  # a server answers: where the signal used to be used up
            wait_ready(srv)
        time.sleep(max(0.0, delay - (time.monotonic() - started) if kind == "from-start" else delay))
        moment = f"{kind}+{delay:.3f}s"
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            code: int | None = proc.wait(ALLOWED + 10)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - sent
        left = []
        if not group_gone(proc.pid, timeout=2):
            left.append("processes of its group still running")
        if listening_sockets(srv.port):
            left.append(f"a socket still listening on {srv.port}")
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(f"{srv.url}/readyz", timeout=1)
            left.append("a server still answering /readyz")
        return moment, took, code, ", ".join(left), srv.log()


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_near_ready_is_never_lost_in_many_tries(tmp_path: Path, workers: int) -> None:
    """Issue 20 item 2 (D18): 3 of 37 tries once left a server answering /readyz after SIGTERM. Here
    RACE_RUNS starts, each signalled at a random moment just before or after it becomes ready (a
    fixed seed per worker count, printed with any failure): every one ends within the grace, with
    no process of its group and nothing listening left behind."""
    import random

    rng = random.Random(20_02 + workers)
    srv = make_server(tmp_path / "srv", workers=workers)
    srv.start()  # the database exists and is migrated; how long a start takes here
    srv.stop()
    started = time.monotonic()
    srv.start()
    ready_after = time.monotonic() - started
    srv.stop()
    failures = []
    for run in range(RACE_RUNS):
        moment, took, code, left, log_text = _serve_once(srv, rng, ready_after)
        if (
            code is None
            or took >= ALLOWED
            or code not in (0, -signal.SIGTERM)
            or left
            or "Traceback" in log_text
        ):
            failures.append(
                f"run {run} (SIGTERM at {moment}): exit {code} after {took:.1f} s; "
                f"left behind: {left or 'nothing'}\n{log_text}"
            )
    assert not failures, (
        f"{len(failures)} of {RACE_RUNS} runs with {workers} worker(s) did not stop:\n" + "\n".join(failures)
    )


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_while_sanic_sets_the_stop_signals_to_ignored_is_not_lost(
    tmp_path: Path, workers: int
) -> None:
    """Stop 15: Sanic's start-up sets SIGTERM and SIGINT to SIG_IGN before it would install its own
    handlers; a SIGTERM in between was discarded by the kernel and the server served on (1 start in
    about 200 in CI). A plugin sends one from exactly there: the server stops, gracefully."""
    srv = make_server(
        tmp_path / "srv", workers=workers, extra='[plugins]\nmodules = ["signal_while_sanic_ignores"]\n'
    )
    with serve_process(srv) as proc:
        _stops_gracefully_by_itself(srv, proc, "SIGTERM sent while Sanic ignored it was lost")
    assert "test plugin: SIGTERM sent where Sanic ignores it" in srv.log(), srv.log()
    assert "stop signal received while starting: stopping" in srv.log(), srv.log()


def _stops_gracefully_by_itself(srv: Server, proc: subprocess.Popen[bytes], lost: str) -> None:
    """A plugin signalled the server at a chosen moment of its start: it stops, gracefully (exit 0),
    and nothing of it is left."""
    try:
        code = proc.wait(60 + ALLOWED)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{lost}:\n{srv.log()}")
    assert code == 0, srv.log()
    assert group_gone(proc.pid), f"processes left behind:\n{srv.log()}"
    assert not listening_sockets(srv.port), srv.log()


def _ends_at_once(srv: Server, proc: subprocess.Popen[bytes]) -> None:
    """A second SIGTERM: the process exits well within the grace (128 + 15), nothing of it is left."""
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(GRACE)
    except subprocess.TimeoutExpired:
        pytest.fail(f"a second SIGTERM did not end the server within {GRACE} s:\n{srv.log()}")
    assert time.monotonic() - sent < GRACE / 2, srv.log()
    assert code == 128 + signal.SIGTERM, srv.log()
    assert "second stop signal: exiting now" in srv.log(), srv.log()
    assert group_gone(proc.pid), f"processes left behind:\n{srv.log()}"
    assert not listening_sockets(srv.port), srv.log()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_second_sigterm_while_starting_ends_the_process_at_once(tmp_path: Path, workers: int) -> None:
    """The first stop signal while the server starts is held until it runs (a stop, not a half-made
    start); the start may be long (a migration, a slow plugin), and a second one does not wait for it."""
    srv = make_server(tmp_path / "srv", workers=workers, extra='[plugins]\nmodules = ["slow_start"]\n')
    with serve_process(srv) as proc:
        wait_for(lambda: list(srv.directory.glob("slow-start-*")), 60, "the start never reached the plugin")
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert proc.poll() is None, f"the first SIGTERM was not held:\n{srv.log()}"
        _ends_at_once(srv, proc)


def _a_slow_request_in_flight(srv: Server, workers: int) -> None:
    """The server (with the slow_route plugin) serving, and a request that takes a minute under way."""
    wait_ready(srv)
    if workers > 1:
        wait_for_log(srv, "all 2 server processes serving")
    threading.Thread(target=_ask_slowly, args=(srv,), daemon=True).start()
    wait_for(lambda: list(srv.directory.glob("slow-route-*")), 10, "the slow request never arrived")


def _ask_slowly(srv: Server) -> None:
    with contextlib.suppress(httpx.HTTPError):  # the server is stopped under it
        httpx.get(f"{srv.url}/slow-route/sleep", timeout=30)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_second_sigterm_while_requests_drain_ends_the_server_at_once(tmp_path: Path, workers: int) -> None:
    """The first SIGTERM gives in-flight requests the grace; a second one does not wait for them, in
    any of the server's processes."""
    srv = make_server(tmp_path / "srv", workers=workers, extra='[plugins]\nmodules = ["slow_route"]\n')
    with serve_process(srv) as proc:
        _a_slow_request_in_flight(srv, workers)
        proc.send_signal(signal.SIGTERM)
        wait_for_log(srv, "received SIGTERM: stopping")
        assert proc.poll() is None, f"nothing waited for the in-flight request:\n{srv.log()}"
        _ends_at_once(srv, proc)


def test_one_sigterm_to_the_whole_group_is_one_graceful_stop(tmp_path: Path) -> None:
    """systemd's stop (``KillMode=control-group``) and a terminal's Ctrl-C signal every process of the
    server, and the first process then sends the others its own SIGTERM: for them that second signal
    is expected, not a second stop request. Every process stops gracefully (exit 0); none "exits now"."""
    srv = make_server(tmp_path / "srv", workers=2)
    with serve_process(srv) as proc:
        wait_ready(srv)
        wait_for_log(srv, "all 2 server processes serving")
        os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(ALLOWED + 10)
        assert code == 0, srv.log()
        assert "second stop signal" not in srv.log(), srv.log()
        assert "exited with" not in srv.log(), srv.log()  # no process of the group ended otherwise
        assert group_gone(proc.pid), f"processes left behind:\n{srv.log()}"


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_while_after_start_listeners_run_is_not_lost(tmp_path: Path, workers: int) -> None:
    """The race of issue 20 item 2 made certain: a plugin's after-start listener sleeps, and SIGTERM
    reaches the first process while that listener of a process (the first with one worker, the
    other one with two, which the first then stops) still runs. Five runs at random moments in it."""
    import random

    rng = random.Random(2020 + workers)
    srv = make_server(tmp_path / "srv", workers=workers, extra='[plugins]\nmodules = ["slow_after_start"]\n')
    for run in range(5):
        for marker in srv.directory.glob("after-start-*"):
            marker.unlink()
        with serve_process(srv) as proc:

            def in_after_start() -> bool:
                pids = {int(m.name.rsplit("-", 1)[1]) for m in srv.directory.glob("after-start-*")}
                return any(pid != proc.pid for pid in pids) if workers > 1 else proc.pid in pids

            wait_for(in_after_start, 60, srv.log())
            time.sleep(rng.uniform(0.0, 0.5))  # the listener sleeps 1 s
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(ALLOWED + 5)
            except subprocess.TimeoutExpired:
                pytest.fail(f"run {run}: SIGTERM during the after-start listeners was lost:\n{srv.log()}")
            assert time.monotonic() - sent < ALLOWED, srv.log()
            assert code == 0, srv.log()
            assert group_gone(proc.pid), f"run {run}: processes left behind:\n{srv.log()}"
            assert not listening_sockets(srv.port), srv.log()


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_while_the_loop_is_between_runs_is_not_lost(tmp_path: Path, workers: int) -> None:
    """The race CI found after issue 20: SIGTERM that reaches the first process after the
    after-start listeners and before ``run_forever`` (the loop is not running; uvloop parked it and
    the server served on). A plugin sends it from inside Sanic's "Worker ready" log call, every time."""
    srv = make_server(
        tmp_path / "srv", workers=workers, extra='[plugins]\nmodules = ["signal_at_worker_ready"]\n'
    )
    with serve_process(srv) as proc:
        _stops_gracefully_by_itself(srv, proc, "SIGTERM sent while the loop was between runs was lost")
    assert "received SIGTERM: stopping" in srv.log(), srv.log()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_request_in_flight_gets_the_grace_and_the_server_ends_within_it(
    tmp_path: Path, workers: int
) -> None:
    """D18: serve ends within its grace period. In-flight requests get the grace less half a second
    (grantd.web.stopping.drain_time), the rest is for ending the process; a request that outlasts it
    is cut off. The bound here has half a second of slack for a loaded machine: ~2.8 s is typical,
    and the old budget (the whole grace to requests, a kill one second after) took 3.3-4 s."""
    srv = make_server(tmp_path / "srv", workers=workers, extra='[plugins]\nmodules = ["slow_route"]\n')
    with serve_process(srv) as proc:
        _a_slow_request_in_flight(srv, workers)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(GRACE + 10)
        took = time.monotonic() - sent
    assert code == 0, srv.log()
    assert GRACE - 0.5 - 0.2 < took < GRACE + 0.5, f"stopping took {took:.2f} s:\n{srv.log()}"
    assert group_gone(proc.pid), f"processes left behind:\n{srv.log()}"

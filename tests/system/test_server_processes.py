"""Several server processes on one socket (grantd.web.processes, issue 14) and the decision log's
sequencer beside them (issue 23): the first process looks after the others, replaces what crashes,
stops with them, and hands back the log's lease that a killed process held. Real `grantd serve`
processes (tests/conftest.py `make_server`); /proc shows what runs."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path

import httpx
from support import postgres as pg
from support.serving import GRACE, children, listening_sockets, run_serve, wait_for, wait_for_log

from conftest import Server, make_server

HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOzjWPjkUeKLmFMzgC9mwF4dJuWZ8uMq2m8S3QVl0hX1"


def a_new_leaf_is_signed_soon(srv: Server) -> None:
    """A new event (a host enrolled) reaches a signed checkpoint within 10 s."""
    with httpx.Client(base_url=srv.url, timeout=5) as http:
        before = int(http.get("/api/audit/checkpoint").text.split("\n")[1])
        r = http.post(
            "/api/hosts",
            json={"host": "h1", "publicKey": HOST_KEY},
            headers={"Authorization": f"Bearer {srv.token}"},
        )
        assert r.status_code == 201, r.text
        wait_for(lambda: int(http.get("/api/audit/checkpoint").text.split("\n")[1]) > before, 10, srv.log())


def test_a_killed_server_process_hands_back_the_logs_lease_at_once(tmp_path: Path) -> None:
    """The default sequencer runs inline, in every server process; the one holding the lease may be
    killed (kill -9, the OOM killer) and cannot give it up. The first process reaps it and hands the
    lease back, so a new event is in a signed checkpoint at once, not when the lease runs out. The
    lease is pinned on the other process for a minute here, so that waiting it out cannot pass."""
    srv = make_server(tmp_path / "srv", workers=2)
    srv.start()
    try:
        assert srv.proc is not None
        wait_for_log(srv, "all 2 server processes serving")
        [peer] = children(srv.proc.pid)
        wait_for(lambda: httpx.get(f"{srv.url}/api/audit/checkpoint").status_code == 200, 10, srv.log())
        pg.server_sql(
            srv.directory,
            "UPDATE tlog_state SET holder = ?, lease_until = ?",
            (f"{socket.gethostname()}:{peer}:0badcafe", int(time.time() * 1000) + 60_000),
        )
        os.kill(peer, signal.SIGKILL)
        wait_for(lambda: "starting another" in srv.log(), 10, srv.log())
        a_new_leaf_is_signed_soon(srv)  # the log integrates
    finally:
        code = srv.stop()
    assert code == 0, srv.log()


def test_the_log_is_integrated_by_a_process_of_its_own_replaced_when_it_dies(tmp_path: Path) -> None:
    """``[audit] sequencer = "process"`` (issue 23): the server processes do none of the log's work;
    one more process does, is replaced if it dies, and stops with the server."""
    srv = make_server(tmp_path / "srv", workers=2, extra='[audit]\nsequencer = "process"\n').start()
    try:
        assert srv.proc is not None
        [sequencer] = wait_for(lambda: children(srv.proc.pid, sequencer=True), 30, srv.log())
        wait_for(lambda: httpx.get(f"{srv.url}/api/audit/checkpoint").status_code == 200, 10, srv.log())
        # the lease holder ("host:pid:nonce") is that process, not one that serves requests
        [[holder]] = pg.server_sql(srv.directory, "SELECT holder FROM tlog_state")
        assert int(holder.split(":")[1]) == sequencer, (holder, sequencer)
        os.kill(sequencer, signal.SIGKILL)
        wait_for(
            lambda: "sequencer process (pid" in srv.log() and "starting another" in srv.log(), 10, srv.log()
        )
        [replacement] = wait_for(lambda: children(srv.proc.pid, sequencer=True), 30, srv.log())
        assert replacement != sequencer
        # the dead one's lease (up to 5 s left) is handed back at once, not waited out
        killed = time.monotonic()
        wait_for(
            lambda: (
                (pg.server_sql(srv.directory, "SELECT holder FROM tlog_state")[0][0] or "").split(":")[1:2]
                != [str(sequencer)]
            ),
            10,
            srv.log(),
        )
        assert time.monotonic() - killed < 2.5, "the lease was waited out, not handed back"
        a_new_leaf_is_signed_soon(srv)  # the log integrates
    finally:
        code = srv.stop()
    assert code == 0, srv.log()
    assert not children(srv.proc.pid, sequencer=True)


def _all_answered(srv: Server, connections: int = 40) -> bool:
    """Each of ``connections`` fresh connections is answered: whichever process accepts it serves."""
    for _ in range(connections):
        with httpx.Client(timeout=5) as http:
            if http.get(f"{srv.url}/readyz").status_code != 200:
                return False
    return True


def test_two_workers_are_two_processes_on_one_socket(tmp_path: Path) -> None:
    srv = make_server(tmp_path / "srv", workers=2).start()
    try:
        assert srv.proc is not None
        peers = wait_for(lambda: children(srv.proc.pid), 30, "no second server process")
        assert len(peers) == 1, peers  # no manager, no multiprocessing helpers: the first process serves too
        wait_for(lambda: "all 2 server processes serving" in srv.log(), 30, srv.log())
        assert _all_answered(srv)
        assert listening_sockets(srv.port) == 1  # one socket, shared (not SO_REUSEPORT copies)
    finally:
        srv.stop()
    assert "Traceback" not in srv.log(), srv.log()


def test_a_crashed_server_process_is_replaced(tmp_path: Path) -> None:
    srv = make_server(tmp_path / "srv", workers=2).start()
    try:
        assert srv.proc is not None
        wait_for(lambda: "all 2 server processes serving" in srv.log(), 30, srv.log())
        [first] = children(srv.proc.pid)
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: "exited with signal SIGKILL; starting another" in srv.log(), 10, srv.log())
        replacement = wait_for(lambda: [p for p in children(srv.proc.pid) if p != first], 30, srv.log())
        assert len(replacement) == 1
        wait_for(lambda: srv.log().count("all 2 server processes serving") == 2, 30, srv.log())
        assert _all_answered(srv)
        assert srv.proc.poll() is None
    finally:
        code = srv.stop()
    assert code == 0, srv.log()


def test_the_others_stop_when_the_first_process_is_killed(tmp_path: Path) -> None:
    """SIGKILL to the first process alone (not its group): no other process keeps the port."""
    srv = make_server(tmp_path / "srv", workers=3).start()
    assert srv.proc is not None
    try:
        wait_for(lambda: "all 3 server processes serving" in srv.log(), 30, srv.log())
        peers = children(srv.proc.pid)
        assert len(peers) == 2
        srv.proc.kill()
        srv.proc.wait(5)

        def gone() -> bool:
            for pid in peers:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    continue
                status = Path(f"/proc/{pid}/stat")
                if status.exists() and status.read_text().split(")")[-1].split()[0] != "Z":
                    return False
            return True

        wait_for(gone, 2 + GRACE + 2, f"server processes outlived the first one:\n{srv.log()}")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", srv.port))  # the port is free again
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(srv.proc.pid, signal.SIGKILL)


def test_a_server_process_that_cannot_start_stops_the_server_with_one_line(tmp_path: Path) -> None:
    srv = make_server(
        tmp_path / "srv", workers=2, extra='[plugins]\nmodules = ["refuse_in_peer_processes"]\n'
    )
    result = run_serve(srv, timeout=90)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "server process 1 (pid " in output and "while starting" in output, output
    assert "cannot start: server process 1" in output, output
    assert "server process cannot start: configuration invalid" in output, output  # the process's own line
    assert "Traceback" not in output, output
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", srv.port))  # nothing left listening

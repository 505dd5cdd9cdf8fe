"""Issue 12: a start that cannot work fails with one clear line (text or JSON, as the logs are) and
a non-zero exit before any banner; a stop never hangs, whenever SIGTERM arrives.

Real `grantd serve` processes (tests/conftest.py `make_server`); the stop tests use two workers,
where Sanic's worker manager used to hang for 20-30 s (or for good) when SIGTERM came while a
worker was still starting. Since issue 14 two workers are two server processes sharing one socket
(grantd.web.processes): the tests at the end check how the first one looks after the other.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import postgres as pg

from grantd.web.app import describe_startup_error

from conftest import Server, make_server

BANNERS = ("grantd: serving", "listening on")


def run_serve(
    srv: Server, *, wrap: list[str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*(wrap or []), *srv.command, "serve", "--config", str(srv.config_path)],
        cwd=srv.directory,
        env=srv.env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_one_line_failure(
    result: subprocess.CompletedProcess[str], *, contains: str, json_format: bool = False
) -> str:
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Traceback" not in output, output
    assert not any(b in output for b in BANNERS), output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, output
    line = lines[0]
    if json_format:
        entry = json.loads(line)
        assert entry["level"] == "error" and entry["logger"] == "grantd", entry
        assert entry["message"].startswith("cannot start: "), entry
        assert contains in entry["message"], entry
    else:
        assert line.startswith("grantd: cannot start: ") and contains in line, line
    return line


# -- start-up failures ---------------------------------------------------------------------------------
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_port_in_use_is_one_line_before_any_banner(tmp_path: Path, log_format: str) -> None:
    srv = make_server(tmp_path / "srv", log_format=log_format)
    with socket.create_server(("127.0.0.1", srv.port)):
        result = run_serve(srv)
    assert_one_line_failure(
        result,
        contains=f"cannot listen on 127.0.0.1:{srv.port}: the address is already in use",
        json_format=log_format == "json",
    )


def _without_root_bypass() -> list[str]:
    """Run as this user without the capabilities that let root ignore file modes (so modes bite)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise AssertionError(
            "as root, an unwritable directory needs setpriv (util-linux, installed by scripts/bootstrap)"
        )
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--"]


@pg.sqlite_only("SQLite's database directory without write permission (PostgreSQL has no file here)")
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_read_only_database_directory_is_one_line(tmp_path: Path, log_format: str) -> None:
    srv = make_server(tmp_path / "srv", log_format=log_format)
    data = srv.directory / "data"
    data.mkdir(mode=0o500)
    srv.config_path.write_text(
        srv.config_path.read_text().replace('path = "grantd.db"', 'path = "data/grantd.db"')
    )
    try:
        result = run_serve(srv, wrap=_without_root_bypass())
    finally:
        data.chmod(0o700)
    line = assert_one_line_failure(
        result, contains="cannot open the SQLite database", json_format=log_format == "json"
    )
    assert f"the directory {data} must be writable" in line


@pg.sqlite_only("SQLite's database directory without read permission (PostgreSQL has no file here)")
def test_an_unreadable_database_directory_is_one_line(tmp_path: Path) -> None:
    srv = make_server(tmp_path / "srv")
    data = srv.directory / "data"
    data.mkdir(mode=0o000)
    srv.config_path.write_text(
        srv.config_path.read_text().replace('path = "grantd.db"', 'path = "data/grantd.db"')
    )
    try:
        result = run_serve(srv, wrap=_without_root_bypass())
    finally:
        data.chmod(0o700)
    line = assert_one_line_failure(result, contains="cannot open the SQLite database")
    assert "Permission denied" in line and str(data) in line


@pg.sqlite_only(
    "a read-only SQLite file and its -wal/-shm companions (PostgreSQL has no file here; an "
    "unreachable network database: test_a_storage_plugin_that_cannot_connect_is_one_line)"
)
def test_a_database_file_that_is_not_writable_is_one_line(tmp_path: Path) -> None:
    srv = make_server(tmp_path / "srv").start()
    srv.stop()
    db = srv.directory / "grantd.db"
    for companion in (db.with_name("grantd.db-wal"), db.with_name("grantd.db-shm")):
        companion.unlink(missing_ok=True)
    db.chmod(0o400)
    try:
        result = run_serve(srv, wrap=_without_root_bypass())
    finally:
        db.chmod(0o600)
    line = assert_one_line_failure(result, contains="cannot open the SQLite database")
    assert str(db) in line


def test_a_bad_config_in_json_mode_is_one_json_line(tmp_path: Path) -> None:
    srv = make_server(tmp_path / "srv", log_format="json")
    srv.config_path.write_text(srv.config_path.read_text().replace("[server]\n", "[server]\nhots = 'x'\n"))
    result = run_serve(srv)
    line = assert_one_line_failure(result, contains="configuration invalid", json_format=True)
    entry = json.loads(line)
    assert entry["problems"] == ['server.hots: unknown key (did you mean "server.host"?)']


UNREACHABLE_PLUGIN = """
from grantd.hookspecs import hookimpl

@hookimpl
def storage_backends():
    def open_store(config):
        raise ConnectionRefusedError(
            "connection to server at \\"10.9.9.9\\", port 5432 failed: Connection refused\\n\\tIs the server running?")
    return {"unreachable": open_store}
"""


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_storage_plugin_that_cannot_connect_is_one_line(tmp_path: Path, log_format: str) -> None:
    """The hook for network databases: whatever open_services raises prints as one line."""
    srv = make_server(
        tmp_path / "srv",
        log_format=log_format,
        storage='plugin = "unreachable"\npath = "grantd.db"',
        extra='[plugins]\nmodules = ["unreachable_store"]\npaths = ["site-plugins"]\n',
    )
    (srv.directory / "site-plugins").mkdir()
    (srv.directory / "site-plugins" / "unreachable_store.py").write_text(UNREACHABLE_PLUGIN)
    result = run_serve(srv)
    line = assert_one_line_failure(
        result,
        contains="port 5432 failed: Connection refused Is the server running?",
        json_format=log_format == "json",
    )
    assert "10.9.9.9" in line


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_an_unreachable_postgresql_is_one_line(tmp_path: Path, log_format: str) -> None:
    """The real PostgreSQL backend against a port nobody listens on: one line, no pool noise."""
    pytest.importorskip("psycopg")
    with socket.socket() as probe:  # a free port, closed again: connecting to it is refused
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    srv = make_server(
        tmp_path / "srv", log_format=log_format, storage='plugin = "postgres"\ndsn = "file:dsn"'
    )
    dsn = srv.directory / "dsn"
    dsn.write_text(f"postgresql://grantd@127.0.0.1:{dead}/grantd?connect_timeout=3\n")
    dsn.chmod(0o600)
    result = run_serve(srv)
    assert_one_line_failure(result, contains="cannot connect to PostgreSQL", json_format=log_format == "json")


def test_describe_startup_error_is_always_one_line() -> None:
    class Weird(Exception):
        pass

    assert describe_startup_error(Weird("first\n  second\n")) == "Weird: first second"
    assert describe_startup_error(Weird()) == "Weird"
    assert describe_startup_error(PermissionError(13, "Permission denied", "/var/lib/grantd")).startswith(
        "Permission denied: /var/lib/grantd"
    )


# -- stopping ------------------------------------------------------------------------------------------
GRACE = 3  # tests/conftest.py writes graceful_shutdown_timeout = 3
ALLOWED = GRACE + 2.5  # the grace, the watchdog's second, and Sanic's own clean-up


def _group_gone(pgid: int, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _wait_for_log(srv: Server, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while text not in srv.log():
        assert time.monotonic() < deadline, srv.log()
        time.sleep(0.01)


def _wait_ready(srv: Server, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{srv.url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.02)
    raise AssertionError(srv.log())


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
    log = open(srv.log_path, "ab")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [*srv.command, "serve", "--config", str(srv.config_path)],
        cwd=srv.directory,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=srv.env,
        start_new_session=True,
    )
    stream_ended = threading.Event()
    try:
        if moment.endswith("s") and moment[0].isdigit():
            time.sleep(float(moment[:-1]))
        elif moment.startswith("manager-up"):
            _wait_for_log(srv, "listening on")  # the worker manager starts right after this line
            time.sleep(0.3 if moment.endswith("0.3s") else 0.0)
        else:
            _wait_ready(srv)
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
        assert _group_gone(proc.pid), f"worker processes left behind:\n{srv.log()}"
        assert "Traceback" not in srv.log(), srv.log()
        if moment == "stream":
            assert stream_ended.wait(5), "the event stream did not end"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        log.close()


# -- several server processes (grantd.web.processes) ---------------------------------------------------
def _children(pid: int, *, sequencer: bool = False) -> list[int]:
    """Live child server processes of ``pid``, from /proc (no procps needed); with ``sequencer``, the
    decision log's sequencer process instead (grantd.web.sequencer)."""
    found = []
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


def test_a_killed_server_process_hands_back_the_logs_lease_at_once(tmp_path: Path) -> None:
    """The default sequencer runs inline, in every server process; the one holding the lease may be
    killed (kill -9, the OOM killer) and cannot give it up. The first process reaps it and hands the
    lease back, so a new event is in a signed checkpoint at once, not when the lease runs out. The
    lease is pinned on the other process for a minute here, so that waiting it out cannot pass."""
    srv = make_server(tmp_path / "srv", workers=2)
    srv.start()
    try:
        assert srv.proc is not None
        _wait_for_log(srv, "all 2 server processes serving")
        [peer] = _children(srv.proc.pid)
        _wait_for(lambda: httpx.get(f"{srv.url}/api/audit/checkpoint").status_code == 200, 10, srv.log())
        pg.server_sql(
            srv.directory,
            "UPDATE tlog_state SET holder = ?, lease_until = ?",
            (f"{socket.gethostname()}:{peer}:0badcafe", int(time.time() * 1000) + 60_000),
        )
        os.kill(peer, signal.SIGKILL)
        _wait_for(lambda: "starting another" in srv.log(), 10, srv.log())
        with httpx.Client(timeout=5) as http:
            before = int(http.get(f"{srv.url}/api/audit/checkpoint").text.split("\n")[1])
            key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOzjWPjkUeKLmFMzgC9mwF4dJuWZ8uMq2m8S3QVl0hX1"
            r = http.post(
                f"{srv.url}/api/hosts",
                json={"host": "h1", "publicKey": key},
                headers={"Authorization": f"Bearer {srv.token}"},
            )
            assert r.status_code == 201, r.text
            _wait_for(
                lambda: int(http.get(f"{srv.url}/api/audit/checkpoint").text.split("\n")[1]) > before,
                10,
                srv.log(),
            )
    finally:
        code = srv.stop()
    assert code == 0, srv.log()


def test_the_log_is_integrated_by_a_process_of_its_own_replaced_when_it_dies(tmp_path: Path) -> None:
    """``[audit] sequencer = "process"`` (issue 23): the server processes do none of the log's work;
    one more process does, is replaced if it dies, and stops with the server."""
    srv = make_server(tmp_path / "srv", workers=2, extra='[audit]\nsequencer = "process"\n').start()
    try:
        assert srv.proc is not None
        [sequencer] = _wait_for(lambda: _children(srv.proc.pid, sequencer=True), 30, srv.log())
        _wait_for(lambda: httpx.get(f"{srv.url}/api/audit/checkpoint").status_code == 200, 10, srv.log())
        # the lease holder ("host:pid:nonce") is that process, not one that serves requests
        [[holder]] = pg.server_sql(srv.directory, "SELECT holder FROM tlog_state")
        assert int(holder.split(":")[1]) == sequencer, (holder, sequencer)
        os.kill(sequencer, signal.SIGKILL)
        _wait_for(
            lambda: "sequencer process (pid" in srv.log() and "starting another" in srv.log(), 10, srv.log()
        )
        [replacement] = _wait_for(lambda: _children(srv.proc.pid, sequencer=True), 30, srv.log())
        assert replacement != sequencer
        # the dead one's lease (up to 5 s left) is handed back at once, not waited out
        killed = time.monotonic()
        _wait_for(
            lambda: (
                (pg.server_sql(srv.directory, "SELECT holder FROM tlog_state")[0][0] or "").split(":")[1:2]
                != [str(sequencer)]
            ),
            10,
            srv.log(),
        )
        assert time.monotonic() - killed < 2.5, "the lease was waited out, not handed back"
        with httpx.Client(timeout=5) as http:  # it integrates: a new leaf reaches a signed checkpoint
            before = int(http.get(f"{srv.url}/api/audit/checkpoint").text.split("\n")[1])
            key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOzjWPjkUeKLmFMzgC9mwF4dJuWZ8uMq2m8S3QVl0hX1"
            r = http.post(
                f"{srv.url}/api/hosts",
                json={"host": "h1", "publicKey": key},
                headers={"Authorization": f"Bearer {srv.token}"},
            )
            assert r.status_code == 201, r.text
            _wait_for(
                lambda: int(http.get(f"{srv.url}/api/audit/checkpoint").text.split("\n")[1]) > before,
                10,
                srv.log(),
            )
    finally:
        code = srv.stop()
    assert code == 0, srv.log()
    assert not _children(srv.proc.pid, sequencer=True)


def _listening_sockets(port: int) -> int:
    """IPv4 sockets in LISTEN on ``port``, from /proc/net/tcp (no iproute2 needed)."""
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for row in rows if row.split()[1].endswith(f":{port:04X}") and row.split()[3] == "0A")


def _wait_for(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(what)


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
        peers = _wait_for(lambda: _children(srv.proc.pid), 30, "no second server process")
        assert len(peers) == 1, peers  # no manager, no multiprocessing helpers: the first process serves too
        _wait_for(lambda: "all 2 server processes serving" in srv.log(), 30, srv.log())
        assert _all_answered(srv)
        assert _listening_sockets(srv.port) == 1  # one socket, shared (not SO_REUSEPORT copies)
    finally:
        srv.stop()
    assert "Traceback" not in srv.log(), srv.log()


def test_a_crashed_server_process_is_replaced(tmp_path: Path) -> None:
    srv = make_server(tmp_path / "srv", workers=2).start()
    try:
        assert srv.proc is not None
        _wait_for(lambda: "all 2 server processes serving" in srv.log(), 30, srv.log())
        [first] = _children(srv.proc.pid)
        os.kill(first, signal.SIGKILL)
        _wait_for(lambda: "exited with signal SIGKILL; starting another" in srv.log(), 10, srv.log())
        replacement = _wait_for(lambda: [p for p in _children(srv.proc.pid) if p != first], 30, srv.log())
        assert len(replacement) == 1
        _wait_for(lambda: srv.log().count("all 2 server processes serving") == 2, 30, srv.log())
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
        _wait_for(lambda: "all 3 server processes serving" in srv.log(), 30, srv.log())
        peers = _children(srv.proc.pid)
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

        _wait_for(gone, 2 + GRACE + 2, f"server processes outlived the first one:\n{srv.log()}")
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


# -- issue 20 item 2: the race around "ready", repeated ---------------------------------------------------
RACE_RUNS = 30


def _serve_once(srv: Server, rng: Any, ready_after: float) -> tuple[str, float, int | None, str, str]:
    """Start `grantd serve`, send SIGTERM at a random moment near the one it becomes ready, and
    return (moment, seconds it took to end, exit code or None if it kept running, what it left
    behind, log). Whatever is left is killed afterwards, not before it is counted."""
    srv.log_path.write_bytes(b"")
    log = open(srv.log_path, "ab")  # noqa: SIM115 - closed below
    started = time.monotonic()
    proc = subprocess.Popen(
        [*srv.command, "serve", "--config", str(srv.config_path)],
        cwd=srv.directory,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=srv.env,
        start_new_session=True,
    )
    try:
        kind = rng.choice(["from-start", "listening", "ready"])
        delay = rng.uniform(0.0, ready_after * 1.2 if kind == "from-start" else 0.4)
        if kind == "listening":  # the first process is about to serve (and start the others)
            _wait_for_log(srv, "listening on")
        elif kind == "ready":  # a server answers: where the signal used to be used up
            _wait_ready(srv)
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
        if not _group_gone(proc.pid, timeout=2):
            left.append("processes of its group still running")
        if _listening_sockets(srv.port):
            left.append(f"a socket still listening on {srv.port}")
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(f"{srv.url}/readyz", timeout=1)
            left.append("a server still answering /readyz")
        return moment, took, code, ", ".join(left), srv.log()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # an orphan the assertions below would name
        log.close()


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
    log = open(srv.log_path, "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [*srv.command, "serve", "--config", str(srv.config_path)],
        cwd=srv.directory,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=srv.env,
        start_new_session=True,
    )
    try:
        try:
            code = proc.wait(60 + ALLOWED)
        except subprocess.TimeoutExpired:
            pytest.fail(f"SIGTERM sent while Sanic ignored it was lost:\n{srv.log()}")
        assert "test plugin: SIGTERM sent where Sanic ignores it" in srv.log(), srv.log()
        assert code == 0, srv.log()
        assert "stop signal received while starting: stopping" in srv.log(), srv.log()
        assert _group_gone(proc.pid), f"processes left behind:\n{srv.log()}"
        assert not _listening_sockets(srv.port), srv.log()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def _popen_serve(srv: Server, log: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*srv.command, "serve", "--config", str(srv.config_path)],
        cwd=srv.directory,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=srv.env,
        start_new_session=True,
    )


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
    assert _group_gone(proc.pid), f"processes left behind:\n{srv.log()}"
    assert not _listening_sockets(srv.port), srv.log()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_second_sigterm_while_starting_ends_the_process_at_once(tmp_path: Path, workers: int) -> None:
    """The first stop signal while the server starts is held until it runs (a stop, not a half-made
    start); the start may be long (a migration, a slow plugin), and a second one does not wait for it."""
    srv = make_server(tmp_path / "srv", workers=workers, extra='[plugins]\nmodules = ["slow_start"]\n')
    with open(srv.log_path, "wb") as log:
        proc = _popen_serve(srv, log)
        try:
            _wait_for(
                lambda: list(srv.directory.glob("slow-start-*")), 60, "the start never reached the plugin"
            )
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            assert proc.poll() is None, f"the first SIGTERM was not held:\n{srv.log()}"
            _ends_at_once(srv, proc)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def _ask_slowly(srv: Server) -> None:
    with contextlib.suppress(httpx.HTTPError):  # the server is stopped under it
        httpx.get(f"{srv.url}/slow-route/sleep", timeout=30)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_second_sigterm_while_requests_drain_ends_the_server_at_once(tmp_path: Path, workers: int) -> None:
    """The first SIGTERM gives in-flight requests the grace; a second one does not wait for them, in
    any of the server's processes."""
    srv = make_server(tmp_path / "srv", workers=workers, extra='[plugins]\nmodules = ["slow_route"]\n')
    with open(srv.log_path, "wb") as log:
        proc = _popen_serve(srv, log)
        try:
            _wait_ready(srv)
            if workers > 1:
                _wait_for_log(srv, "all 2 server processes serving")
            threading.Thread(target=_ask_slowly, args=(srv,), daemon=True).start()
            _wait_for(lambda: list(srv.directory.glob("slow-route-*")), 10, "the slow request never arrived")
            proc.send_signal(signal.SIGTERM)
            _wait_for_log(srv, "received SIGTERM: stopping")
            assert proc.poll() is None, f"nothing waited for the in-flight request:\n{srv.log()}"
            _ends_at_once(srv, proc)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def test_one_sigterm_to_the_whole_group_is_one_graceful_stop(tmp_path: Path) -> None:
    """systemd's stop (``KillMode=control-group``) and a terminal's Ctrl-C signal every process of the
    server, and the first process then sends the others its own SIGTERM: for them that second signal
    is expected, not a second stop request. Every process stops gracefully (exit 0); none "exits now"."""
    srv = make_server(tmp_path / "srv", workers=2)
    with open(srv.log_path, "wb") as log:
        proc = _popen_serve(srv, log)
        try:
            _wait_ready(srv)
            _wait_for_log(srv, "all 2 server processes serving")
            os.killpg(proc.pid, signal.SIGTERM)
            code = proc.wait(ALLOWED + 10)
            assert code == 0, srv.log()
            assert "second stop signal" not in srv.log(), srv.log()
            assert "exited with" not in srv.log(), srv.log()  # no process of the group ended otherwise
            assert _group_gone(proc.pid), f"processes left behind:\n{srv.log()}"
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


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
        log = open(srv.log_path, "wb")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            [*srv.command, "serve", "--config", str(srv.config_path)],
            cwd=srv.directory,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=srv.env,
            start_new_session=True,
        )
        try:

            def in_after_start() -> bool:
                pids = {int(m.name.rsplit("-", 1)[1]) for m in srv.directory.glob("after-start-*")}
                return any(pid != proc.pid for pid in pids) if workers > 1 else proc.pid in pids

            _wait_for(in_after_start, 60, srv.log())
            time.sleep(rng.uniform(0.0, 0.5))  # the listener sleeps 1 s
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(ALLOWED + 5)
            except subprocess.TimeoutExpired:
                pytest.fail(f"run {run}: SIGTERM during the after-start listeners was lost:\n{srv.log()}")
            assert time.monotonic() - sent < ALLOWED, srv.log()
            assert code == 0, srv.log()
            assert _group_gone(proc.pid), f"run {run}: processes left behind:\n{srv.log()}"
            assert not _listening_sockets(srv.port), srv.log()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            log.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_while_the_loop_is_between_runs_is_not_lost(tmp_path: Path, workers: int) -> None:
    """The race CI found after issue 20: SIGTERM that reaches the first process after the
    after-start listeners and before ``run_forever`` (the loop is not running; uvloop parked it and
    the server served on). A plugin sends it from inside Sanic's "Worker ready" log call, every time."""
    srv = make_server(
        tmp_path / "srv", workers=workers, extra='[plugins]\nmodules = ["signal_at_worker_ready"]\n'
    )
    log = open(srv.log_path, "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [*srv.command, "serve", "--config", str(srv.config_path)],
        cwd=srv.directory,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=srv.env,
        start_new_session=True,
    )
    try:
        try:
            code = proc.wait(60 + ALLOWED)
        except subprocess.TimeoutExpired:
            pytest.fail(f"SIGTERM sent while the loop was between runs was lost:\n{srv.log()}")
        assert code == 0, srv.log()
        assert "received SIGTERM: stopping" in srv.log(), srv.log()
        assert _group_gone(proc.pid), f"processes left behind:\n{srv.log()}"
        assert not _listening_sockets(srv.port), srv.log()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()

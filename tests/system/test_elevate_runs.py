"""grantd elevate as root, after the checks: site plugins, the audit log, consume's answer (D10), the token never in argv under sudo, and the command as a child whose end is audited. Shared fixtures: test_elevate."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import free_port
from elevate_support import (
    GRANTD,
    HOST,
    PLUGIN_DIR,
    FakeIssuer,
    Target,
    attempts,
    elevate,
    error_line,
    exits,
    make_target,
    mint_token,
)
from system import test_elevate

# fixtures and helpers shared with the other parts (pytest finds a fixture by its module-level name)
ARGV = test_elevate.ARGV
gone = test_elevate.gone
refusal = test_elevate.refusal
target = test_elevate.target
test_user = test_elevate.test_user


# -- site plugins -----------------------------------------------------------------------------------------


def _office_hours(target: Target, start: str, end: str) -> None:
    text = target.config.read_text()
    text = text.replace("plugin_dirs", 'plugins = ["elevate_office_hours"]\nplugin_dirs')
    target.config.write_text(text + f'\n[office_hours]\nstart = "{start}"\nend = "{end}"\n')


def test_an_office_hours_plugin_can_refuse(gone, tmp_path):
    srv, base = gone
    target = make_target(
        tmp_path / "t",
        [srv.url],
        timeout=3,
        jwks_refresh=0,
        jwks_cache_dir=str(base.cache),
        plugin_dirs=[PLUGIN_DIR],
        offline_grant_types=["timed"],
    )
    now = time.gmtime()
    closed_from = f"{(now.tm_hour + 1) % 24:02d}:00"
    closed_to = f"{(now.tm_hour + 2) % 24:02d}:00"
    _office_hours(target, closed_from, closed_to)
    line = refusal(elevate(target, ARGV, token=mint_token(srv, ARGV)))
    assert line["error"] == "refused_by_plugin" and "outside office hours" in line["reason"]
    assert "outside office hours" in target.audit_lines()[-1]["reason"]


def test_an_office_hours_plugin_lets_grants_through_in_hours(gone, tmp_path):
    srv, base = gone
    target = make_target(
        tmp_path / "t",
        [srv.url],
        timeout=3,
        jwks_refresh=0,
        jwks_cache_dir=str(base.cache),
        plugin_dirs=[PLUGIN_DIR],
        offline_grant_types=["timed"],
    )
    now = time.gmtime()
    _office_hours(
        target, f"{now.tm_hour:02d}:00", f"{(now.tm_hour + 1) % 24:02d}:00" if now.tm_min < 59 else "23:59"
    )
    result = elevate(target, ARGV, token=mint_token(srv, ARGV))
    assert result.returncode == 0, result.stderr


def test_the_default_checks_still_come_first_with_a_plugin(gone, tmp_path):
    srv, base = gone
    target = make_target(
        tmp_path / "t",
        [srv.url],
        timeout=3,
        jwks_refresh=0,
        jwks_cache_dir=str(base.cache),
        plugin_dirs=[PLUGIN_DIR],
        offline_grant_types=["timed"],
    )
    now = time.gmtime()
    _office_hours(target, f"{(now.tm_hour + 1) % 24:02d}:00", f"{(now.tm_hour + 2) % 24:02d}:00")
    result = elevate(target, ARGV, token=mint_token(srv, ARGV, aud="shapes"))
    line = refusal(result)
    assert line["error"] == "audience_mismatch" and len(line["reasons"]) == 2


def test_a_plugin_that_cannot_be_imported_is_a_config_error(server, tmp_path):
    target = make_target(tmp_path / "t", [server.url], plugins=["elevate_no_such_plugin"])
    result = elevate(target, ARGV, token=mint_token(server, ARGV))
    assert result.returncode == 1 and "cannot import plugin" in error_line(result)["reason"]


def test_a_plugin_directory_others_can_write_is_refused(server, tmp_path):
    loose = tmp_path / "plugins"
    loose.mkdir()
    loose.chmod(0o777)
    target = make_target(tmp_path / "t", [server.url], plugin_dirs=[str(loose)])
    result = elevate(target, ARGV, token=mint_token(server, ARGV))
    assert result.returncode == 1 and "plugin directory" in error_line(result)["reason"]


# -- audit log --------------------------------------------------------------------------------------------


def test_every_attempt_is_one_json_line_in_the_audit_log(gone, tmp_path):
    srv, base = gone
    target = make_target(
        tmp_path / "t",
        [srv.url],
        timeout=3,
        jwks_refresh=0,
        jwks_cache_dir=str(base.cache),
        offline_grant_types=["timed"],
    )
    tries = [
        (ARGV, mint_token(srv, ARGV), 0),
        (["id", "-g"], mint_token(srv, ARGV), 5),
        (ARGV, mint_token(srv, ARGV, aud="nope"), 5),
        (ARGV, mint_token(srv, ARGV, grant_type="once"), 1),
        (["grantd-missing"], mint_token(srv, ["grantd-missing"]), 127),
        (ARGV, "garbage", 5),
    ]
    for argv, token, code in tries:
        assert elevate(target, argv, token=token).returncode == code
    raw = target.audit_log.read_text().splitlines()
    assert len(raw) == len(tries) + 1  # the allowed one also says how it ended
    lines = [json.loads(line) for line in raw]
    assert [line["event"] for line in lines] == ["attempt", "exit"] + ["attempt"] * (len(tries) - 1)
    ended = lines.pop(1)
    assert ended["status"] == 0 and ended["result"] == "exited" and ended["grant_id"] == lines[0]["grant_id"]
    required = {
        "time",
        "real_uid",
        "agent",
        "grant_id",
        "grant_type",
        "decided_by",
        "command",
        "cmd_hash",
        "run_as",
        "host",
        "cwd",
        "result",
        "reason",
    }
    for line in lines:
        assert required <= set(line), line
        assert line["real_uid"] == os.getuid() and line["host"] == HOST
    assert [line["result"] for line in lines] == [
        "allowed",
        "refused",
        "refused",
        "error",
        "error",
        "refused",
    ]
    assert lines[0]["agent"] == "agent+test@example.com" and lines[0]["decided_by"] == "admin@example.com"
    assert lines[1]["reason"].startswith("cmd_hash mismatch") and lines[1]["command"] == ["id", "-g"]
    assert oct(target.audit_log.stat().st_mode & 0o777) == "0o640"
    assert "eyJ" not in target.audit_log.read_text()  # tokens are never logged


# -- consume must answer 200 with JSON (D10) --------------------------------------------------------------


@pytest.fixture
def issuer() -> Iterator[FakeIssuer]:
    fake = FakeIssuer().serve()
    yield fake
    fake.close()


BAD_ANSWERS = {
    "http-500": (500, "application/json", b'{"status": "valid"}', {}),
    "http-503-html": (503, "text/html", b"<html>down for maintenance</html>", {}),
    "html-200": (200, "text/html", b"<html><body>Sign in to the portal</body></html>", {}),
    "redirect": (302, "text/html", b"", {"Location": "http://127.0.0.1:9/elsewhere"}),
    "json-not-an-object": (200, "application/json", b'["valid"]', {}),
    "unknown-status": (200, "application/json", b'{"status": "ok"}', {}),
    "empty-204": (204, "application/json", b"", {}),
}


@pytest.mark.parametrize("offline", [[], ["timed", "always"]], ids=["default", "offline-opt-in"])
@pytest.mark.parametrize("answer", list(BAD_ANSWERS))
def test_a_bad_consume_answer_is_a_failure_never_an_outage(issuer, tmp_path, answer, offline):
    issuer.answer = BAD_ANSWERS[answer]
    target = issuer.target(tmp_path / "t", offline_grant_types=offline)
    result = elevate(target, ARGV, token=issuer.token(ARGV))
    assert result.returncode == 1, (result.stdout, result.stderr)
    line = error_line(result)
    assert line["error"] == "consume_failed" and "cannot consume the grant at the issuer" in line["reason"]
    assert result.stdout == ""  # nothing ran
    assert len(issuer.consumed) == 1  # it was asked, once
    assert attempts(target)[-1]["result"] == "error" and exits(target) == []


@pytest.mark.parametrize("grant_type", ["timed", "always"])
def test_an_issuer_that_answers_500_does_not_let_revoked_grants_run(issuer, tmp_path, grant_type):
    # The attack: the issuer knows the grant is revoked, but a 5xx (an overloaded proxy, or one
    # the attacker provoked) used to count as "the issuer is away" and let it run on cached keys.
    issuer.answer = (500, "text/plain", b"Internal Server Error", {})
    target = issuer.target(tmp_path / "t", offline_grant_types=["timed", "always"])
    result = elevate(
        target, ["sh", "-c", "echo ran"], token=issuer.token(["sh", "-c", "echo ran"], grant_type=grant_type)
    )
    assert result.returncode == 1 and "ran" not in result.stdout
    assert "HTTP 500" in error_line(result)["reason"]


def test_an_issuer_that_answers_200_json_lets_the_grant_run(issuer, tmp_path):
    target = issuer.target(tmp_path / "t")
    result = elevate(target, ARGV, token=issuer.token(ARGV))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"
    assert attempts(target)[-1]["consume"] == "consume: valid"


@pytest.mark.parametrize(("grant_type", "answer"), [("once", "valid"), ("timed", "consumed")])
def test_consume_must_answer_the_status_of_the_grant_type(issuer, tmp_path, grant_type, answer):
    issuer.answer = (200, "application/json", json.dumps({"status": answer}).encode(), {})
    target = issuer.target(tmp_path / "t")
    result = elevate(target, ARGV, token=issuer.token(ARGV, grant_type=grant_type))
    assert result.returncode == 1 and error_line(result)["error"] == "consume_failed"


def test_a_consume_refusal_refuses_even_with_the_offline_opt_in(issuer, tmp_path):
    issuer.answer = (200, "application/json", b'{"error": "revoked", "status": "revoked"}', {})
    target = issuer.target(tmp_path / "t", offline_grant_types=["timed", "always"])
    result = elevate(target, ARGV, token=issuer.token(ARGV))
    assert result.returncode == 5
    assert error_line(result) == {"error": "revoked", "reason": "grant revoked"}


@pytest.mark.parametrize("offline", [[], ["timed", "always"]], ids=["default", "offline-opt-in"])
def test_a_silent_issuer_is_a_failure_not_an_outage(tmp_path, black_hole, offline):
    silent = FakeIssuer(black_hole)
    target = silent.target(tmp_path / "t", timeout=2, offline_grant_types=offline)
    started = time.monotonic()
    result = elevate(target, ARGV, token=silent.token(ARGV))
    assert result.returncode == 1, (result.stdout, result.stderr)
    line = error_line(result)
    assert line["error"] == "network" and ("timed out" in line["reason"] or "no answer" in line["reason"])
    assert result.stdout == "" and time.monotonic() - started < 30


@pytest.fixture
def refusing(tmp_path: Path) -> FakeIssuer:
    """An issuer nobody listens for: every connection is refused."""
    return FakeIssuer(f"http://127.0.0.1:{free_port()}")


def test_a_refused_connection_fails_without_the_offline_opt_in(refusing, tmp_path):
    target = refusing.target(tmp_path / "t")
    result = elevate(target, ARGV, token=refusing.token(ARGV))
    assert result.returncode == 1 and result.stdout == ""
    line = error_line(result)
    assert line["error"] == "network" and "Connection refused" in line["reason"]
    assert "offline_grant_types" in line["reason"]  # says how to opt in


def test_a_refused_connection_runs_a_grant_whose_type_is_opted_in(refusing, tmp_path):
    target = refusing.target(tmp_path / "t", offline_grant_types=["timed"])
    result = elevate(target, ARGV, token=refusing.token(ARGV))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"
    note = attempts(target)[-1]["consume"]
    assert "issuer unreachable" in note and "Connection refused" in note
    always = elevate(
        target, ARGV, token=refusing.token(ARGV, grant_type="always")
    )  # not named: needs the issuer
    assert always.returncode == 1 and error_line(always)["error"] == "network"


def test_a_once_grant_always_needs_the_issuer(refusing, tmp_path):
    target = refusing.target(tmp_path / "t", offline_grant_types=["timed", "always"])
    result = elevate(target, ARGV, token=refusing.token(ARGV, grant_type="once"))
    assert result.returncode == 1 and result.stdout == ""
    assert "once grants always need the issuer" in error_line(result)["reason"]


def test_an_unresolvable_issuer_counts_as_unreachable(tmp_path):
    gone = FakeIssuer("http://grantd-test-no-such-host.invalid")
    target = gone.target(tmp_path / "t", timeout=5, offline_grant_types=["timed"])
    result = elevate(target, ARGV, token=gone.token(ARGV))
    if result.returncode == 1 and ("timed out" in result.stderr or "no answer" in result.stderr):
        pytest.skip("this machine's resolver does not answer for .invalid in time")
    assert result.returncode == 0, result.stderr
    assert "issuer unreachable" in attempts(target)[-1]["consume"]


def test_the_gone_issuer_without_the_opt_in_is_a_failure(gone, tmp_path):
    srv, base = gone
    target = make_target(tmp_path / "t", [srv.url], timeout=3, jwks_refresh=0, jwks_cache_dir=str(base.cache))
    result = elevate(target, ARGV, token=mint_token(srv, ARGV))
    assert result.returncode == 1 and result.stdout == "" and error_line(result)["error"] == "network"


# -- the token never goes into argv under sudo (D10) --------------------------------------------------------

SUDO_ENV = {"SUDO_UID": "65534", "SUDO_GID": "65534", "SUDO_USER": "nobody"}


def test_grant_in_argv_is_refused_under_sudo(server, target):
    token = mint_token(server, ARGV)
    for extra in (SUDO_ENV, {"SUDO_USER": "nobody"}, {"SUDO_UID": "0"}):
        result = elevate(target, ARGV, token=token, via="argv", env={**os.environ, **extra})
        assert result.returncode == 1, (extra, result.stderr)
        line = error_line(result)
        assert line["error"] == "grant_in_argv"
        for way in ("--grant-stdin", "--grant-fd N", "--grant-file FILE"):
            assert way in line["reason"]
        assert token not in result.stderr and result.stdout == ""


@pytest.mark.skipif(shutil.which("sudo") is None, reason="needs sudo")
def test_grant_in_argv_is_refused_through_real_sudo(server, target):
    token = mint_token(server, ARGV, aud="shapes")
    base = ["sudo", "-n", sys.executable, "-I", "-m", "grantd", "elevate", "--config", str(target.config)]
    through_argv = subprocess.run(
        [*base, "--grant", token, "--", *ARGV], capture_output=True, text=True, timeout=60, cwd="/"
    )
    if "a password is required" in through_argv.stderr or "not allowed" in through_argv.stderr:
        pytest.skip("sudo is not usable here")
    assert through_argv.returncode == 1, through_argv.stderr
    assert error_line(through_argv)["error"] == "grant_in_argv"
    # The same token through stdin reaches verification (and is refused there: wrong audience).
    through_stdin = subprocess.run(
        [*base, "--grant-stdin", "--", *ARGV],
        input=token + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert through_stdin.returncode == 5, through_stdin.stderr
    assert error_line(through_stdin)["error"] == "audience_mismatch"


def test_grant_in_argv_from_a_root_shell_works_with_a_warning(server, target):
    result = elevate(
        target,
        ARGV,
        token=mint_token(server, ARGV, aud="shapes"),
        via="argv",
        env={k: v for k, v in os.environ.items() if not k.startswith("SUDO_")},
    )
    assert result.returncode == 5 and error_line(result)["error"] == "audience_mismatch"
    assert "process list" in result.stderr


def _grant_file(directory: Path, token: str, mode: int, owner: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755)
    path = directory / "grant.jwt"
    path.write_text(token)
    path.chmod(mode)
    os.chown(path, owner, owner)
    return path


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o666])
def test_a_grant_file_others_can_read_or_write_is_refused(server, target, tmp_path, mode):
    path = _grant_file(tmp_path / "files", mint_token(server, ARGV), mode, 0)
    result = elevate(target, ARGV, extra_args=["--grant-file", str(path)])
    assert result.returncode == 1, result.stderr
    line = error_line(result)
    assert (
        line["error"] == "usage"
        and "readable or writable by others" in line["reason"]
        and "0600" in line["reason"]
    )


def test_a_grant_file_of_another_user_is_refused(server, target, tmp_path):
    path = _grant_file(tmp_path / "files", mint_token(server, ARGV), 0o600, 65534)
    result = elevate(target, ARGV, extra_args=["--grant-file", str(path)])
    assert result.returncode == 1 and "not owned by you" in error_line(result)["reason"]


def test_a_private_grant_file_of_the_caller_is_read(server, target, tmp_path):
    path = _grant_file(tmp_path / "files", mint_token(server, ARGV, aud="shapes"), 0o600, 0)
    result = elevate(target, ARGV, extra_args=["--grant-file", str(path)])
    assert result.returncode == 5 and error_line(result)["error"] == "audience_mismatch"


# -- the command runs as a child: its end is audited and its status is elevate's (D10) -----------------------


def test_the_exit_status_is_propagated_and_audited(gone, tmp_path):
    srv, base = gone
    target = make_target(
        tmp_path / "t",
        [srv.url],
        timeout=3,
        jwks_refresh=0,
        jwks_cache_dir=str(base.cache),
        offline_grant_types=["timed"],
    )
    argv = ["sh", "-c", "echo out; echo err >&2; exit 7"]
    token = mint_token(srv, argv)
    result = elevate(target, argv, token=token)
    assert result.returncode == 7, result.stderr
    assert result.stdout == "out\n" and result.stderr.endswith("err\n")
    started, ended = target.audit_lines()
    assert started["event"] == "attempt" and started["result"] == "allowed"
    assert ended["event"] == "exit" and ended["result"] == "exited"
    assert ended["status"] == 7 and ended["exit_code"] == 7 and "signal" not in ended
    assert (
        ended["grant_id"] == started["grant_id"]
        and ended["command"] == argv
        and ended["pid"] == started["pid"]
    )
    assert ended["child_pid"] != ended["pid"] and ended["duration_ms"] >= 0
    assert "eyJ" not in target.audit_log.read_text()


def test_a_command_ended_by_a_signal_gives_128_plus_n(gone, tmp_path):
    srv, base = gone
    target = make_target(
        tmp_path / "t",
        [srv.url],
        timeout=3,
        jwks_refresh=0,
        jwks_cache_dir=str(base.cache),
        offline_grant_types=["timed"],
    )
    argv = ["sh", "-c", "kill -TERM $$"]
    result = elevate(target, argv, token=mint_token(srv, argv))
    assert result.returncode == 128 + 15, result.stderr
    ended = exits(target)[-1]
    assert ended["result"] == "signalled" and ended["signal"] == 15 and ended["signal_name"] == "SIGTERM"
    assert ended["exit_code"] == 143 and "status" not in ended


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as fh:
        return [int(p) for p in fh.read().split()]


def test_sigterm_sent_to_elevate_reaches_the_command(gone, tmp_path):
    srv, base = gone
    target = make_target(
        tmp_path / "t",
        [srv.url],
        timeout=3,
        jwks_refresh=0,
        jwks_cache_dir=str(base.cache),
        offline_grant_types=["timed"],
    )
    argv = ["sleep", "60"]
    proc = subprocess.Popen(
        [*GRANTD, "elevate", "--config", str(target.config), "--grant-stdin", "--", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None
    proc.stdin.write(mint_token(srv, argv) + "\n")
    proc.stdin.close()
    deadline = time.monotonic() + 30
    while not (children := _children(proc.pid)):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else None
        assert time.monotonic() < deadline, "the command did not start"
        time.sleep(0.05)
    # the child execs the verified argv right after the fork: wait for the exec, then look (no token)
    while (cmdline := pathlib.Path(f"/proc/{children[0]}/cmdline").read_bytes()).split(b"\0")[0] != b"sleep":
        assert time.monotonic() < deadline, f"the command did not start: {cmdline!r}"
        time.sleep(0.05)
    assert cmdline.split(b"\0")[:2] == [b"sleep", b"60"]
    with open(f"/proc/{children[0]}/environ", "rb") as fh:
        assert b"eyJ" not in fh.read()
    started = time.monotonic()
    proc.terminate()  # SIGTERM to elevate, as sudo relays it or a supervisor sends it
    assert proc.wait(timeout=30) == 128 + 15, proc.stderr.read() if proc.stderr else None
    assert time.monotonic() - started < 10  # the command ended at once, not after its 60 s
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    ended = exits(target)[-1]
    assert ended["signal"] == 15 and ended["child_pid"] == children[0] and ended["duration_ms"] < 30000


def test_an_exec_failure_in_the_child_is_126_and_audited(gone, tmp_path, test_user):
    # Executable by root, not by the run_as user: found before consume, refused by the kernel in the child.
    srv, base = gone
    target = make_target(
        tmp_path / "t",
        [srv.url],
        timeout=3,
        jwks_refresh=0,
        jwks_cache_dir=str(base.cache),
        offline_grant_types=["timed"],
    )
    script = tmp_path / "root-only.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o700)
    tmp_path.chmod(0o755)
    argv = [str(script)]
    result = elevate(target, argv, token=mint_token(srv, argv, run_as=test_user.pw_name))
    assert result.returncode == 126, result.stderr
    assert error_line(result)["error"] == "not_executable" and "hi" not in result.stdout
    ended = exits(target)[-1]
    assert ended["result"] == "error" and ended["status"] == 126 and "not executable" in ended["reason"]

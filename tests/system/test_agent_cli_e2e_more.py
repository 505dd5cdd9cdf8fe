"""The agent CLI end to end, continued: JSON output and grant reuse, keys and token renewal, an unreachable server, waiting over a restart, one message for a used token, grantd run --protocol ciba. Shared fixtures: test_agent_cli_e2e."""

from __future__ import annotations

import json
import stat
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from conftest import GRANTD, Server, free_port, unique_email
from elevate_support import APPROVER, HOST, attempts, elevate, error_line
from system import test_agent_cli_e2e

# fixtures and helpers shared with the other parts (pytest finds a fixture by its module-level name)
Cli = test_agent_cli_e2e.Cli
claims_of = test_agent_cli_e2e.claims_of
cli = test_agent_cli_e2e.cli
cli_env = test_agent_cli_e2e.cli_env
decide = test_agent_cli_e2e.decide
enroll_key = test_agent_cli_e2e.enroll_key
finish = test_agent_cli_e2e.finish
grants_for = test_agent_cli_e2e.grants_for
new_agent = test_agent_cli_e2e.new_agent
pending_grant = test_agent_cli_e2e.pending_grant
pytestmark = test_agent_cli_e2e.pytestmark
server_grant = test_agent_cli_e2e.server_grant
target = test_agent_cli_e2e.target


# -- 7. JSON output for scripts, reuse of timed/always grants ----------------------------------------


def test_grant_commands_json_output_matches_the_server(server, cli):
    argv = ["echo", "json", uuid.uuid4().hex[:8]]
    asked = cli.run(
        "grant",
        "request",
        "--audience",
        "grantd",
        "--host",
        HOST,
        "--reason",
        "rotate logs",
        "--json",
        "--",
        *argv,
    )
    assert asked.returncode == 75, asked.stderr
    created = json.loads(asked.stdout)
    assert created["status"] == "pending" and created["requester"] == cli.email
    assert created["request"]["command"] == argv and created["request"]["reason"] == "rotate logs"
    grant_id = created["id"]

    status = cli.run("grant", "status", grant_id, "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout) == server_grant(server, grant_id)
    listed = cli.run("grant", "list", "--status", "pending", "--json")
    assert listed.returncode == 0, listed.stderr
    assert grant_id in [g["id"] for g in json.loads(listed.stdout)["data"]]

    decide(server, grant_id)
    status = cli.run("grant", "status", grant_id, "--json")
    shown = json.loads(status.stdout)
    assert shown == server_grant(server, grant_id)
    assert shown["status"] == "approved" and shown["decided_by"] == APPROVER
    listed = json.loads(cli.run("grant", "list", "--status", "approved", "--json").stdout)
    assert grant_id in [g["id"] for g in listed["data"]]
    assert grant_id not in [
        g["id"] for g in json.loads(cli.run("grant", "list", "--status", "pending", "--json").stdout)["data"]
    ]
    fetched = cli.run("grant", "token", grant_id, "--json")
    assert fetched.returncode == 0, fetched.stderr
    answer = json.loads(fetched.stdout)
    assert answer["id"] == grant_id
    claims = claims_of(answer["authz_jwt"])
    assert claims["grant_id"] == grant_id and claims["sub"] == cli.email and claims["iss"] == server.url
    assert claims["command"] == argv and claims["decided_by"] == APPROVER and claims["target_host"] == HOST
    # Errors are JSON too, and name the cause.
    missing = cli.run("grant", "status", str(uuid.uuid4()), "--json")
    assert missing.returncode == 1
    assert json.loads(missing.stderr)["error"] == "not_found"


@pytest.mark.parametrize("kind", [["--type", "timed", "--duration", "1h"], ["--type", "always"]])
def test_an_approved_timed_or_always_grant_is_reused_without_asking_again(server, cli, kind):
    argv = ["echo", "reuse", uuid.uuid4().hex[:8]]
    proc = cli.popen("run", *kind, "--wait", "--", *argv)
    grant = pending_grant(server, cli.email, argv, proc=proc)
    decide(server, grant["id"])
    code, out, err = finish(proc)
    assert code == 0, err
    assert out == " ".join(argv[1:]) + "\n"

    again = cli.run("run", *kind, "--wait", "--timeout", "30s", "--", *argv)
    assert again.returncode == 0, again.stderr
    assert again.stdout == out
    assert "waits for a human decision" not in again.stderr
    assert f"reusing grant {grant['id']}" in again.stderr
    same = grants_for(server, cli.email, argv)
    assert [g["id"] for g in same] == [grant["id"]]  # no second grant, nothing pending
    assert same[0]["status"] == "approved"


# -- 8. keys and token renewal ---------------------------------------------------------------------


def _pem_key(path: Path, password: bytes | None = None) -> str:
    key = Ed25519PrivateKey.generate()
    encryption = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )
    path.chmod(0o600)
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )


def test_an_encrypted_key_gives_a_clear_error(server, tmp_path):
    openssh = tmp_path / "enc_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "a passphrase", "-f", str(openssh)], check=True
    )
    pkcs8 = tmp_path / "enc.pem"
    pkcs8_public = _pem_key(pkcs8, b"a passphrase")
    for key, public in ((openssh, openssh.with_suffix(".pub").read_text().strip()), (pkcs8, pkcs8_public)):
        email = unique_email("enc")
        enroll_key(server, email, public)
        home = tmp_path / f"home-{key.name}"
        result = subprocess.run(
            [*GRANTD, "agent", "login", "--idp", server.url, "--key", str(key), "--email", email],
            env=cli_env(home),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 1
        assert f"key file {key} is encrypted (has a passphrase)" in result.stderr
        assert "Traceback" not in result.stderr
        assert not (home / ".config" / "grantd" / "agent.json").exists()


def test_a_pkcs8_pem_ed25519_key_logs_in(server, tmp_path):
    key = tmp_path / "agent.pem"
    email = unique_email("pem")
    enroll_key(server, email, _pem_key(key))
    cli = Cli(server, tmp_path / "home", email, cli_env(tmp_path / "home"))
    login = cli.run("agent", "login", "--idp", server.url, "--key", str(key), "--email", email, "--json")
    assert login.returncode == 0, login.stderr
    assert json.loads(login.stdout)["logged_in"] is True
    me = cli.run("agent", "whoami", "--json")
    assert me.returncode == 0, me.stderr
    assert json.loads(me.stdout)["server"]["email"] == email


def test_the_token_is_renewed_silently_when_near_expiry(server_factory, tmp_path):
    from grantd.agent.api import RELOGIN_MARGIN

    short = server_factory("short", extra="[tokens]\nagent_token_ttl = 60\n").start()
    assert RELOGIN_MARGIN >= 60  # a 60 s token counts as about to expire from the start
    cli = new_agent(short, tmp_path / "home", None)
    before = cli.state()
    assert before["expires_at"] - time.time() <= RELOGIN_MARGIN
    listed = cli.run("grant", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr == ""  # silent
    after = cli.state()
    assert after["token"] != before["token"] and after["expires_at"] >= before["expires_at"]
    assert stat.S_IMODE((cli.config_dir / "agent.json").stat().st_mode) == 0o600


def test_a_token_the_server_refuses_is_renewed_once(server, target, tmp_path):
    cli = new_agent(server, tmp_path / "home", target)
    state = cli.state()
    state["token"] = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"  # well-formed, not ours
    (cli.config_dir / "agent.json").write_text(json.dumps(state))
    listed = cli.run("grant", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert cli.state()["token"] != state["token"]


# -- 9. the server cannot be reached -----------------------------------------------------------------


def test_an_unreachable_server_is_named_and_nothing_hangs(server, target, cli, tmp_path):
    closed = free_port()  # bound and released: nothing listens there
    idp = f"http://127.0.0.1:{closed}"
    start = time.monotonic()
    login = subprocess.run(
        [*GRANTD, "agent", "login", "--idp", idp, "--key", str(cli.key), "--email", cli.email],
        env=cli_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert login.returncode == 1
    assert f"grantd: cannot reach the IdP {idp}" in login.stderr and "refused" in login.stderr.lower()
    # A logged-in agent whose server went away: run says so, in words and in JSON.
    home = tmp_path / "moved"
    (home / ".config" / "grantd").mkdir(parents=True)
    moved = Cli(server, home, cli.email, cli_env(home, target))
    (moved.config_dir / "agent.json").write_text(json.dumps({**cli.state(), "idp": idp}))
    result = moved.run("run", "--wait", "--", "id", "-u")
    assert result.returncode == 1 and result.stdout == ""
    assert f"cannot reach the IdP {idp}" in result.stderr
    as_json = moved.run("grant", "list", "--json")
    assert as_json.returncode == 1 and json.loads(as_json.stderr)["error"] == "unreachable"
    assert time.monotonic() - start < 30


def test_a_server_that_never_answers_times_out(cli, tmp_path, black_hole):
    start = time.monotonic()
    result = subprocess.run(
        [*GRANTD, "agent", "login", "--idp", black_hole, "--key", str(cli.key), "--email", cli.email],
        env={**cli_env(tmp_path / "home"), "GRANTD_HTTP_TIMEOUT": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert f"the IdP {black_hole} did not answer in time" in result.stderr
    assert time.monotonic() - start < 20


# -- waiting survives a server restart ---------------------------------------------------------------


def _wait_until(predicate: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_grant_wait_survives_a_server_restart(server_factory, tmp_path):
    srv = server_factory("restart").start()
    cli = new_agent(srv, tmp_path / "home", None)
    argv = ["echo", "restart"]
    asked = cli.run("grant", "request", "--audience", "grantd", "--host", HOST, "--json", "--", *argv)
    assert asked.returncode == 75, asked.stderr
    grant_id = json.loads(asked.stdout)["id"]
    waiting = cli.popen("grant", "wait", grant_id, "--timeout", "2m")
    assert waiting.stderr is not None and waiting.stdout is not None
    lines: list[str] = []
    stderr = waiting.stderr

    def collect() -> None:
        for line in stderr:
            lines.append(line)

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    try:
        _wait_until(lambda: "GET /api/grants/events 200" in srv.log(), "the CLI on the event stream")
        srv.stop()
        _wait_until(
            lambda: any("retrying until the wait times out" in line for line in lines), "the CLI to notice"
        )
        assert waiting.poll() is None, lines
        srv.start()
        decide(srv, grant_id)
        assert waiting.wait(60) == 0, lines
    finally:
        if waiting.poll() is None:
            waiting.kill()
        out = waiting.stdout.read()
        reader.join(10)
    assert f"grant {grant_id}: approved" in out


# -- a used or absent token gives one message, not two ------------------------------------------------


def _approved_once_grant(server: Server, cli: Cli, argv: list[str]) -> str:
    asked = cli.run("grant", "request", "--audience", "grantd", "--host", HOST, "--json", "--", *argv)
    assert asked.returncode == 75, asked.stderr
    grant_id = str(json.loads(asked.stdout)["id"])
    decide(server, grant_id)
    return grant_id


def _pipeline(cli: Cli, grant_id: str, argv: list[str], *options: str) -> subprocess.CompletedProcess[str]:
    """`grantd grant token ID | grantd elevate --grant-stdin -- CMD`, as README shows it."""
    import shlex

    grantd = " ".join(shlex.quote(part) for part in GRANTD)
    line = (
        f"{grantd} grant token {shlex.quote(grant_id)} {' '.join(options)} | "
        f"{grantd} elevate --grant-stdin -- {' '.join(shlex.quote(a) for a in argv)}"
    )
    return subprocess.run(
        ["sh", "-c", line], env=cli.env, capture_output=True, text=True, timeout=60, cwd="/"
    )


def test_a_used_once_grant_piped_into_elevate_gives_one_clear_line(server, target, cli):
    argv = ["echo", "piped", uuid.uuid4().hex[:8]]
    grant_id = _approved_once_grant(server, cli, argv)
    first = _pipeline(cli, grant_id, argv)
    assert first.returncode == 0, first.stderr
    assert first.stdout == " ".join(argv[1:]) + "\n"

    again = _pipeline(cli, grant_id, argv)
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr.splitlines() == [
        f"grantd: grant {grant_id} was already consumed (a once grant runs one time): request a new one"
    ]
    # elevate said nothing but audited the attempt: no grant reached it.
    last = attempts(target)[-1]
    assert last["result"] == "error" and last["reason"].startswith("no grant: the sender closed the pipe")

    as_json = _pipeline(cli, grant_id, argv, "--json")
    assert as_json.returncode == 1 and as_json.stdout == ""
    lines = as_json.stderr.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["error"] == "consumed"


def test_a_revoked_grant_piped_into_elevate_gives_one_clear_line(server, target, cli):
    argv = ["echo", "revoked", uuid.uuid4().hex[:8]]
    grant_id = _approved_once_grant(server, cli, argv)
    decide(server, grant_id, "revoke")
    result = _pipeline(cli, grant_id, argv)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [f"grantd: grant {grant_id} was revoked (approved by {APPROVER})"]


def test_an_empty_regular_file_is_still_named_by_elevate(target, tmp_path):
    # Only a pipe that closed without a byte is left to its writer to explain; an empty file is ours.
    empty = tmp_path / "empty.jwt"
    empty.write_text("")
    empty.chmod(0o600)
    result = elevate(target, ["id", "-u"], extra_args=["--grant-file", str(empty)])
    assert result.returncode == 1 and error_line(result)["reason"] == "the grant is empty"
    blank = elevate(target, ["id", "-u"], token="   ")  # a line with no token in it
    assert blank.returncode == 1 and error_line(blank)["reason"] == "the grant is empty"


# -- grantd run --protocol ciba (D16): the project's own CLI through OpenID CIBA ---------------------


@pytest.mark.slow
def test_run_through_ciba_waits_for_the_decision_and_runs(server, target, cli):
    argv = ["id", "-u"]
    proc = cli.popen("run", "--protocol", "ciba", "--as", "root", "--message", "ciba dogfood", "--", *argv)
    grant = pending_grant(server, cli.email, argv, proc=proc)
    assert grant["request"]["binding_message"] == "ciba dogfood"
    assert grant["request"]["cnf"]["jkt"]  # asked with a DPoP proof: the grant is bound to the key
    decide(server, grant["id"])
    code, out, err = finish(proc)
    assert code == 0, err
    assert out == "0\n"
    assert server_grant(server, grant["id"])["status"] == "consumed"


def test_the_cli_works_where_dpop_and_server_nonces_are_required(server_factory, tmp_path):
    """`agent_dpop = "required"` with `dpop_nonce = true`: the CLI's login retries with the server's
    nonce, its token is bound, and its calls carry proofs (a grant request and its status)."""
    strict = server_factory("strict", extra='[tokens]\nagent_dpop = "required"\ndpop_nonce = true\n').start()
    cli = new_agent(strict, tmp_path / "home", None)
    assert cli.state()["token_type"] == "DPoP"
    asked = cli.run("grant", "request", "--audience", "grantd", "--host", HOST, "--json", "--", "true")
    assert asked.returncode == 75, asked.stderr
    grant_id = json.loads(asked.stdout)["id"]
    status = cli.run("grant", "status", grant_id, "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["status"] == "pending", status.stderr
    # the same CLI without DPoP is refused there
    off = cli.run(
        "agent",
        "login",
        "--idp",
        strict.url,
        "--key",
        str(cli.key),
        "--email",
        cli.email,
        env={"GRANTD_AGENT_DPOP": "off"},
    )
    assert off.returncode != 0 and "dpop" in off.stderr.lower()

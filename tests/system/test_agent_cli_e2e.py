"""Issue 4 end to end: `grantd agent`, `grantd grant`, `grantd run` and `grantd elevate` as real
processes against a real grantd server, as root on the test machine.

The agent's state lives in a temporary HOME/XDG_CONFIG_HOME. `grantd run` hands the AuthZ-JWT to
`grantd elevate` exactly as it does in production: as root it execs `grantd elevate --grant-fd N`
with the token in a pipe; with GRANTD_ELEVATE_COMMAND (how a sudo setup is named) it starts that
command with `--grant-file FIFO`. Elevate reads the target's config (GRANTD_ELEVATE_CONFIG) that
trusts the server's issuer and its management identity as approver. The test plays the approver
over the HTTP API with the management token while the CLI waits.
"""

from __future__ import annotations

import base64
import grp
import json
import os
import pwd
import re
import stat
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from conftest import GRANTD, ROOT, Server, free_port, unique_email
from elevate_support import APPROVER, HOST, Target, attempts, elevate, error_line, exits, make_target

# End-to-end through real CLI subprocesses and sudo/elevate as root: the slow tier (CI runs it).
pytestmark = pytest.mark.slow

JWT = re.compile(r"eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


# -- the agent's side as a user would drive it ------------------------------------------------------


@dataclass
class Cli:
    """One agent's HOME with its grantd config dir, driving `python -m grantd` subprocesses."""

    server: Server
    home: Path
    email: str
    env: dict[str, str]

    @property
    def config_dir(self) -> Path:
        return self.home / ".config" / "grantd"

    @property
    def key(self) -> Path:
        return self.config_dir / "agent_ed25519"

    def state(self) -> dict[str, Any]:
        return dict(json.loads((self.config_dir / "agent.json").read_text()))

    def run(
        self, *args: str, timeout: float = 60, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*GRANTD, *args],
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd="/",
        )

    def popen(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*GRANTD, *args],
            env={**self.env, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd="/",
        )


def cli_env(home: Path, target: Target | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRANTD_", "PYTEST", "XDG_", "SUDO_"))}
    env.update({"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "PYTHONPATH": str(ROOT)})
    if target is not None:
        env["GRANTD_ELEVATE_CONFIG"] = str(target.config)
    return env


def enroll_key(server: Server, email: str, public_key: str) -> dict[str, Any]:
    with server.admin() as http:
        r = http.post(
            "/api/agent/enroll", json={"email": email, "name": "e2e agent", "publicKey": public_key}
        )
    assert r.status_code == 201, r.text
    return dict(r.json())


def new_agent(server: Server, home: Path, target: Target | None) -> Cli:
    """keygen with the CLI, enrolment by the admin over HTTP, login with the CLI."""
    home.mkdir(parents=True, exist_ok=True)
    cli = Cli(server, home, unique_email("e2e"), cli_env(home, target))
    made = cli.run("agent", "keygen", "--comment", cli.email, "--json")
    assert made.returncode == 0, made.stderr
    enroll_key(server, cli.email, json.loads(made.stdout)["public_key"])
    login = cli.run("agent", "login", "--idp", server.url, "--key", str(cli.key), "--email", cli.email)
    assert login.returncode == 0, login.stderr
    return cli


@pytest.fixture(scope="module")
def target(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Target:
    """This host as a grantd target: trusts the server's issuer and its management identity."""
    return make_target(tmp_path_factory.mktemp("target"), [server.url], allowed_approvers=[APPROVER])


@pytest.fixture(scope="module")
def cli(server: Server, target: Target, tmp_path_factory: pytest.TempPathFactory) -> Cli:
    return new_agent(server, tmp_path_factory.mktemp("agent-home"), target)


# -- the approver's side: the management token over HTTP --------------------------------------------


def pending_grant(
    server: Server,
    requester: str,
    argv: list[str],
    *,
    proc: subprocess.Popen[str] | None = None,
    timeout: float = 45,
) -> dict[str, Any]:
    """Wait until the requester's pending grant for argv shows up in GET /api/grants?status=pending."""
    deadline = time.monotonic() + timeout
    with server.admin() as http:
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                out, err = proc.communicate()
                raise AssertionError(
                    f"the CLI ended ({proc.returncode}) before its grant was pending:\n{out}\n{err}"
                )
            r = http.get("/api/grants", params={"status": "pending", "requester": requester, "limit": 100})
            assert r.status_code == 200, r.text
            for grant in r.json()["data"]:
                if grant["request"].get("command") == argv:
                    return dict(grant)
            time.sleep(0.1)
    raise AssertionError(f"no pending grant for {argv} by {requester}")


def decide(
    server: Server, grant_id: str, action: str = "approve", body: dict[str, Any] | None = None
) -> dict[str, Any]:
    with server.admin() as http:
        r = http.post(f"/api/grants/{grant_id}/{action}", json=body or {})
    assert r.status_code == 200, r.text
    return dict(r.json())


def server_grant(server: Server, grant_id: str) -> dict[str, Any]:
    with server.admin() as http:
        r = http.get(f"/api/grants/{grant_id}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def grants_for(server: Server, requester: str, argv: list[str]) -> list[dict[str, Any]]:
    with server.admin() as http:
        r = http.get("/api/grants", params={"requester": requester, "limit": 100})
    assert r.status_code == 200, r.text
    return [g for g in r.json()["data"] if g["request"].get("command") == argv]


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"the CLI did not finish:\n{out}\n{err}") from None
    return proc.returncode, out, err


def claims_of(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def bound_line(cli: Any, token: str) -> str:
    """The `{authz_jwt, dpop}` line with a fresh proof by the agent's key for the grant's consume URL."""
    from cryptography.hazmat.primitives import serialization

    from grantd.dpop import make_proof

    claims = claims_of(token)
    key = serialization.load_ssh_private_key(cli.key.read_bytes(), password=None)
    url = f"{claims['iss']}/api/grants/{claims['grant_id']}/consume"
    proof = make_proof(
        key, method="POST", url=url, iat=int(time.time()), jti=uuid.uuid4().hex, access_token=token
    )
    return json.dumps({"authz_jwt": token, "dpop": proof})


# -- 1. the whole flow -----------------------------------------------------------------------------


def test_keygen_login_and_run_as_root_after_approval_prints_0(server, target, cli):
    # The key: OpenSSH format, 0600, readable by the real ssh-keygen and matching the .pub line.
    assert cli.key.read_bytes().startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----")
    assert stat.S_IMODE(cli.key.stat().st_mode) == 0o600
    derived = subprocess.run(
        ["ssh-keygen", "-y", "-f", str(cli.key)], capture_output=True, text=True, check=True
    )
    assert derived.stdout.split()[:2] == cli.key.with_name("agent_ed25519.pub").read_text().split()[:2]
    # The login: token cached 0600 in a private config dir.
    token_file = cli.config_dir / "agent.json"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(cli.config_dir.stat().st_mode) == 0o700
    state = cli.state()
    assert state["idp"] == server.url and state["email"] == cli.email and JWT.fullmatch(state["token"])
    assert state["expires_at"] > time.time() + 60

    argv = ["id", "-u"]
    proc = cli.popen("run", "--as", "root", "--wait", "--", *argv)
    grant = pending_grant(server, cli.email, argv, proc=proc)
    assert grant["request"]["run_as"] == "root" and grant["request"]["target_host"] == HOST
    assert grant["request"]["audience"] == "grantd" and grant["request"]["grant_type"] == "once"
    decide(server, grant["id"])
    code, out, err = finish(proc)
    assert code == 0, err
    assert out == "0\n"
    assert f"{server.url}/grant-approval?grant_id={grant['id']}" in err
    assert f"approved by {APPROVER}" in err
    # Elevate consumed the once grant at the issuer and wrote its audit line.
    after = server_grant(server, grant["id"])
    assert after["status"] == "consumed" and after["used_at"]
    line = [a for a in attempts(target) if a["grant_id"] == grant["id"]]
    assert len(line) == 1 and line[0]["result"] == "allowed" and line[0]["uid"] == 0
    assert line[0]["agent"] == cli.email and line[0]["decided_by"] == APPROVER and line[0]["command"] == argv
    ended = [a for a in exits(target) if a["grant_id"] == grant["id"]]
    assert len(ended) == 1 and ended[0]["status"] == 0  # and how it ended


# -- 2. a once grant runs one time ------------------------------------------------------------------


def test_a_once_grant_used_again_is_refused_with_exit_5_already_consumed(server, target, cli):
    argv = ["echo", "once", uuid.uuid4().hex[:8]]
    asked = cli.run("grant", "request", "--audience", "grantd", "--host", HOST, "--json", "--", *argv)
    assert asked.returncode == 75, asked.stderr
    grant_id = json.loads(asked.stdout)["id"]
    decide(server, grant_id)
    fetched = cli.run("grant", "token", grant_id, "--json")
    assert fetched.returncode == 0, fetched.stderr
    answer = json.loads(fetched.stdout)
    token = answer["authz_jwt"]
    # grantd's own CLI asks for DPoP-bound tokens (D16): the AuthZ-JWT is bound to the agent's key,
    # and the bare JWT (a copy from a log) runs nothing
    assert claims_of(token)["cnf"]["jkt"]
    bare = elevate(target, argv, token=token, via="fd")
    assert bare.returncode == 5 and error_line(bare)["error"] == "dpop_required", bare.stderr

    first = elevate(target, argv, token=json.dumps({"authz_jwt": token, "dpop": answer["dpop"]}), via="fd")
    assert first.returncode == 0, first.stderr
    assert first.stdout == " ".join(argv[1:]) + "\n"
    again = elevate(
        target, argv, token=bound_line(cli, token), via="fd"
    )  # a fresh proof: only the grant is used
    assert again.returncode == 5, again.stderr
    line = error_line(again)
    assert line == {"error": "already_consumed", "reason": "grant already consumed"}
    assert again.stdout == ""
    results = [a["result"] for a in attempts(target) if a["grant_id"] == grant_id]
    assert results == ["refused", "allowed", "refused"]  # the bare JWT, its line, a second use
    # The CLI says so too, instead of handing out a token for a used grant.
    late = cli.run("grant", "token", grant_id)
    assert late.returncode == 1
    assert (
        late.stderr
        == f"grantd: grant {grant_id} was already consumed (a once grant runs one time): request a new one\n"
    )


# -- 3. --as another user ---------------------------------------------------------------------------


@pytest.fixture
def test_user() -> Iterator[pwd.struct_passwd]:
    suffix = uuid.uuid4().hex[:6]
    group, name = f"gde{suffix}", f"gdeu{suffix}"
    subprocess.run(["groupadd", group], check=True)
    subprocess.run(["useradd", "-M", "-s", "/bin/sh", "-G", group, name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False)
        subprocess.run(["groupdel", group], check=False)
        subprocess.run(["groupdel", name], check=False, capture_output=True)


def test_run_as_a_user_gets_that_users_uid_and_groups(server, target, cli, test_user):
    argv = ["sh", "-c", "id -u; id -G"]
    proc = cli.popen("run", "--as", test_user.pw_name, "--wait", "--", *argv)
    grant = pending_grant(server, cli.email, argv, proc=proc)
    assert grant["request"]["run_as"] == test_user.pw_name
    decide(server, grant["id"])
    code, out, err = finish(proc)
    assert code == 0, err
    uid, groups = out.splitlines()
    expected = {g.gr_gid for g in grp.getgrall() if test_user.pw_name in g.gr_mem} | {test_user.pw_gid}
    assert len(expected) == 2  # the primary group and the supplementary one the test made
    assert int(uid) == test_user.pw_uid
    assert {int(g) for g in groups.split()} == expected


# -- 4. the token never shows in the process list ---------------------------------------------------


def _cmdlines() -> dict[int, str]:
    found: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                    found[int(entry.name)] = fh.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                pass
    return found


class ProcessWatch(threading.Thread):
    """Samples every process's command line until stopped; remembers what it saw."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.seen: dict[int, set[str]] = {}

    def run(self) -> None:
        while not self.stop.is_set():
            for pid, line in _cmdlines().items():
                self.seen.setdefault(pid, set()).add(line)
            time.sleep(0.02)

    def all_lines(self) -> set[str]:
        return {line for lines in self.seen.values() for line in lines}


@pytest.fixture
def fifo_elevate(tmp_path: Path) -> str:
    """An elevation command as a sudo setup would name it (GRANTD_ELEVATE_COMMAND): run through it,
    `grantd run` starts it as a child and writes the token into a FIFO (`--grant-file`)."""
    wrapper = tmp_path / "grantd-elevate-wrapper"
    wrapper.write_text(f'#!/bin/sh\nexec {GRANTD[0]} -I -m grantd "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.mark.parametrize("hand_off", ["pipe", "fifo"])
def test_tokens_never_appear_in_the_process_list(server, target, cli, hand_off, request):
    env = {"GRANTD_ELEVATE_COMMAND": request.getfixturevalue("fifo_elevate")} if hand_off == "fifo" else {}
    argv = ["sleep", "1.5"]
    identity = cli.state()["token"]
    watch = ProcessWatch()
    watch.start()
    try:
        proc = cli.popen("run", "--wait", "--", *argv, env=env)
        grant = pending_grant(server, cli.email, argv, proc=proc)
        deadline = time.monotonic() + 20  # sampled while the CLI waits for the decision
        while not any(" run --wait -- sleep 1.5" in line for line in watch.seen.get(proc.pid, set())):
            assert time.monotonic() < deadline, watch.seen.get(proc.pid)
            time.sleep(0.05)
        assert proc.poll() is None
        decide(server, grant["id"])
        code, _, err = finish(proc)
    finally:
        watch.stop.set()
        watch.join()
    assert code == 0, err
    # The command itself was seen running (so the sampling covered elevate and the command).
    assert any(line.strip() == "sleep 1.5" for line in watch.all_lines())
    if hand_off == "pipe":
        assert any("elevate --grant-fd" in line for line in watch.seen.get(proc.pid, set()))
    else:
        assert any("elevate --grant-file" in line for line in watch.all_lines())
    for line in watch.all_lines():
        assert identity not in line and identity.split(".")[2] not in line
        for token in JWT.findall(line):  # other people's processes may hold JWTs; ours must not
            claims = claims_of(token)
            assert claims.get("grant_id") != grant["id"] and claims.get("sub") != cli.email, line
    assert server_grant(server, grant["id"])["status"] == "consumed"


# -- 5. without --wait ------------------------------------------------------------------------------


def test_without_wait_run_exits_75_and_says_where_to_decide(server, cli):
    argv = ["echo", "later", uuid.uuid4().hex[:8]]
    result = cli.run("run", "--", *argv)
    assert result.returncode == 75, result.stderr
    grant = pending_grant(server, cli.email, argv)
    assert "grantd tui" in result.stderr
    assert f"{server.url}/grant-approval?grant_id={grant['id']}" in result.stderr
    assert f"grantd grant wait {grant['id']}" in result.stderr

    as_json = cli.run("run", "--json", "--", *argv)
    assert as_json.returncode == 75, as_json.stderr
    answer = json.loads(as_json.stdout)
    assert answer["status"] == "pending" and answer["exit_code"] == 75
    assert answer["approval_url"] == f"{server.url}/grant-approval?grant_id={answer['id']}"
    for g in grants_for(server, cli.email, argv):
        decide(server, g["id"], "revoke")


# -- 6. denial -------------------------------------------------------------------------------------


def test_a_denied_grant_is_reported_with_who_denied_it(server, cli):
    argv = ["echo", "denied", uuid.uuid4().hex[:8]]
    proc = cli.popen("run", "--wait", "--", *argv)
    grant = pending_grant(server, cli.email, argv, proc=proc)
    decide(server, grant["id"], "deny", {"reason": "not during the freeze"})
    code, out, err = finish(proc)
    assert code == 1 and out == ""
    assert f"grant {grant['id']} was denied by {APPROVER}: not during the freeze" in err


def test_grant_wait_follows_the_decision_and_reports_a_denial(server, cli):
    argv = ["echo", "wait-deny", uuid.uuid4().hex[:8]]
    asked = cli.run("grant", "request", "--audience", "grantd", "--host", HOST, "--json", "--", *argv)
    assert asked.returncode == 75, asked.stderr
    grant_id = json.loads(asked.stdout)["id"]
    waiting = cli.popen("grant", "wait", grant_id, "--json")
    time.sleep(0.5)
    assert waiting.poll() is None  # still waiting for a human
    decide(server, grant_id, "deny", {"reason": "ask the DBA"})
    code, out, err = finish(waiting)
    assert code == 1
    assert json.loads(out)["status"] == "denied"
    error = json.loads(err.strip().splitlines()[-1])
    assert error["error"] == "denied" and error["grant"]["decided_by"] == APPROVER
    assert error["message"] == f"grant {grant_id} was denied by {APPROVER}: ask the DBA"
    readable = cli.run("grant", "wait", grant_id)
    assert readable.returncode == 1 and f"denied by {APPROVER}" in readable.stderr


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

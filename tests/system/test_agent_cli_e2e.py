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

from conftest import GRANTD, ROOT, Server, unique_email
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

"""Issue 20: what a newcomer and an operator meet in their first hour (D18).

Real `grantd serve` processes on free ports and the real `grantd` CLI as subprocesses. The server
here is reached by the agent at 127.0.0.1 while its issuer is ``http://localhost:PORT``, the
situation of the README (``--idp http://127.0.0.1:8000`` against ``scripts/serve``'s localhost
issuer), where a link on the address the agent used leads to "This is an invalid domain".
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import GRANTD, ROOT, Server, make_server, unique_email

HOST = "web-1"


@pytest.fixture(scope="module")
def localhost_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose issuer is http://localhost:PORT; the tests reach it at http://127.0.0.1:PORT."""
    srv = make_server(tmp_path_factory.mktemp("newcomer"))
    config = srv.config_path.read_text()
    srv.config_path.write_text(
        config.replace("[server]\n", f'[server]\nissuer = "http://localhost:{srv.port}"\n', 1)
    )
    srv.start()
    yield srv
    srv.stop()


def issuer_of(srv: Server) -> str:
    return f"http://localhost:{srv.port}"


def cli_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRANTD_", "PYTEST", "XDG_", "SUDO_"))}
    env.update({"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "PYTHONPATH": str(ROOT)})
    return env


class Agent:
    def __init__(self, srv: Server, home: Path):
        self.srv, self.home, self.email = srv, home, unique_email("newcomer")
        self.env = cli_env(home)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*GRANTD, *args], env=self.env, capture_output=True, text=True, timeout=60, cwd="/"
        )


@pytest.fixture(scope="module")
def agent(localhost_server: Server, tmp_path_factory: pytest.TempPathFactory) -> Agent:
    """Logged in at http://127.0.0.1:PORT, the address the README's agent uses."""
    a = Agent(localhost_server, tmp_path_factory.mktemp("agent-home"))
    made = a.run("agent", "keygen", "--comment", a.email, "--json")
    assert made.returncode == 0, made.stderr
    with localhost_server.admin() as http:
        r = http.post(
            "/api/agent/enroll",
            json={"email": a.email, "name": "newcomer", "publicKey": json.loads(made.stdout)["public_key"]},
        )
        assert r.status_code == 201, r.text
    login = a.run("agent", "login", "--idp", localhost_server.url, "--email", a.email)
    assert login.returncode == 0, login.stderr
    return a


def approve(srv: Server, grant_id: str) -> dict[str, Any]:
    with srv.admin() as http:
        r = http.post(f"/api/grants/{grant_id}/approve", json={})
    assert r.status_code == 200, r.text
    return dict(r.json())


# -- item 1: links on the issuer --------------------------------------------------------------------


def test_run_prints_the_approval_link_on_the_issuer_not_on_the_address_it_used(localhost_server, agent):
    argv = ["echo", "issuer", uuid.uuid4().hex[:8]]
    result = agent.run("run", "--", *argv)
    assert result.returncode == 75, result.stderr
    link = re.search(r"(http://\S+)/grant-approval\?grant_id=(\S+)", result.stderr)
    assert link is not None, result.stderr
    assert link[1] == issuer_of(localhost_server)  # not http://127.0.0.1:PORT, where passkeys fail
    assert localhost_server.url not in result.stderr
    # a once grant is never reused by a new run: the hint says how to run this one (not "run again")
    gid = link[2]
    assert f"grantd grant token {gid} | " in result.stderr and "--grant-stdin -- echo issuer" in result.stderr
    assert "--wait" in result.stderr and "run again" not in result.stderr

    as_json = agent.run("run", "--json", "--", *argv)
    assert as_json.returncode == 75, as_json.stderr
    answer = json.loads(as_json.stdout)
    assert answer["approval_url"] == f"{issuer_of(localhost_server)}/grant-approval?grant_id={answer['id']}"

    asked = agent.run("grant", "request", "--audience", "grantd", "--host", HOST, "--", *argv)
    assert (
        asked.returncode == 75 and f"{issuer_of(localhost_server)}/grant-approval?grant_id=" in asked.stderr
    )
    who = json.loads(agent.run("agent", "whoami", "--json").stdout)
    assert who["idp"] == localhost_server.url and who["issuer"] == issuer_of(localhost_server)


def test_a_state_file_from_before_knows_the_issuer_from_its_token(localhost_server, agent):
    """agent.json written by an older grantd has no `issuer`: it is read from the cached token."""
    path = agent.home / ".config" / "grantd" / "agent.json"
    state = json.loads(path.read_text())
    state.pop("issuer", None)
    path.write_text(json.dumps(state))
    result = agent.run("run", "--", "echo", "old-state", uuid.uuid4().hex[:8])
    assert result.returncode == 75, result.stderr
    assert f"{issuer_of(localhost_server)}/grant-approval?grant_id=" in result.stderr


def test_login_at_another_address_of_the_server_points_to_the_issuer(localhost_server):
    issuer = issuer_of(localhost_server)
    r = httpx.get(f"{localhost_server.url}/login", params={"next": "/grants?status=pending"})
    assert r.status_code == 200
    assert "data-elsewhere" in r.text
    assert f'href="{issuer}/login?next=/grants%3Fstatus%3Dpending"' in r.text
    at_issuer = httpx.get(
        f"{localhost_server.url}/login", headers={"Host": f"localhost:{localhost_server.port}"}
    )
    assert at_issuer.status_code == 200 and "data-elsewhere" not in at_issuer.text
    same_case = httpx.get(
        f"{localhost_server.url}/login", headers={"Host": f"LocalHost:{localhost_server.port}"}
    )
    assert "data-elsewhere" not in same_case.text


def test_registration_links_printed_by_the_cli_are_on_the_issuer(localhost_server):
    added = localhost_server.grantd(
        "users", "add", unique_email("person"), "--config", str(localhost_server.config_path)
    )
    assert f"{issuer_of(localhost_server)}/register?token=" in added.stdout + added.stderr


# -- item 10: the smaller ones ------------------------------------------------------------------------


def test_a_timed_run_reuses_an_approved_grant_without_duration(localhost_server, agent):
    argv = ["echo", "timed", uuid.uuid4().hex[:8]]
    fresh = agent.run(
        "grant", "request", "--audience", "grantd", "--host", HOST, "--type", "timed", "--json", "--", *argv
    )
    assert fresh.returncode == 2, fresh.stderr  # a new timed grant still needs its duration
    assert "--duration" in json.loads(fresh.stderr)["message"]
    asked = agent.run(
        "grant",
        "request",
        "--audience",
        "grantd",
        "--host",
        HOST,
        "--type",
        "timed",
        "--duration",
        "1h",
        "--json",
        "--",
        *argv,
    )
    assert asked.returncode == 75, asked.stderr
    grant_id = json.loads(asked.stdout)["id"]
    approve(localhost_server, grant_id)
    again = agent.run(
        "grant", "request", "--audience", "grantd", "--host", HOST, "--type", "timed", "--json", "--", *argv
    )
    assert again.returncode == 0, again.stderr
    reused = json.loads(again.stdout)
    assert reused["id"] == grant_id and reused["reused"] is True and reused["status"] == "approved"


def test_a_bogus_registration_link_says_so_before_any_click(localhost_server):
    r = httpx.get(f"{localhost_server.url}/register", params={"token": "bogus"})
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
    assert "This registration link is not valid" in r.text
    assert 'data-action="register"' not in r.text  # no form to click


# -- item 5: trying grantd elevate without writing to /etc -------------------------------------------


def test_run_names_what_is_missing_to_reach_elevate_before_asking_anyone(localhost_server, agent):
    argv = ["echo", "no-elevate", uuid.uuid4().hex[:8]]
    result = agent.run("run", "--elevate-command", "/nonexistent/grantd", "--", *argv)
    assert result.returncode == 1
    assert "cannot run grantd elevate: /nonexistent/grantd not found" in result.stderr
    assert "--elevate-command" in result.stderr and "GRANTD_ELEVATE_COMMAND" in result.stderr
    with localhost_server.admin() as http:
        mine = http.get("/api/grants", params={"requester": agent.email, "limit": 100}).json()["data"]
    assert not [g for g in mine if g["request"].get("command") == argv]  # nobody was asked


def test_the_sudo_path_of_a_source_checkout_is_named_when_it_is_missing():
    from grantd.agent.run import elevate_missing

    said = elevate_missing(["sudo", "-n", "/nonexistent/bin/grantd"])
    assert said is not None
    assert "reached through `sudo -n /nonexistent/bin/grantd elevate`" in said and "does not exist" in said
    assert "--elevate-command" in said and "packaging/install" in said
    assert (
        elevate_missing(["sudo", "-n", "/bin/sh"]) is None
    )  # sudo (scripts/bootstrap test installs it) and the program
    assert "names no program after sudo" in str(elevate_missing(["sudo", "-n"]))
    assert "no-such-program-grantd not found" in str(elevate_missing(["no-such-program-grantd"]))


def test_run_hands_its_elevate_config_to_elevate(server, tmp_path):
    """`grantd run --elevate-config FILE` (or GRANTD_ELEVATE_CONFIG): elevate reads FILE, so trying
    the whole path needs no /etc/grantd/elevate.toml (as root, grantd run starts elevate itself)."""
    from elevate_support import make_target

    target = make_target(tmp_path / "target", [server.url])
    a = Agent(server, tmp_path / "home")
    made = a.run("agent", "keygen", "--comment", a.email, "--json")
    with server.admin() as http:
        assert (
            http.post(
                "/api/agent/enroll",
                json={
                    "email": a.email,
                    "name": "newcomer",
                    "publicKey": json.loads(made.stdout)["public_key"],
                },
            ).status_code
            == 201
        )
    assert a.run("agent", "login", "--idp", server.url, "--email", a.email).returncode == 0
    argv = ["echo", "elevated", uuid.uuid4().hex[:8]]
    asked = a.run(
        "grant",
        "request",
        "--audience",
        "grantd",
        "--host",
        socket.gethostname(),
        "--type",
        "always",
        "--json",
        "--",
        *argv,
    )
    approve(server, json.loads(asked.stdout)["id"])
    ran = a.run("run", "--type", "always", "--elevate-config", str(target.config), "--", *argv)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == " ".join(argv[1:]) + "\n"
    assert json.loads(target.audit_log.read_text().splitlines()[0])["result"] == "allowed"
    a.env["GRANTD_ELEVATE_CONFIG"] = str(tmp_path / "no-such-elevate.toml")
    refused = a.run("run", "--type", "always", "--", *argv)
    assert refused.returncode == 1 and "no-such-elevate.toml" in refused.stderr, refused.stderr


# -- item 10: JWKS (and every route) answer 503, not 500, while PostgreSQL is down ---------------------


@pytest.mark.slow  # starts a PostgreSQL server of its own
def test_jwks_says_503_while_postgresql_is_down(tmp_path):
    from support import postgres as pg

    pg.require()
    database = pg.Postgres().start()
    srv = None
    try:
        dsn = database.create_database()
        (tmp_path / "srv").mkdir()
        (tmp_path / "srv" / "dsn").write_text(dsn)
        srv = make_server(tmp_path / "srv", storage='plugin = "postgres"\ndsn = "file:dsn"')
        srv.start()
        assert httpx.get(f"{srv.url}/.well-known/jwks.json").status_code == 200
        pg_ctl = pg.find_bin("pg_ctl")
        assert pg_ctl
        database._run([pg_ctl, "-D", str(database.data), "-m", "immediate", "-w", "stop"], timeout=60)
        database.started = False
        assert httpx.get(f"{srv.url}/readyz").status_code == 503
        for path in ("/.well-known/jwks.json", "/api/grants"):
            r = httpx.get(f"{srv.url}{path}", headers={"Authorization": f"Bearer {srv.token}"}, timeout=30)
            assert r.status_code == 503, (path, r.status_code, r.text)
            assert r.headers["content-type"].startswith("application/problem+json")
            assert (
                r.json()["detail"] == "database unreachable; retry later" and r.headers["retry-after"] == "5"
            )
    finally:
        if srv is not None:
            srv.stop()
        database.stop()


def test_an_unknown_route_is_a_page_for_a_browser_and_problem_json_for_the_api(localhost_server):
    browser = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
    r = httpx.get(f"{localhost_server.url}/no-such-page", headers=browser)
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
    assert "There is no page at this address." in r.text and "<html" in r.text.lower()
    assert r.headers["content-security-policy"].startswith("default-src 'self'")
    for path, headers in (("/no-such-page", {"Accept": "*/*"}), ("/api/no-such-route", browser)):
        r = httpx.get(f"{localhost_server.url}{path}", headers=headers)
        assert r.status_code == 404 and r.headers["content-type"].startswith("application/problem+json"), path
        assert r.json()["detail"] == "no such route"


@pytest.mark.parametrize("workers", [1, 2])
def test_every_line_of_a_json_logging_server_is_json(tmp_path, workers):
    srv = make_server(tmp_path / "srv", log_format="json", workers=workers)
    config = srv.config_path.read_text().replace(
        'management_token = "file:management-token"', f'management_token = "{srv.token}"'
    )  # inline: a warning
    srv.config_path.write_text(config)
    srv.start()
    with httpx.Client(base_url=srv.url) as http:
        http.get("/readyz")
        http.get("/no-such-route")
    srv.stop()
    lines = [line for line in srv.log().splitlines() if line.strip()]
    not_json = []
    for line in lines:
        try:
            assert isinstance(json.loads(line), dict)
        except (ValueError, AssertionError):
            not_json.append(line)
    assert not not_json, "\n".join(not_json)
    entries = [json.loads(line) for line in lines]
    assert any(
        e.get("event") == "config_warning" and e["level"] == "warning" and "inline" in e["message"]
        for e in entries
    )
    assert any(
        e.get("event") == "banner" and e["message"].startswith("serving http://127.0.0.1:") for e in entries
    )


@pytest.mark.slow
def test_every_command_says_what_it_does_in_its_help():
    import sys

    from grantd.cli import COMMANDS

    for name in COMMANDS:
        shown = subprocess.run(
            [sys.executable, "-m", "grantd", name, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert shown.returncode == 0, (name, shown.stderr)
        text = shown.stdout.split("\n\n")
        assert text[0].startswith("usage: grantd"), (name, shown.stdout)
        description = text[1].strip() if len(text) > 1 else ""
        assert description and not description.startswith(("options:", "positional arguments:")), (
            name,
            shown.stdout,
        )
    serve = subprocess.run(
        [sys.executable, "-m", "grantd", "serve", "--help"], capture_output=True, text=True, timeout=60
    )
    assert "SIGTERM" in serve.stdout and "admin@localhost" in serve.stdout


def test_every_markdown_file_the_docs_name_is_in_the_repository():
    """The docs cited a `machine-limits.md` that is not in the repository (issue 20 item 10)."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = re.compile(r"(?<![\w/.-])((?:docs/)?[A-Za-z0-9_-]+\.md)\b")
    missing = []
    for doc in docs:
        for name in set(named.findall(doc.read_text())):
            candidates = [ROOT / name, ROOT / "docs" / name, doc.parent / name]
            if not any(c.is_file() for c in candidates):
                missing.append(f"{doc.relative_to(ROOT)} names {name}")
    assert not missing, missing


# -- item 6: the operator's path in docs/operations.md ---------------------------------------------


def _operations_section() -> str:
    text = (ROOT / "docs" / "operations.md").read_text()
    start = text.index("\n## From an empty machine to an approved command on a second host\n")
    return text[start : text.index("\n## ", start + 1)]


def test_the_operator_paths_elevate_toml_is_accepted_by_elevate(tmp_path):
    """The target host's elevate.toml exactly as docs/operations.md writes it (its audit log moved
    into a temporary directory) passes `grantd elevate --check-config`."""
    import sys

    [block] = re.findall(r"```toml\n(.*?)```", _operations_section(), flags=re.S)
    audit = tmp_path / "log" / "elevate.log"
    config = tmp_path / "etc" / "elevate.toml"
    config.parent.mkdir()
    config.write_text(block.replace("/var/log/grantd/elevate.log", str(audit)))
    config.chmod(0o644)
    checked = subprocess.run(
        [sys.executable, "-m", "grantd", "elevate", "--config", str(config), "--check-config"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    shown = checked.stdout
    assert "https://idp.example.com" in shown and "alice@example.com" in shown, shown


def test_the_operator_paths_first_administrator_gets_a_link_on_the_issuer(tmp_path):
    """Step 1 and 2: `grantd config init`, the issuer set, `config validate`, then `grantd users add
    EMAIL --admin` prints the one-time registration link on the issuer, as the page shows it."""
    import sys

    grantd = [sys.executable, "-m", "grantd"]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GRANTD_")}, "PYTHONPATH": str(ROOT)}
    path = tmp_path / "grantd.toml"
    made = subprocess.run(
        [*grantd, "config", "init", "--path", str(path)], capture_output=True, text=True, env=env, timeout=60
    )
    assert made.returncode == 0, made.stderr
    text = path.read_text()
    text = re.sub(r"(?m)^issuer = .*$", 'issuer = "https://idp.example.com"', text)
    assert 'issuer = "https://idp.example.com"' in text
    path.write_text(text)
    checked = subprocess.run(
        [*grantd, "config", "validate", str(path)], capture_output=True, text=True, env=env, timeout=60
    )
    assert checked.returncode == 0, checked.stderr
    added = subprocess.run(
        [*grantd, "users", "add", "alice@example.com", "--admin", "--config", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=tmp_path,
    )
    assert added.returncode == 0, added.stderr
    lines = added.stdout.splitlines()
    assert lines[0] == "created administrator alice@example.com"
    assert lines[1] == "registration link for alice@example.com, single use, valid 24 h:"
    assert lines[2].strip().startswith("https://idp.example.com/register?token=")
    documented = _operations_section()
    assert "created administrator alice@example.com" in documented and lines[1] in documented


@pytest.mark.slow  # a fresh venv and about 50 wheels
def test_the_postgres_extra_installs_offline_as_the_readme_says(tmp_path):
    """README, Storage: `pip download -d wheels ".[postgres]" "setuptools>=68" wheel` where an index is
    reachable, then `pip install --no-index --find-links wheels ".[postgres]"` with no index and no
    pip configuration at all (PIP_CONFIG_FILE=/dev/null: not even this machine's local mirror)."""
    import sys

    readme = (ROOT / "README.md").read_text()
    assert 'pip download -d wheels ".[postgres]" "setuptools>=68" wheel' in readme
    assert 'pip install --no-index --find-links wheels ".[postgres]"' in readme
    online = tmp_path / "online"
    subprocess.run([sys.executable, "-m", "venv", str(online)], check=True, timeout=120)
    fetched = subprocess.run(
        [
            str(online / "bin" / "pip"),
            "download",
            "-q",
            "-d",
            str(tmp_path / "wheels"),
            ".[postgres]",
            "setuptools>=68",
            "wheel",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    offline = tmp_path / "offline"
    subprocess.run([sys.executable, "-m", "venv", str(offline)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    installed = subprocess.run(
        [
            str(offline / "bin" / "pip"),
            "install",
            "-q",
            "--no-index",
            "--find-links",
            str(tmp_path / "wheels"),
            ".[postgres]",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    works = subprocess.run(
        [str(offline / "bin" / "python"), "-c", "import psycopg, grantd.plugins.storage_postgres"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert works.returncode == 0, works.stderr

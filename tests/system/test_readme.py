"""The README's curl walk-throughs, pasted into bash exactly as written, against a fresh real server.

Every ```sh block of "Sign in an agent with curl and ssh-keygen" and "Grants: ask, decide, run"
runs, in order, in one bash (as a newcomer pasting them into one terminal would), in the server's
directory (where `management-token` is), with `GRANTD` pointing at the server. Each block's output
is checked, so the README cannot rot.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jwt
import pytest

from conftest import ROOT, Server, free_port, make_server

SECTIONS = ("Sign in an agent with curl and ssh-keygen", "Grants: ask, decide, run")
MARK = "@@README-BLOCK-END@@"

# curl and ssh-keygen are installed by scripts/bootstrap test


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def sh_blocks(title: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"^```sh\n(.*?)^```$", section(text, title), flags=re.S | re.M)


def json_lines(output: str) -> list[dict[str, Any]]:
    found = []
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("{"):
            found.append(json.loads(line))
    return found


@pytest.fixture(scope="module")
def walkthrough(tmp_path_factory: pytest.TempPathFactory) -> tuple[Server, list[str]]:
    server = make_server(tmp_path_factory.mktemp("readme")).start()
    try:
        blocks = [block for title in SECTIONS for block in sh_blocks(title)]
        script = "".join(f"{block}\necho {MARK}\n" for block in blocks)
        result = subprocess.run(
            ["bash"],  # not -e: a pasted block does not stop on an error either; the checks below do
            input=script,
            cwd=server.directory,
            env={**server.env, "GRANTD": server.url},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.stop()
    outputs = result.stdout.split(MARK + "\n")
    assert len(outputs) == len(blocks) + 1, (result.stdout, result.stderr)
    assert "command not found" not in result.stderr, result.stderr
    return server, outputs[:-1]


def test_the_sections_have_the_expected_blocks() -> None:
    assert len(sh_blocks(SECTIONS[0])) == 2
    assert len(sh_blocks(SECTIONS[1])) == 3
    for title in SECTIONS:
        for block in sh_blocks(title):
            # every URL goes through $GRANTD, so the port is one variable (scripts/serve --port)
            assert "http://127.0.0.1:8000/" not in block, block


def test_enrol(walkthrough: tuple[Server, list[str]]) -> None:
    server, outputs = walkthrough
    (enrolled,) = json_lines(outputs[0])
    assert enrolled["email"] == "agent+deploy@example.com"
    assert enrolled["agent_id"].startswith("agt_")
    assert enrolled["status"] == "active"
    assert (server.directory / "agent_key").exists()


def test_challenge_sign_authenticate_and_use_the_token(walkthrough: tuple[Server, list[str]]) -> None:
    server, outputs = walkthrough
    authn, me = json_lines(outputs[1])
    assert authn["email"] == "agent+deploy@example.com"
    assert authn["expires_in"] == 3600
    claims = jwt.decode(authn["token"], options={"verify_signature": False})
    assert claims["act"] == "agent" and claims["sub"] == "agent+deploy@example.com"
    assert "status" not in me, me  # not a 401 problem: the token was captured and used
    assert me["email"] == "agent+deploy@example.com"


def test_ask_and_approve(walkthrough: tuple[Server, list[str]]) -> None:
    _, outputs = walkthrough
    created, approved = json_lines(outputs[2])
    assert created["status"] == "pending"
    assert created["request"]["command"] == ["systemctl", "restart", "nginx"]
    assert created["request"]["cmd_hash"].startswith("sha256:")
    assert approved["grant"]["id"] == created["id"]
    assert approved["grant"]["status"] == "approved"
    assert approved["authz_jwt"].startswith("eyJ")


def test_token_verify_consume(walkthrough: tuple[Server, list[str]]) -> None:
    _, outputs = walkthrough
    token, verified, consumed, again = json_lines(outputs[3])
    assert token["authz_jwt"].startswith("eyJ")
    assert verified["valid"] is True
    assert verified["claims"]["command"] == ["systemctl", "restart", "nginx"]
    assert consumed == {"status": "consumed"} or consumed["status"] == "consumed"
    assert again["error"] == "already_consumed"


def test_deny_and_the_event_stream(walkthrough: tuple[Server, list[str]]) -> None:
    _, outputs = walkthrough
    output = outputs[4]
    denied = json_lines(output)[0]
    assert denied["grant"]["status"] == "denied"
    events = re.findall(r"^event: (\S+)$", output, flags=re.M)
    assert events == [
        "grant.created",
        "grant.reviewed",
        "grant.approved",
        "grant.consumed",
        "grant.created",
        "grant.reviewed",
        "grant.denied",
    ]
    assert re.search(r"^id: 1$", output, flags=re.M)


def test_the_two_commands_document_the_port_and_scripts_serve_passes_it_on() -> None:
    text = section((ROOT / "README.md").read_text(), "The two commands")
    assert "scripts/serve --port 8080" in text
    assert 'export PATH="$PWD/.venv/bin:$PATH"' in text
    serve = (ROOT / "scripts" / "serve").read_text()
    assert 'grantd serve "$@"' in serve  # every argument reaches grantd serve


def _banner(directory: Path, *args: str, path_env: str) -> str:
    """Start `grantd serve` as scripts/serve does (.venv/bin/grantd), read its banner, stop it."""
    program = Path(sys.executable).parent / "grantd"
    proc = subprocess.Popen(
        [str(program), "serve", *args],
        cwd=directory,
        env={**os.environ, "PATH": path_env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "decide grants live" in line:
                lines.append(proc.stderr.readline())
                break
    finally:
        proc.terminate()
        proc.wait(15)
    return "".join(lines)


def test_serve_banner_names_a_grantd_that_runs_and_follows_the_port(tmp_path: Path) -> None:
    program = Path(sys.executable).parent / "grantd"
    if not program.exists():
        raise AssertionError(f"no console script {program}: scripts/bootstrap installs grantd into .venv")
    port = free_port()
    first = _banner(tmp_path, "--port", str(port), path_env="/usr/bin:/bin")
    assert f"serving http://localhost:{port} " in first
    # grantd is not on PATH: the banner gives the full path and how to put it there
    assert (
        f"{program.absolute()} tui --config {tmp_path / 'grantd.toml'} --url http://localhost:{port} "
        "--management-token" in first
    )
    assert f'export PATH="{program.parent.absolute()}:$PATH"' in first
    # the next run on another port: the generated development issuer follows the port
    other = free_port()
    again = _banner(tmp_path, "--port", str(other), path_env=f"{program.parent}:/usr/bin:/bin")
    assert f"serving http://localhost:{other} " in again
    assert "grantd tui --config" in again and "not on PATH" not in again
    # the file still names the first port's issuer: the console is pointed at this run's
    assert f"--url http://localhost:{other} --management-token" in again

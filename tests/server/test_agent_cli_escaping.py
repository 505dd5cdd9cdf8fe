"""D18 / issue 19 item 8: everything the agent CLI prints from the server is escaped like the pages.

Real processes: `python -m grantd` subprocesses against a real grantd server (a grant whose argv,
reason and denial hold escape sequences, bidi overrides and blank characters), and against a hostile
HTTP server on a free port whose problem details and token carry ESC, BEL, CR and U+202E."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from grantd.core.display import is_hidden

from system.test_agent_cli_e2e import Cli, cli_env, decide, new_agent
from unit.test_display import BLANKS, HOMOGLYPH

TERMINAL = ("\x1b[2J\x1b[31m", "\x07", "\r", "\u202e", "\x9b")  # clear screen + red, BEL, CR, RLO, C1 CSI
NASTY_ARGV = ["printf", *TERMINAL, *BLANKS, HOMOGLYPH, "last"]


def assert_terminal_safe(output: str) -> None:
    """Nothing reaches the terminal raw: every character is a plain printable one (or a line break)."""
    for ch in output:
        assert ch == "\n" or (ch.isprintable() and not is_hidden(ch)), f"U+{ord(ch):04X} raw in {output!r}"


@pytest.fixture(scope="module")
def agent(server, tmp_path_factory: pytest.TempPathFactory) -> Cli:
    return new_agent(server, tmp_path_factory.mktemp("escaping-agent"), None)


def test_grant_status_list_and_denial_from_a_real_server_are_escaped(server, agent):
    reason = f"rotate\u3164logs\u2800{uuid.uuid4().hex[:6]}"  # free text may hold blanks: they must show
    asked = agent.run(
        "grant",
        "request",
        "--audience",
        "grantd",
        "--host",
        "web1",
        "--reason",
        reason,
        "--json",
        "--",
        *NASTY_ARGV,
    )
    assert asked.returncode == 75, asked.stderr
    grant_id = json.loads(asked.stdout)["id"]

    status = agent.run("grant", "status", grant_id)
    assert status.returncode == 0, status.stderr
    assert_terminal_safe(status.stdout)
    for escape in (
        "\\x1b[2J\\x1b[31m",
        "\\x07",
        "\\r",
        "\\u202e",
        "\\x9b",
        "\\u3164",
        "\\uffa0",
        "\\u2800",
        "\\u115f",
        "\\u1160",
        "\\ufe0f",
        "\\U000e0100",
        "\\u034f",
        HOMOGLYPH,
        "rotate\\u3164logs\\u2800",
    ):
        assert escape in status.stdout, (escape, status.stdout)

    listed = agent.run("grant", "list", "--status", "pending")
    assert listed.returncode == 0, listed.stderr
    assert grant_id in listed.stdout
    assert_terminal_safe(listed.stdout)

    decide(server, grant_id, "deny", {"reason": "no\u3164way\u2800"})
    waited = agent.run("grant", "wait", grant_id)
    assert waited.returncode == 1
    assert_terminal_safe(waited.stdout + waited.stderr)
    assert "no\\u3164way\\u2800" in waited.stderr, waited.stderr


# -- a hostile server -------------------------------------------------------------------------------

HOSTILE_DETAIL = "\x1b]0;owned\x07gone\rgrant ok \u202eexe.txt\u3164\u2800"
HOSTILE_TOKEN = "eyJ\x1b[2K\x1b[1Afake\u3164.\x07\r\u202e"


class _Hostile(BaseHTTPRequestHandler):
    def _send(self, status: int, body: dict[str, object], kind: str = "application/json") -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.startswith("/api/grants/"):
            self._send(
                404,
                {"type": "about:blank", "title": "Not Found", "status": 404, "detail": HOSTILE_DETAIL},
                "application/problem+json",
            )
        else:
            self._send(200, {"id": "g\x1b[8m", "status": "pending\x07", "request": {"command": ["x\r"]}})

    def do_POST(self) -> None:  # noqa: N802
        self._send(200, {"authz_jwt": HOSTILE_TOKEN})

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
        return


@pytest.fixture
def hostile() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _logged_in_home(home: Path, idp: str) -> dict[str, str]:
    (home / ".config" / "grantd").mkdir(parents=True)
    state = {
        "idp": idp,
        "email": "agent@example.com",
        "key_path": "",
        "agent_id": "a",
        "token": "t",
        "expires_at": int(time.time()) + 3600,
    }
    (home / ".config" / "grantd" / "agent.json").write_text(json.dumps(state))
    return cli_env(home)


def test_a_hostile_servers_error_and_token_reach_the_terminal_escaped(hostile, tmp_path):
    cli = Cli(None, tmp_path, "agent@example.com", _logged_in_home(tmp_path, hostile))  # type: ignore[arg-type]
    missing = cli.run("grant", "status", "some-id")
    assert missing.returncode == 1
    assert_terminal_safe(missing.stdout + missing.stderr)
    assert "\\x1b]0;owned\\x07gone\\rgrant ok \\u202eexe.txt\\u3164\\u2800" in missing.stderr, missing.stderr

    token = cli.run("grant", "token", "some-id")
    assert token.returncode == 0, token.stderr
    assert_terminal_safe(token.stdout)
    assert token.stdout.strip() == "eyJ\\x1b[2K\\x1b[1Afake\\u3164.\\x07\\r\\u202e"

    listed = cli.run("grant", "list")  # a list answer that is not a list: still nothing raw
    assert_terminal_safe(listed.stdout + listed.stderr)

"""Issue 21 part 4: the one client library (grantd.client) the agent CLI, the console and `grantd login` share.

- one problem reader: problem+json and OAuth errors read one way, the server's words escaped (D18), so
  `grantd login` no longer prints a hostile server's error description or issuer raw;
- one SSE decoder: events and heartbeats in order, for the console and the agent's waiter;
- one private-file rule: agent.json and session.json 0600, atomic, in a directory others cannot change.

Real parts: real httpx responses, a real hostile HTTP server on a free port, `python -m grantd` processes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from grantd.agent.state import State
from grantd.client.files import PrivateFileError, config_dir, private_directory, write_private
from grantd.client.problems import read_problem
from grantd.client.sse import SseComment, SseDecoder, SseEvent
from grantd.core.display import is_hidden

from conftest import GRANTD
from system.test_agent_cli_e2e import cli_env

HOSTILE = "\x1b]0;owned\x07gone\rsigned in \u202eexe.txt\u3164"
HOSTILE_SHOWN = "\\x1b]0;owned\\x07gone\\rsigned in \\u202eexe.txt\\u3164"


def assert_terminal_safe(output: str) -> None:
    for ch in output:
        assert ch == "\n" or (ch.isprintable() and not is_hidden(ch)), f"U+{ord(ch):04X} raw in {output!r}"


# -- the problem reader -------------------------------------------------------------------------------


def _answer(status: int, body: object | None = None, text: str | None = None) -> httpx.Response:
    if body is not None:
        return httpx.Response(status, json=body)
    return httpx.Response(status, text=text or "")


def test_a_problem_is_read_one_way_and_its_words_escaped():
    problem = read_problem(_answer(403, {"type": "about:blank", "title": "Forbidden", "detail": HOSTILE}))
    assert problem.detail == HOSTILE_SHOWN and problem.text == HOSTILE_SHOWN
    assert problem.error is None and problem.code == "http_403" and problem.status == 403

    oauth = read_problem(_answer(400, {"error": "invalid_grant\x1b[2J", "error_description": HOSTILE}))
    assert oauth.code == "invalid_grant\\x1b[2J" and oauth.detail == HOSTILE_SHOWN

    assert read_problem(_answer(400, {"error": "slow_down"})).detail == "slow_down"
    assert read_problem(_answer(400, {"title": "Bad Request", "message": "m"})).detail == "Bad Request"
    for answer in (
        _answer(502, text="<html>bad gateway</html>"),
        _answer(500, ["not", "an", "object"]),
        _answer(500, {"detail": 7, "error": ""}),
    ):
        problem = read_problem(answer)
        assert problem.detail is None and problem.error is None
        assert problem.text == f"HTTP {answer.status_code} {answer.reason_phrase}"


# -- the SSE decoder ------------------------------------------------------------------------------------


def test_the_decoder_reads_events_and_heartbeats_in_order():
    decoder = SseDecoder("4")
    lines = [
        ": heartbeat",
        "",
        "id: 5",
        "event: grant.approved",
        'data: {"grant":',
        'data: {"id": "g"}}',
        "",
        "id: 6",
        "",
        ":",
        "data: plain",
        "",
    ]
    assert list(decoder.read(lines)) == [
        SseComment("heartbeat"),
        SseEvent("grant.approved", '{"grant":\n{"id": "g"}}', "5"),
        SseComment(""),
        SseEvent(
            "message", "plain", "6"
        ),  # an id alone dispatches nothing but is what the next event carries
    ]
    assert decoder.last_event_id == "6"
    assert SseDecoder().feed_line(": heartbeat") is None  # the console's way: comments are not events


# -- `grantd login` against a hostile server ---------------------------------------------------------------


class _HostileIssuer(BaseHTTPRequestHandler):
    other_issuer = False

    def _send(self, status: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        issuer = f"{base}/\x1b[2J{HOSTILE}" if self.other_issuer else base
        self._send(
            200,
            {
                "issuer": issuer,
                "device_authorization_endpoint": f"{base}/device_authorization",
                "token_endpoint": f"{base}/token",
            },
        )

    def do_POST(self) -> None:  # noqa: N802
        self._send(400, {"error": "invalid_scope\x1b[31m", "error_description": HOSTILE})

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
        return


@pytest.fixture(params=[False, True], ids=["hostile-error", "hostile-issuer"])
def hostile_issuer(request: pytest.FixtureRequest) -> Iterator[tuple[str, bool]]:
    handler = type("Handler", (_HostileIssuer,), {"other_issuer": request.param})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", request.param
    httpd.shutdown()
    httpd.server_close()


def test_grantd_login_shows_a_hostile_servers_words_escaped(hostile_issuer, tmp_path):
    url, other_issuer = hostile_issuer
    result = subprocess.run(
        [*GRANTD, "login", "--url", url, "--session-file", str(tmp_path / "s" / "session.json")],
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert result.returncode == 1, result.stderr
    assert_terminal_safe(result.stdout + result.stderr)
    if other_issuer:
        assert "names another issuer" in result.stderr and HOSTILE_SHOWN in result.stderr, result.stderr
    else:
        assert f"invalid_scope\\x1b[31m: {HOSTILE_SHOWN}" in result.stderr, result.stderr
    assert not (tmp_path / "s" / "session.json").exists()


# -- private files -----------------------------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_agent_tightens_its_loosened_config_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    own = tmp_path / "grantd"
    own.mkdir()
    own.chmod(0o777)  # someone loosened ~/.config/grantd
    State(idp="https://idp.example", email="a@example.com", token="secret", expires_at=1).save()
    assert config_dir() == own
    assert _mode(own) == 0o700
    assert _mode(own / "agent.json") == 0o600
    assert json.loads((own / "agent.json").read_text())["token"] == "secret"
    assert sorted(p.name for p in own.iterdir()) == ["agent.json"]  # no temporary file left behind


def test_a_private_file_is_refused_in_a_directory_others_may_write(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # not sticky: another user could swap the file
    with pytest.raises(PrivateFileError, match="writable by others"):
        write_private(shared / "session.json", b"{}")
    assert list(shared.iterdir()) == []
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)  # like /tmp: others cannot replace our file
    write_private(sticky / "session.json", b"{}")
    assert _mode(sticky / "session.json") == 0o600
    assert _mode(private_directory(tmp_path / "new" / "dir")) == 0o700


def test_agent_keygen_refuses_to_write_a_key_where_others_may_swap_it(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    result = subprocess.run(
        [*GRANTD, "agent", "keygen", "--output", str(shared / "key"), "--comment", "a@example.com"],
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert result.returncode == 1, result.stdout
    assert "writable by others" in result.stderr
    assert not (shared / "key").exists()
    made = subprocess.run(
        [*GRANTD, "agent", "keygen", "--output", str(tmp_path / "keys" / "key"), "--json"],
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert made.returncode == 0, made.stderr
    assert _mode(tmp_path / "keys" / "key") == 0o600 and _mode(tmp_path / "keys") == 0o700
    assert os.path.exists(json.loads(made.stdout)["public_key_file"])

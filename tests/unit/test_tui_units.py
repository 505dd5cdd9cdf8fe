"""Pure parts of the approver console: argv escaping, the SSE decoder, the grant model, formatting."""

from __future__ import annotations

import pytest

from grantd.client.sse import SseDecoder
from grantd.core.display import describe_argv, escape_text, quote_arg, summarize_argv
from grantd.tui.format import age, duration, parse_duration
from grantd.tui.models import Grant

# -- escaping ---------------------------------------------------------------------------------------


def test_escape_sequences_and_newlines_are_shown_escaped() -> None:
    # A clear-line + colour sequence and a newline: raw, they would hide "rm -rf" in a terminal.
    argv = ["sh", "-c", "echo ok\n\x1b[2K\x1b[31mrm -rf /\x1b[0m"]
    lines = describe_argv(argv)
    assert lines == ['[0] "sh"', '[1] "-c"', '[2] "echo ok\\n\\x1b[2K\\x1b[31mrm -rf /\\x1b[0m"']
    for line in lines:
        assert "\x1b" not in line and "\n" not in line
    assert summarize_argv(argv) == 'sh -c "echo ok\\n\\x1b[2K\\x1b[31mrm -rf /\\x1b[0m"'


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("a\tb", "a\\tb"),
        ("a\r\nb", "a\\r\\nb"),
        ("\x00\x07\x08\x7f", "\\x00\\x07\\x08\\x7f"),
        ("\x9b31m", "\\x9b31m"),  # C1 CSI: an escape sequence without ESC
        ("\u202eexe.txt", "\\u202eexe.txt"),  # right-to-left override
        ("a\u2066b\u2069c", "a\\u2066b\\u2069c"),  # bidi isolates
        ("zero\u200bwidth\ufeff", "zero\\u200bwidth\\ufeff"),
        ("no\u00a0break\u3000space", "no\\xa0break\\u3000space"),
        ("line\u2028sep", "line\\u2028sep"),
        ("back\\slash", "back\\\\slash"),
        ("\u0338x", "\\u0338x"),  # a combining mark at the start would decorate the opening quote
        ("café ünïcode 日本", "café ünïcode 日本"),  # ordinary text stays readable
        ("plain words", "plain words"),
        ("[bold]not markup[/]", "[bold]not markup[/]"),
        ("\U000e0041tag", "\\U000e0041tag"),  # invisible tag character
    ],
)
def test_escape_text(raw: str, shown: str) -> None:
    assert escape_text(raw) == shown
    assert all(ch.isprintable() for ch in escape_text(raw))


def test_arguments_keep_their_boundaries() -> None:
    assert describe_argv(["rm", "-rf /"]) != describe_argv(["rm", "-rf", "/"])
    assert summarize_argv(["rm", "-rf /"]) == 'rm "-rf /"'
    assert summarize_argv(["echo", ""]) == 'echo ""'
    assert quote_arg(" lead and trail ") == '" lead and trail "'
    assert quote_arg('say "hi"') == '"say \\"hi\\""'
    assert describe_argv([str(i) for i in range(11)])[0] == '[ 0] "0"'


# -- SSE ----------------------------------------------------------------------------------------------


def decode(
    lines: list[str], last_event_id: str | None = None
) -> tuple[list[tuple[str, str, str | None]], SseDecoder]:
    decoder = SseDecoder(last_event_id)
    events = []
    for line in lines:
        event = decoder.feed_line(line)
        if event is not None:
            events.append((event.event, event.data, event.id))
    return events, decoder


def test_sse_events_heartbeats_and_ids() -> None:
    events, decoder = decode(
        [
            ": heartbeat",
            "",
            "id: 7",
            "event: grant.created",
            'data: {"grant": {"id": "g1"}}',
            "",
            ": heartbeat",
            "",
            "id: 8",
            "event: grant.approved",
            "data: {",
            'data: "grant": {"id": "g1"}}',
            "",
        ]
    )
    assert events == [
        ("grant.created", '{"grant": {"id": "g1"}}', "7"),
        ("grant.approved", '{\n"grant": {"id": "g1"}}', "8"),
    ]
    assert decoder.last_event_id == "8"


def test_sse_edge_cases() -> None:
    events, decoder = decode(
        ["id: 3", "", "data:x", "", "event: only", "", "id: bad\x00id", "retry: 2500", "data", ""], "1"
    )
    # an id alone dispatches nothing but is remembered; "data:x" has no space; a field without colon is empty
    assert events == [("message", "x", "3"), ("message", "", "3")]
    assert decoder.retry_ms == 2500


# -- model and formatting -------------------------------------------------------------------------------


def test_grant_parsing_is_defensive_and_decisions_merge() -> None:
    grant = Grant.from_json(
        {"id": "g1", "request": {"requester": "a@x", "command": ["ls", 5]}, "created_at": 10}
    )
    assert grant.type == "command" and grant.requester == "a@x" and grant.request.command == ("ls", "5")
    assert grant.status == "pending" and grant.request.grant_type == "once"
    approved = grant.with_decision(
        {"id": "g1", "status": "approved", "decided_by": "b@x", "decided_at": 20, "expires_at": None}
    )
    assert (
        approved.status == "approved" and approved.decided_by == "b@x" and approved.request == grant.request
    )
    assert approved.supersedes(grant) and not grant.supersedes(approved)
    with pytest.raises(ValueError):
        Grant.from_json({"request": {}})
    perms = Grant.from_json({"id": "g2", "request": {"permissions": ["b", "a"]}})
    assert perms.type == "permissions" and perms.action_key == ("permissions", "a", "b")


def test_formatting() -> None:
    assert [age(100_000, 100_000 - ms) for ms in (0, 59_999, 60_000, 3_600_000, 90_000_000)] == [
        "0s",
        "59s",
        "1m",
        "1h",
        "1d",
    ]
    assert age(1, None) == "-"
    assert (
        duration(3600) == "1h" and duration(90) == "1m 30s" and duration(None) == "-" and duration(0) == "0s"
    )
    assert parse_duration("15m") == 900 and parse_duration(" 2H ") == 7200 and parse_duration("90") == 90
    assert parse_duration("1w") == 604800 and parse_duration("soon") is None and parse_duration("-5m") is None


def test_the_console_starts_on_a_config_with_a_plugins_own_section(tmp_path):
    """`grantd tui --config` reads the server's file: a section a plugin declares (only the server loads
    plugins) must not keep the console from finding the issuer and the management token; grantd's
    own keys are still checked."""
    import argparse

    from grantd.config import ConfigError
    from grantd.tui.cli import resolve_connection

    token = tmp_path / "token"
    token.write_text("t" * 32)
    token.chmod(0o600)
    path = tmp_path / "grantd.toml"
    base = (
        f'version = 1\n[admin]\nmanagement_token = "file:{token}"\n'
        '[server]\nissuer = "https://grantd.example"\n'
    )
    path.write_text(
        base + '[plugins]\nmodules = ["acme_pager"]\n[acme_pager]\nurl = "https://pager.example"\n'
    )
    args = argparse.Namespace(config=str(path), url=None, token_file=None)
    assert resolve_connection(args) == ("https://grantd.example", "t" * 32)
    path.write_text(base.replace("issuer", "isuser") + '[plugins]\nmodules = ["acme_pager"]\n')
    with pytest.raises(ConfigError, match="server.isuser: unknown key"):
        resolve_connection(args)

"""What a notice says (grantd.notify.message.render) and the webhook signature
(grantd.notify.signature): the summary without the full command unless a channel asks for it,
every value escaped with the one escaping rule, nothing that approves, and a verifier that refuses
bad, tampered, stale and replayed signatures."""

from __future__ import annotations

import re

import pytest

from grantd.notify.message import plain_text, render, topic_for
from grantd.notify.signature import SignatureError, sign, verify

ARGV = ["rm", "-rf", "/srv/data", "--token=hunter2"]
GRANT = {
    "id": "7d9e0c1a-0000-4000-8000-00000000abcd",
    "requester": "bot@agents.example.com",
    "status": "pending",
    "request": {"command": ARGV, "target_host": "db1", "run_as": "postgres"},
}
LINK = "https://grantd.example.com/r/abc"
DENY = "https://grantd.example.com/r/abc/deny"


def text_of(notice) -> str:
    return plain_text(notice) + "\n" + repr(notice)


def test_a_notice_names_agent_host_run_as_and_program_but_not_the_command():
    notice = render("review_requested", [GRANT], link=LINK, options={})
    assert notice.title == "Approval wanted: rm on db1"
    assert dict(notice.fields) == {
        "Agent": "bot@agents.example.com",
        "Host": "db1",
        "Run as": "postgres",
        "Program": "rm",
    }
    assert "hunter2" not in text_of(notice) and "/srv/data" not in text_of(notice)
    assert notice.link == LINK and notice.urgency == "high" and notice.grant_ids == (GRANT["id"],)


def test_the_full_command_only_with_include_command():
    notice = render("review_requested", [GRANT], link=LINK, options={"include_command": True})
    assert dict(notice.fields)["Command"] == "rm -rf /srv/data --token=hunter2"
    with pytest.raises(ValueError, match="include_command must be true or false"):
        render("review_requested", [GRANT], link=LINK, options={"include_command": "yes"})


def test_permission_grants_show_the_first_permission_and_a_count():
    grant = {**GRANT, "request": {"permissions": ["db:read", "db:write", "db:drop"], "target_host": "db1"}}
    notice = render("review_requested", [grant], link=LINK, options={})
    assert dict(notice.fields)["Permission"] == "db:read (+2 more)" and "db:drop" not in text_of(notice)
    assert dict(notice.fields)["Run as"] == "root"
    assert (
        dict(render("review_requested", [grant], link=LINK, options={"include_command": True}).fields)[
            "Permissions"
        ]
        == "db:read, db:write, db:drop"
    )


def test_every_value_is_escaped_with_the_one_escaping_rule():
    grant = {
        **GRANT,
        "request": {
            "command": ["sy\u202estemctl\n", "restart\x1b[2J"],
            "target_host": "db1",
            "run_as": "root\u200b",
        },
    }
    agents = {"bot@agents.example.com": "Friendly\rBot\u3164"}
    notice = render("review_requested", [grant], link=LINK, options={"include_command": True}, agents=agents)
    fields = dict(notice.fields)
    assert fields["Agent"] == "Friendly\\rBot\\u3164"
    assert fields["Program"] == "sy\\u202estemctl\\n" and fields["Run as"] == "root\\u200b"
    assert fields["Command"] == "sy\\u202estemctl\\n restart\\x1b[2J"
    assert notice.title == "Approval wanted: sy\\u202estemctl\\n on db1"
    body = plain_text(notice)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\u200b\u202e\u3164]", body) and "\r" not in body


def test_long_values_are_clipped_so_a_notice_stays_small():
    grant = {**GRANT, "request": {"command": ["x" * 5000, *(["arg"] * 3000)], "target_host": "db1"}}
    notice = render("review_requested", [grant], link=LINK, options={"include_command": True})
    fields = dict(notice.fields)
    assert (
        len(fields["Program"]) <= 202 and len(fields["Command"]) <= 1002 and fields["Command"].endswith(" …")
    )


def test_nothing_in_a_notice_approves_and_deny_is_only_on_pending_chat_notices():
    chat = {"deny_from_chat": True}
    pending = render("review_requested", [GRANT], link=LINK, options=chat, deny_link=DENY)
    assert pending.deny_link == DENY
    assert render("escalated", [GRANT], link=LINK, options=chat, deny_link=DENY, level=2).deny_link == DENY
    assert render("review_requested", [GRANT], link=LINK, options={}, deny_link=DENY).deny_link is None
    decided = {**GRANT, "status": "denied", "decided_by": "alice@example.com"}
    assert render("resolved", [decided], link=LINK, options=chat, deny_link=DENY).deny_link is None
    assert not any(f.name.startswith("approve") for f in pending.__dataclass_fields__.values())
    assert "approve" not in (pending.link + (pending.deny_link or "")).lower()


def test_links_must_be_http_urls():
    for bad in ("javascript:alert(1)", "https://x.example/a b", "data:text/html,hi", "https://x.example/\n"):
        with pytest.raises(ValueError, match="must be an http"):
            render("review_requested", [GRANT], link=bad, options={})


def test_resolved_shares_the_topic_of_the_pending_notice_and_says_who_decided():
    decided = {**GRANT, "status": "approved", "decided_by": "alice@example.com"}
    pending = render("review_requested", [GRANT], link=LINK, options={})
    resolved = render("resolved", [decided], link=LINK, options={})
    escalated = render("escalated", [GRANT], link=LINK, options={}, level=2)
    assert pending.topic == resolved.topic == escalated.topic == topic_for(GRANT["id"])
    assert re.fullmatch(r"[A-Za-z0-9_-]{32}", pending.topic) and GRANT["id"] not in pending.topic
    assert topic_for("another") != pending.topic
    assert resolved.title == "Decided (approved): rm on db1" and resolved.urgency == "normal"
    assert ("Decided by", "alice@example.com") in resolved.fields
    assert escalated.title == "Still waiting (level 2): rm on db1"


def test_a_digest_lists_what_waits_without_commands():
    grants = [
        {**GRANT, "id": f"g{i}", "request": {**GRANT["request"], "target_host": f"h{i}"}} for i in range(12)
    ]
    notice = render(
        "digest", grants, link="https://grantd.example.com/grants", options={"include_command": True}
    )
    assert notice.title == "12 requests wait for your decision" and notice.topic is None
    assert len(notice.grant_ids) == 12 and notice.fields[0] == ("Waiting", "bot@agents.example.com: rm on h0")
    assert notice.fields[-1] == ("Waiting", "and 2 more") and "hunter2" not in text_of(notice)
    with pytest.raises(ValueError, match="one grant"):
        render("review_requested", grants[:2], link=LINK, options={})
    with pytest.raises(ValueError, match="kind must be one of"):
        render("approve", [GRANT], link=LINK, options={})


# -- the webhook signature ------------------------------------------------------------------------

SECRET = "whsec_test_0123456789"
BODY = b'{"action":"deny","grant":"g1"}'
NOW = 1_800_000_000


def test_a_signature_verifies_and_names_its_timestamp():
    header = sign(SECRET, BODY, NOW)
    assert re.fullmatch(r"t=1800000000,v1=[0-9a-f]{64}", header)
    assert verify(SECRET, header, BODY, now=NOW + 10) == NOW


@pytest.mark.parametrize("case", ["other secret", "tampered body", "tampered timestamp", "truncated mac"])
def test_a_bad_signature_is_refused(case):
    header = sign(SECRET, BODY, NOW)
    secret, body = SECRET, BODY
    if case == "other secret":
        secret = "whsec_another_secret_0"
    elif case == "tampered body":
        body = BODY.replace(b"deny", b"approve")
    elif case == "tampered timestamp":
        header = header.replace(f"t={NOW}", f"t={NOW + 1}")
    else:
        header = header[:-2]
    with pytest.raises(SignatureError, match="bad signature"):
        verify(secret, header, body, now=NOW)


@pytest.mark.parametrize("offset", [301, 3600, -301])
def test_a_replayed_or_future_timestamp_is_refused(offset):
    header = sign(SECRET, BODY, NOW)
    with pytest.raises(SignatureError, match="outside the accepted window"):
        verify(SECRET, header, BODY, now=NOW + offset)


def test_a_replay_inside_the_window_is_refused_by_first_use():
    seen: set[str] = set()

    def first_use(signature: str, timestamp: int) -> bool:
        if signature in seen:
            return False
        seen.add(signature)
        return True

    header = sign(SECRET, BODY, NOW)
    assert verify(SECRET, header, BODY, now=NOW, first_use=first_use) == NOW
    with pytest.raises(SignatureError, match="already used"):
        verify(SECRET, header, BODY, now=NOW + 5, first_use=first_use)


def test_a_rotating_sender_may_sign_with_two_secrets():
    old, new = sign("whsec_old_secret_00", BODY, NOW), sign(SECRET, BODY, NOW)
    both = f"{old},v1={new.split('v1=')[1]}"
    assert verify(SECRET, both, BODY, now=NOW) == NOW


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "garbage",
        "t=,v1=",
        "t=abc,v1=00",
        "v1=" + "0" * 64,
        f"t={NOW}",
        f"t={NOW},t={NOW},v1=" + "0" * 64,
        "t=1\u00e9,v1=00",
        "t=" + "9" * 40 + ",v1=00",
        "x" * 5000,
    ],
)
def test_malformed_signature_headers_are_refused_cleanly(header):
    with pytest.raises(SignatureError, match="missing or malformed"):
        verify(SECRET, header, BODY, now=NOW)

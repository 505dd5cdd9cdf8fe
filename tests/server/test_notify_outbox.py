"""The notification outbox end to end (D15, issue 24): a real server, a real SMTP server
(aiosmtpd) and the real SMTP client library. Rows are written in the grant's transaction for each
eligible approver, delivered by the server's worker off the request path, retried with backoff
while the mail server is down; ``GET /api/grants/:id/notifications`` shows who was told what."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from people_support import create_person, enrol_agent, fresh, request_grant, signed_in_person
from support import postgres as pg
from support.notify_doubles import SmtpSink

from grants_support import grant_body

CHANNELS = """
[notify]
poll_ms = 50
max_attempts = 3

[[notify.channels]]
id = "mail"
type = "smtp"
host = "127.0.0.1"
port = {port}
starttls = false
from = "grantd@example.com"
timeout = 2
"""


@pytest.fixture
def sink() -> Iterator[SmtpSink]:
    smtp = SmtpSink()
    yield smtp
    smtp.stop()


@pytest.fixture
def srv(tmp_path, sink) -> Iterator[Any]:
    from inproc import InProcessServer

    server = InProcessServer(tmp_path / "srv", extra=CHANNELS.format(port=sink.port)).start()
    try:
        yield server
    finally:
        server.stop()


def wait_for(predicate: Any, seconds: float = 10.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out")


def mails_to(sink: SmtpSink, email: str) -> list[Any]:
    return [m for m in sink.messages if email in m.recipients]


def rows_of(srv: Any, grant_id: str) -> list[dict[str, Any]]:
    return srv.call(srv.services.store.notify.for_grant(grant_id))  # type: ignore[no-any-return]


def test_the_owner_gets_a_mail_with_a_review_link_and_no_command(srv, sink):
    sink.start()
    owner = create_person(srv, fresh("owner"))
    _, token = enrol_agent(srv, owner=owner["email"])
    grant = request_grant(
        srv, token, command=["systemctl", "restart", "nginx", "--token=hunter2"], run_as="www"
    )
    (mail,) = wait_for(lambda: mails_to(sink, owner["email"]))
    body = mail.message.get_content()
    assert "Approval wanted: systemctl on web-1" in mail.message["Subject"]
    assert "Host: web-1" in body and "Run as: www" in body and "Program: systemctl" in body
    assert "hunter2" not in body and "restart" not in body  # the whole command only with include_command
    assert f"{srv.url}/r/" in body
    rows = [r for r in rows_of(srv, grant["id"]) if r["recipient"] == owner["email"]]
    assert [(r["channel"], r["kind"]) for r in rows] == [("mail", "review_requested")]
    wait_for(lambda: rows_of(srv, grant["id"])[0]["status"] == "sent")


def test_people_marked_admin_are_told_and_a_disabled_one_is_not(srv, sink):
    """The default policy's `@admins` (D13): the active people marked admin, found among many who
    are not (store.people.admins, issue 27), are eligible and get the notice."""
    sink.start()
    for _ in range(30):
        create_person(srv, fresh("person"))
    on, off = create_person(srv, fresh("admin"), admin=True), create_person(srv, fresh("admin"), admin=True)
    with srv.admin() as http:
        assert http.patch(f"/api/admin/users/{off['email']}", json={"status": "disabled"}).status_code == 200
    owner = create_person(srv, fresh("owner"))
    _, token = enrol_agent(srv, owner=owner["email"])
    grant = request_grant(srv, token, command=["ls"])
    told = {r["recipient"] for r in rows_of(srv, grant["id"])}
    assert on["email"] in told and owner["email"] in told and off["email"] not in told
    wait_for(lambda: mails_to(sink, on["email"]))


@pg.sqlite_only("traces the statements of the SQLite store")
def test_a_grant_request_reads_its_agent_once_and_its_recipients_together(srv, sink):
    """D11 reads the bearer's agent; the notices need the same row (who owns it): the request reads
    it once (Credentials.agents_read, issue 27). The people it tells (the owner and an
    administrator here) are read in one statement, not one each."""
    owner = create_person(srv, fresh("owner"))
    admin = create_person(srv, fresh("admin"), admin=True)
    _, token = enrol_agent(srv, owner=owner["email"])
    # the mail server is down: once a notice found that, the channel rests (the clock stands
    # still), so no delivery reads the agent in the background while the request is traced
    first = request_grant(srv, token, command=["ls", "first"])
    tried = lambda: rows_of(srv, first["id"])  # noqa: E731
    wait_for(lambda: any(r["attempts"] for r in tried()) and all(r["claimed_by"] is None for r in tried()))
    seen: list[str] = []
    conn = srv.services.store._db.conn
    with srv.client(token) as http:
        http.get("/healthz")  # connected before the trace starts
        conn.set_trace_callback(seen.append)
        try:
            r = http.post("/api/grants", json=grant_body(command=["ls", "traced"]))
        finally:
            conn.set_trace_callback(None)
    assert r.status_code == 201, r.text
    assert sum("SELECT * FROM agents WHERE agent_id" in s for s in seen) == 1, seen
    people = [s for s in seen if "FROM people WHERE" in s and "admin = 1" not in s]
    assert len(people) == 1 and "email IN" in people[0], seen
    assert {x["recipient"] for x in rows_of(srv, r.json()["id"])} >= {owner["email"], admin["email"]}


def test_a_decision_sends_a_resolved_notice_in_the_same_thread(srv, sink):
    sink.start()
    owner, browser = signed_in_person(srv, fresh("owner"))
    _, token = enrol_agent(srv, owner=owner["email"])
    grant = request_grant(srv, token)
    (first,) = wait_for(lambda: mails_to(sink, owner["email"]))
    r = browser.post(f"/api/grants/{grant['id']}/deny", json={"reason": "no"}, headers={"Origin": srv.url})
    assert r.status_code == 200, r.text
    mails = wait_for(lambda: len(mails_to(sink, owner["email"])) == 2 and mails_to(sink, owner["email"]))
    resolved = mails[1].message
    assert resolved["Subject"].startswith("[grantd] Decided (denied)")
    assert resolved["In-Reply-To"] == first.message["Message-ID"]
    kinds = [r["kind"] for r in rows_of(srv, grant["id"]) if r["recipient"] == owner["email"]]
    assert kinds == ["review_requested", "resolved"]


def test_a_grant_without_channels_writes_no_rows(tmp_path):
    from inproc import InProcessServer

    server = InProcessServer(tmp_path / "plain").start()
    try:
        owner = create_person(server, fresh("owner"))
        _, token = enrol_agent(server, owner=owner["email"])
        grant = request_grant(server, token)
        assert rows_of(server, grant["id"]) == []
    finally:
        server.stop()


@pytest.mark.slow
def test_a_mail_server_that_is_down_neither_slows_nor_fails_requests_and_mail_comes_later(srv, sink):
    """The first notice finds the mail server down; the channel then rests (its later notices wait
    unattempted, nothing spent on them) until a probe gets through, and every mail comes."""
    owner = create_person(srv, fresh("owner"))
    _, token = enrol_agent(srv, owner=owner["email"])
    first = request_grant(srv, token, command=["ls", "first"])
    mine = lambda ids: [r for i in ids for r in rows_of(srv, i) if r["recipient"] == owner["email"]]  # noqa: E731
    (tried,) = wait_for(lambda: [r for r in mine([first["id"]]) if r["attempts"] == 1])
    assert tried["status"] == "pending" and "cannot reach the mail server" in (tried["error"] or "")
    started = time.monotonic()
    later = [request_grant(srv, token, command=["ls", str(i)]) for i in range(5)]  # 201 each (asserted)
    assert time.monotonic() - started < 2.5  # five grants while the mail server refuses connections
    time.sleep(0.5)  # ten of the worker's polls (poll_ms = 50): the channel rests, nothing is tried
    waiting = mine([g["id"] for g in later])
    assert len(waiting) == 5 and all(r["status"] == "pending" and r["attempts"] == 0 for r in waiting)
    sink.start()
    srv.clock.advance(6)  # the rest (5 s) is over: a probe gets through, and the rest follow
    wait_for(lambda: len(mails_to(sink, owner["email"])) == 6, 15)
    wait_for(lambda: all(r["status"] == "sent" for r in mine([first["id"]] + [g["id"] for g in later])))
    assert all(r["attempts"] == 1 for r in mine([g["id"] for g in later]))  # no attempt spent while it rested


def test_a_channel_that_stays_down_is_probed_by_one_notice_at_a_time_less_and_less_often(srv, sink):
    owner = create_person(srv, fresh("owner"))
    _, token = enrol_agent(srv, owner=owner["email"])
    ids = [request_grant(srv, token, command=["ls", "first"])["id"]]
    attempts = lambda: sum(r["attempts"] for i in ids for r in rows_of(srv, i))  # noqa: E731 - every recipient's
    wait_for(lambda: attempts() >= 1)  # found down: the channel rests 5 s
    time.sleep(0.3)
    tried = attempts()  # the first grant's notices (its owner's, the administrator's) claimed at once
    ids += [request_grant(srv, token, command=["ls", str(i)])["id"] for i in range(4)]
    srv.clock.advance(6)
    wait_for(lambda: attempts() == tried + 1)  # one probe, not the ten due notices: still down, rests 10 s
    time.sleep(0.5)
    assert attempts() == tried + 1
    srv.clock.advance(6)  # 6 s into a rest of 10 s
    time.sleep(0.5)
    assert attempts() == tried + 1
    srv.clock.advance(5)
    wait_for(lambda: attempts() == tried + 2)  # the next probe
    time.sleep(0.3)
    assert attempts() == tried + 2
    sink.start()
    srv.clock.advance(21)  # the rest (20 s) is over: the probe gets through, then every notice
    wait_for(lambda: len(mails_to(sink, owner["email"])) == 5, 15)
    wait_for(lambda: all(r["status"] == "sent" for i in ids for r in rows_of(srv, i)))


def test_who_may_read_a_grants_notifications(srv, sink):
    sink.start()
    owner, browser = signed_in_person(srv, fresh("owner"))
    _, stranger = signed_in_person(srv, fresh("stranger"))
    _, token = enrol_agent(srv, owner=owner["email"])
    grant = request_grant(srv, token)
    wait_for(lambda: mails_to(sink, owner["email"]))
    wait_for(lambda: any(r["status"] == "sent" for r in rows_of(srv, grant["id"])))
    path = f"/api/grants/{grant['id']}/notifications"
    mine = browser.get(path)
    assert mine.status_code == 200, mine.text
    (told,) = [n for n in mine.json()["data"] if n["recipient"] == owner["email"]]
    assert (told["channel"], told["kind"], told["status"], told["attempts"]) == (
        "mail",
        "review_requested",
        "sent",
        1,
    )
    assert "error" not in told and told["at"] >= told["created_at"]
    with srv.client(token) as agent:
        assert agent.get(path).status_code == 200  # the requester may read its grant, so its notices
    refused = stranger.get(path)
    assert refused.status_code == 404 and refused.headers["content-type"].startswith(
        "application/problem+json"
    )
    assert browser.get("/api/grants/no-such-grant/notifications").status_code == 404


def test_a_person_opts_out_of_a_channel(srv, sink):
    sink.start()
    owner, browser = signed_in_person(srv, fresh("owner"))
    _, token = enrol_agent(srv, owner=owner["email"])
    headers = {"Origin": srv.url}
    r = browser.put("/api/account/notifications", json={"channels": {"mail": False}}, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json()["channels"] == {"mail": False}
    assert browser.get("/api/account/notifications").json()["available"] == [{"id": "mail", "type": "smtp"}]
    grant = request_grant(srv, token)
    assert [r for r in rows_of(srv, grant["id"]) if r["recipient"] == owner["email"]] == []
    r = browser.put("/api/account/notifications", json={"channels": {"mail": True}}, headers=headers)
    assert r.status_code == 200
    again = request_grant(srv, token, command=["ls"])
    assert [r["recipient"] for r in rows_of(srv, again["id"])].count(owner["email"]) == 1


@pytest.mark.parametrize(
    "body",
    [
        {"channels": {"nope": False}},
        {"channels": {"mail": {"topic": "x"}}},  # mail has no topic
        {"channels": {"mail": "yes"}},
        {"channels": ["mail"]},
        {},
    ],
)
def test_bad_notification_settings_are_400(srv, body):
    _, browser = signed_in_person(srv, fresh("p"))
    r = browser.put("/api/account/notifications", json=body, headers={"Origin": srv.url})
    assert r.status_code == 400, r.text
    assert r.json()["field"] == "channels"


def test_notification_settings_are_a_persons_own(srv):
    owner = create_person(srv, fresh("owner"))
    _, token = enrol_agent(srv, owner=owner["email"])
    with srv.client(token) as agent:
        assert agent.put("/api/account/notifications", json={"channels": {}}).status_code == 403
    _, browser = signed_in_person(srv, fresh("p"))
    cross = browser.put(
        "/api/account/notifications", json={"channels": {}}, headers={"Origin": "https://evil.example"}
    )
    assert cross.status_code == 403  # the session routes' cross-site rule (D8)


BAD_NOTIFY = """
[notify]
link_ttl = 5

[[notify.channels]]
id = "mail"
type = "smpt"
host = "smtp.example.com"

[[notify.channels]]
id = "phone"
type = "ntfy"
url = "https://ntfy.example.com"
tokn = "file:x"

[[notify.channels]]
id = "chat"
type = "webhook"
url = "https://chat.example.com/hook"
secret = "inline-secret-is-refused"

[[notify.routes]]
match.policies = ["prod"]
channels = ["mail", "pager"]
per_approver_limit = "lots"
"""


def test_config_validate_reports_every_notify_problem_at_once(tmp_path):
    import subprocess
    import sys

    from conftest import toml_config

    (tmp_path / "management-token").write_text("m" * 32 + "\n")
    (tmp_path / "management-token").chmod(0o600)
    path = tmp_path / "grantd.toml"
    path.write_text(toml_config(8999, extra=BAD_NOTIFY))
    result = subprocess.run(
        [sys.executable, "-m", "grantd", "config", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode != 0
    out = result.stdout + result.stderr
    for problem in (
        "notify.link_ttl",
        "notify.channels[0].type: no channel type named 'smpt' (did you mean \"smtp\"?)",
        'notify.channels[1].tokn: not a key of a ntfy channel (did you mean "token"?)',
        "notify.channels[2].secret: a secret must come from file:PATH or env:NAME",
        "notify.routes[0].channels: no [[notify.channels]] with id 'pager'",
        "notify.routes[0].per_approver_limit",
    ):
        assert problem in out, (problem, out)


def test_a_grant_that_expires_pending_is_resolved_for_those_told(srv, sink):
    from grantd.services.grant_sweeps import sweep_expired

    sink.start()
    owner = create_person(srv, fresh("owner"))
    _, token = enrol_agent(srv, owner=owner["email"])
    grant = request_grant(srv, token)
    wait_for(lambda: mails_to(sink, owner["email"]))
    srv.clock.advance(srv.services.config.grants.pending_ttl + 1)
    assert [g["id"] for g in srv.call(sweep_expired(srv.services))] == [grant["id"]]
    assert srv.call(sweep_expired(srv.services)) == []  # once
    mails = wait_for(lambda: len(mails_to(sink, owner["email"])) == 2 and mails_to(sink, owner["email"]))
    assert mails[1].message["Subject"].startswith("[grantd] Decided (expired)")
    kinds = [r["kind"] for r in rows_of(srv, grant["id"]) if r["recipient"] == owner["email"]]
    assert kinds == ["review_requested", "resolved"]


def test_a_channel_that_hangs_holds_up_only_its_own_notices(tmp_path, sink):
    """Each notice is its own delivery: a mail server that accepts connections and never answers
    (each attempt runs to the channel's timeout) delays none of the other channel's notices."""
    import socket
    import threading

    from inproc import InProcessServer

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    held: list[socket.socket] = []

    def accept_and_say_nothing() -> None:
        while True:
            try:
                held.append(silent.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept_and_say_nothing, daemon=True).start()
    sink.start()
    hanging = f"""
[[notify.channels]]
id = "stuck"
type = "smtp"
host = "127.0.0.1"
port = {silent.getsockname()[1]}
starttls = false
from = "grantd@example.com"
timeout = 8
"""
    srv = InProcessServer(tmp_path / "srv", extra=CHANNELS.format(port=sink.port) + hanging).start()
    try:
        owner = create_person(srv, fresh("owner"))
        _, token = enrol_agent(srv, owner=owner["email"])
        for i in range(25):  # more than one worker's batch, each notice on both channels
            request_grant(srv, token, command=["ls", str(i)])
        started = time.monotonic()
        wait_for(lambda: len(mails_to(sink, owner["email"])) == 25, seconds=6)
        assert time.monotonic() - started < 6  # not one stuck attempt's 8 s timeout per batch
    finally:
        srv.stop()
        silent.close()
        for conn in held:
            conn.close()

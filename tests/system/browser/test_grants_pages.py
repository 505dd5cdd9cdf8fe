"""Deciding grants in the browser: the link `grantd run` prints, approve (the command then runs
through `grantd elevate` with decided_by = the person), deny with a reason, the exact argv with
control characters escaped, earlier grants, who may see a grant, and the live inbox."""

from __future__ import annotations

import json
import re
import subprocess
import threading

import httpx

from grantd.core.display import quote_arg

from conftest import enroll, sign_in, unique_email
from elevate_support import HOST, attempts, make_target
from system.browser.conftest import origin_of, registration_url, shoot
from system.test_agent_cli_e2e import Cli, cli_env, finish

URL = re.compile(r"(http://localhost:\d+/grant-approval\?grant_id=\S+)")


def agent_cli(site, home, owner: str, target) -> Cli:
    """An agent with the CLI's own key, enrolled by the management token with ``owner`` as its
    owner and approver, logged in against the localhost issuer."""
    home.mkdir(parents=True, exist_ok=True)
    cli = Cli(site, home, unique_email("bot"), cli_env(home, target))
    made = cli.run("agent", "keygen", "--comment", cli.email, "--json")
    assert made.returncode == 0, made.stderr
    with site.admin() as http:
        r = http.post(
            "/api/agent/enroll",
            json={
                "email": cli.email,
                "name": "Deploy bot",
                "owner": owner,
                "approver": owner,
                "publicKey": json.loads(made.stdout)["public_key"],
            },
        )
    assert r.status_code == 201, r.text
    login = cli.run("agent", "login", "--idp", origin_of(site), "--key", str(cli.key), "--email", cli.email)
    assert login.returncode == 0, login.stderr
    return cli


def approval_link(proc: subprocess.Popen[str], timeout: float = 30) -> tuple[str, list[str]]:
    """Read the CLI's stderr until it prints the approval link; the rest keeps being collected."""
    lines: list[str] = []
    found = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if URL.search(line):
                found.set()
        found.set()

    threading.Thread(target=read, daemon=True).start()
    assert found.wait(timeout), "".join(lines)
    match = next((URL.search(line) for line in lines if URL.search(line)), None)
    assert match, f"the CLI ended without printing an approval link: {''.join(lines)}"
    return match.group(1), lines


def test_approve_the_link_grantd_run_printed_and_the_command_runs(site, registered, tmp_path):
    person = registered
    target = make_target(tmp_path / "target", [origin_of(site)], allowed_approvers=[person.email])
    cli = agent_cli(site, tmp_path / "home", person.email, target)
    argv = ["id", "-u"]
    proc = cli.popen("run", "--as", "root", "--wait", "--reason", "check who I am", "--", *argv)
    try:
        url, err_lines = approval_link(proc)
        person.page.goto(url)
        items = person.page.locator("ol.argv > li > code")
        assert items.all_inner_texts() == ['"id"', '"-u"']
        page_text = person.page.locator("main").inner_text()
        assert HOST in page_text and "root" in page_text and "check who I am" in page_text
        assert re.search(r"sha256:[0-9a-f]{64}", page_text)
        assert cli.email in page_text and "Deploy bot" in page_text
        shoot(person, "grant-approval")
        person.page.get_by_role("button", name="Approve").click()
        decided = person.page.locator("[data-decided-by]")
        decided.wait_for()
        assert decided.inner_text() == person.email
        code, out, _ = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(err_lines)
    assert code == 0, err
    assert out == "0\n"
    assert f"approved by {person.email}" in err
    grant_id = url.rpartition("=")[2]
    with site.admin() as http:
        grant = http.get(f"/api/grants/{grant_id}").json()
    assert grant["status"] == "consumed" and grant["decided_by"] == person.email
    line = [a for a in attempts(target) if a["grant_id"] == grant_id]
    assert len(line) == 1 and line[0]["result"] == "allowed" and line[0]["decided_by"] == person.email
    person.page.reload()
    shoot(person, "grant-decided")


def agent_of(site, tmp_path, owner: str):
    agent = enroll(site, tmp_path / "keys", owner=owner, approver=owner)
    sign_in(site, agent)
    return agent


def request_grant(site, agent, command, **fields) -> dict:
    body = {"target_host": "web-1", "audience": "escapes", "grant_type": "once", "command": command, **fields}
    r = httpx.post(f"{site.url}/api/grants", json=body, headers={"Authorization": f"Bearer {agent.token}"})
    assert r.status_code in (200, 201), r.text
    return dict(r.json())


NASTY = [
    "sh",
    "-c",
    "echo <script>alert(1)</script>",
    "a\x1b[31mred",
    "two\nlines",
    "\u202eevil",
    "tab\there",
    "",
    "x y",
]


def test_the_argv_is_shown_exactly_and_escaped_and_deny_keeps_the_reason(site, registered, tmp_path):
    person = registered
    dialogs: list[str] = []
    person.page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    agent = agent_of(site, tmp_path, person.email)
    first = request_grant(site, agent, NASTY, reason="line one\nline two")
    second = request_grant(site, agent, NASTY)
    person.goto(f"/grant-approval?grant_id={second['id']}")
    person.page.locator("[data-more-args] > summary").click()  # the arguments after the first few are folded
    texts = person.page.locator("ol.argv > li > code").all_inner_texts()
    assert texts == [quote_arg(a) for a in NASTY]
    assert texts[3] == '"a\\x1b[31mred"' and texts[4] == '"two\\nlines"' and texts[5] == '"\\u202eevil"'
    # The first request for the same command is listed as an earlier one.
    earlier = person.page.locator("section[aria-labelledby=earlier-h] a")
    assert earlier.count() == 1 and first["id"] in (earlier.first.get_attribute("href") or "")
    shoot(person, "grant-approval-escaped")
    person.page.get_by_label("Reason for denying").fill("not today")
    person.page.get_by_role("button", name="Deny").click()
    person.page.locator("[data-decided-by]").wait_for()
    assert person.page.locator("[data-decided-by]").inner_text() == person.email
    assert "not today" in person.page.locator("[data-decision]").inner_text()
    assert dialogs == []  # nothing of the argv ran as script
    with site.admin() as http:
        denied = http.get(f"/api/grants/{second['id']}").json()
    assert denied["status"] == "denied" and denied["decided_by"] == person.email
    assert denied["decision_reason"] == "not today"


def test_approve_with_another_type_and_duration(site, registered, tmp_path):
    person = registered
    agent = agent_of(site, tmp_path, person.email)
    grant = request_grant(site, agent, ["systemctl", "restart", "nginx"])
    person.goto(f"/grant-approval?grant_id={grant['id']}")
    assert person.page.get_by_label("Duration in seconds").is_hidden()  # only for timed
    person.page.get_by_role("radio", name="timed").check()
    person.page.get_by_label("Duration in seconds").fill("600")
    person.page.get_by_role("button", name="Approve").click()
    person.page.locator("[data-decided-by]").wait_for()
    with site.admin() as http:
        approved = http.get(f"/api/grants/{grant['id']}").json()
    assert approved["status"] == "approved" and approved["request"]["grant_type"] == "timed"
    assert approved["expires_at"] - approved["decided_at"] == 600_000


def test_a_person_who_may_not_decide_learns_nothing(site, registered, new_person, tmp_path):
    owner = registered
    agent = agent_of(site, tmp_path, owner.email)
    grant = request_grant(site, agent, ["reboot"])
    stranger = new_person(site)
    stranger.register(registration_url(site, stranger.email))
    response = stranger.goto(f"/grant-approval?grant_id={grant['id']}")
    assert response.status == 404
    assert "Grant not found" in stranger.page.locator("h1").inner_text()
    assert "reboot" not in stranger.page.content()
    # ... and cannot decide it through the API with their session either.
    assert stranger.fetch("POST", f"/api/grants/{grant['id']}/approve", {})["status"] in (403, 404)
    # Their inbox does not show it.
    stranger.goto("/grants")
    assert stranger.page.locator(f"[data-grant-id='{grant['id']}']").count() == 0


def test_the_inbox_shows_new_requests_live(site, registered, tmp_path):
    person = registered
    agent = agent_of(site, tmp_path, person.email)
    person.goto("/grants")
    person.page.locator("[data-live][data-state=open]").wait_for()  # the event stream is open
    grant = request_grant(site, agent, ["apt-get", "upgrade", "-y"], reason="patch day")
    row = person.page.locator(f"[data-grant-id='{grant['id']}']")
    row.wait_for(timeout=10_000)  # no reload: the event stream brought it
    assert '"apt-get"' not in row.inner_text() and "apt-get upgrade -y" in row.inner_text()
    shoot(person, "grants")
    with site.admin() as http:
        assert http.post(f"/api/grants/{grant['id']}/deny", json={}).status_code == 200
    row.wait_for(state="detached", timeout=10_000)
    recent = person.page.locator("section[aria-labelledby=recent-h]")
    recent.wait_for()
    recent.get_by_role("link", name=re.compile("apt-get upgrade")).first.click()
    person.page.wait_for_url(re.compile(r"/grant-approval\?grant_id="))

"""The device grant from the terminal: the console's session (grantd.tui.signin) and grantd login/logout as processes. Shared fixtures: test_device_grant."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from inproc import InProcessServer
from people_support import (
    cookie_client,
    create_person,
    enrol_agent,
    request_grant,
    start_session,
)

from grantd.core.clock import SYSTEM_CLOCK
from grantd.tui.signin import (
    DeviceSignIn,
    SessionCredential,
    SessionFile,
    SignInError,
    SignInRequired,
    StoredSession,
    current_session,
)

from conftest import GRANTD, ROOT, TESTS
from server import test_device_grant

# fixtures and helpers shared with the other parts (pytest finds a fixture by its module-level name)
decide = test_device_grant.decide
srv = test_device_grant.srv


# -- the terminal's session (grantd.tui.signin) ------------------------------------------------------


def test_the_session_file_is_0600_in_a_0700_directory(tmp_path, monkeypatch):
    store = SessionFile(tmp_path / "cfg" / "grantd" / "session.json")
    session = StoredSession(
        "http://127.0.0.1:1", "refresh-secret", "access-secret", 10, "pat@example.com", "Pat"
    )
    old_umask = os.umask(0o022)
    try:
        store.save(session)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.path.parent.stat().st_mode) == 0o700
    assert store.load() == session
    assert "secret" not in repr(session)
    # A rewrite stays 0600 and leaves no temporary file behind.
    store.save(session)
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert sorted(p.name for p in store.path.parent.iterdir()) == ["session.json"]
    assert store.delete() and store.load() is None
    # grantd's own directory is tightened if someone loosened it; another existing directory is
    # never chmod-ed (--session-file /tmp/x must not touch /tmp), but one others may write to is refused.
    home = tmp_path / "xdg"
    monkeypatch.delenv("GRANTD_SESSION_FILE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    own = SessionFile()
    assert own.path == home / "grantd" / "session.json"
    own.path.parent.mkdir(parents=True)
    own.path.parent.chmod(0o755)
    own.save(session)
    assert stat.S_IMODE(own.path.parent.stat().st_mode) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    SessionFile(shared / "s.json").save(session)
    assert (
        stat.S_IMODE(shared.stat().st_mode) == 0o755
        and stat.S_IMODE((shared / "s.json").stat().st_mode) == 0o600
    )
    shared.chmod(0o777)
    with pytest.raises(SignInError, match="writable by others"):
        SessionFile(shared / "s.json").save(session)


def device_session(srv: Any, person: dict[str, Any] | None = None) -> tuple[dict[str, Any], StoredSession]:
    """A person signed in on a terminal through the real flow (grantd.tui.signin against srv)."""
    if person is None:
        person = create_person(srv)
    browser = cookie_client(srv, start_session(srv, person["email"]))

    async def flow() -> StoredSession:
        async def approve_and_wait(seconds: float) -> None:
            srv.clock.advance(seconds)  # the server's clock moves as far as the client waits
            await asyncio.sleep(0)

        async with DeviceSignIn(srv.url, sleep=approve_and_wait) as signin:

            def show(authorization: Any) -> None:
                with browser:
                    assert decide(browser, authorization.user_code, True).status_code == 200

            return await signin.sign_in(show)

    return person, asyncio.run(flow())


def test_the_cli_module_signs_in_and_refresh_rotates(srv, tmp_path):
    person, session = device_session(srv)
    assert (session.email, session.issuer) == (person["email"], srv.url)
    store = SessionFile(tmp_path / "s" / "session.json")
    store.save(session)

    async def refresh_twice() -> tuple[StoredSession, StoredSession]:
        async with DeviceSignIn(srv.url) as signin:
            first = await signin.refresh(session, store)
            second = await signin.refresh(first, store)
            return first, second

    first, second = asyncio.run(refresh_twice())
    assert len({session.refresh_token, first.refresh_token, second.refresh_token}) == 3  # rotated every time
    assert store.load() == second  # the newest is the one stored
    with srv.client(second.access_token) as http:
        assert http.get("/api/me").json()["email"] == person["email"]

    # Presenting an old refresh token again is refused, revokes the family, and deletes the stored session.
    async def replay() -> None:
        async with DeviceSignIn(srv.url) as signin:
            await signin.refresh(first, store)

    with pytest.raises(SignInRequired):
        asyncio.run(replay())
    assert store.load() is None
    store.save(second)  # even the newest one is dead now (its family was revoked)

    async def again() -> StoredSession:
        async with DeviceSignIn(srv.url) as signin:
            return await current_session(signin, store, wall_clock=lambda: time.time() + 10**6)

    with pytest.raises(SignInRequired):
        asyncio.run(again())
    assert not store.path.exists()


def test_the_tuis_credential_refreshes_once_for_concurrent_requests(srv, tmp_path):
    """Five requests at once with an expired access token: one refresh (a second presentation of the
    same refresh token would revoke the family), the rotated token stored, every request the person."""
    person, session = device_session(srv)
    store = SessionFile(tmp_path / "s" / "session.json")
    stale = dataclasses.replace(session, expires_at=0)
    store.save(stale)

    async def run() -> tuple[list[httpx.Response], SessionCredential]:
        credential = SessionCredential(DeviceSignIn(srv.url), store, stale)
        async with httpx.AsyncClient(base_url=srv.url, auth=credential) as http:
            answers = await asyncio.gather(*(http.get("/api/me") for _ in range(5)))
        await credential.signin.aclose()
        return list(answers), credential

    answers, credential = asyncio.run(run())
    assert [r.status_code for r in answers] == [200] * 5
    assert {r.json()["email"] for r in answers} == {person["email"]}
    stored = store.load()
    assert (
        stored is not None and stored == credential.session and stored.refresh_token != session.refresh_token
    )

    async def refresh_again() -> StoredSession:
        async with DeviceSignIn(srv.url) as signin:
            return await signin.refresh(stored, store)

    renewed = asyncio.run(refresh_again())
    assert renewed.refresh_token != stored.refresh_token  # the family is still live

    # The server says the access token has expired (its clock ran ahead): one 401, a refresh, a retry.
    srv.clock.advance(srv.services.config.oauth.access_token_ttl + 60)

    async def after_expiry() -> httpx.Response:
        credential = SessionCredential(DeviceSignIn(srv.url), store, renewed)
        async with httpx.AsyncClient(base_url=srv.url, auth=credential) as http:
            answer = await http.get("/api/me")
        await credential.signin.aclose()
        return answer

    assert asyncio.run(after_expiry()).status_code == 200
    assert store.load().refresh_token not in (renewed.refresh_token, stored.refresh_token)  # type: ignore[union-attr]


def test_two_consoles_sharing_the_session_file_refresh_once(srv, tmp_path):
    """Two `grantd tui` windows (two credentials, as two processes would have) with the same expired
    session: the session file's lock lets one refresh; the other takes its result, so the refresh
    token is never presented twice and the family stays live."""
    person, session = device_session(srv)
    store = SessionFile(tmp_path / "s" / "session.json")
    stale = dataclasses.replace(session, expires_at=0)
    store.save(stale)

    async def console() -> list[int]:
        credential = SessionCredential(DeviceSignIn(srv.url), store, stale)
        async with httpx.AsyncClient(base_url=srv.url, auth=credential) as http:
            answers = [(await http.get("/api/me")).status_code for _ in range(2)]
        await credential.signin.aclose()
        return answers

    async def both() -> list[list[int]]:
        return list(await asyncio.gather(console(), console()))

    assert asyncio.run(both()) == [[200, 200], [200, 200]]
    stored = store.load()
    assert stored is not None and stored.refresh_token != session.refresh_token
    with srv.client(stored.access_token) as http:
        assert http.get("/api/me").json()["email"] == person["email"]  # the family was not revoked
    assert stat.S_IMODE((store.path.parent / "session.json.lock").stat().st_mode) == 0o600


# -- `grantd login` and `grantd logout` as processes ------------------------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    """A real-time server (the CLI waits between polls for real): interval 1 s."""
    server = InProcessServer(
        tmp_path_factory.mktemp("live"), extra="[oauth]\ndevice_poll_interval = 1\n", clock=SYSTEM_CLOCK
    )  # type: ignore[arg-type]
    yield server.start()
    server.stop()


def grantd_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen[str]:
    full_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS / "plugins")]),
        **(env or {}),
    }
    full_env.pop("GRANTD_CONFIG", None)
    return subprocess.Popen(
        [*GRANTD, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env, cwd=cwd
    )


def test_grantd_login_and_logout_as_processes(live, tmp_path):
    person = create_person(live)
    browser = cookie_client(live, start_session(live, person["email"]))
    session_file = tmp_path / "home" / ".config" / "grantd" / "session.json"
    proc = grantd_cli("login", "--url", live.url, "--session-file", str(session_file), cwd=tmp_path)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        found = re.search(r"open (\S+) and enter the code ([A-Z]{4}-[A-Z]{4})", line)
        assert found, line
        assert found.group(1) == f"{live.url}/device"
        with browser:
            assert decide(browser, found.group(2), True).status_code == 200
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out) == {
        "issuer": live.url,
        "email": person["email"],
        "name": person.get("name") or person["email"],
    }
    assert stat.S_IMODE(session_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(session_file.parent.stat().st_mode) == 0o700
    stored = json.loads(session_file.read_text())
    assert set(stored) >= {"issuer", "refresh_token", "access_token", "expires_at", "email", "name"}

    # Signed in already: a second login says so without a new code.
    again = grantd_cli("login", "--url", live.url, "--session-file", str(session_file))
    out, err = again.communicate(timeout=60)
    assert (
        again.returncode == 0 and "Already signed in" in err and json.loads(out)["email"] == person["email"]
    )

    # logout revokes at the server (the refresh token no longer works) and deletes the file.
    out_proc = grantd_cli("logout", "--session-file", str(session_file))
    _, err = out_proc.communicate(timeout=60)
    assert out_proc.returncode == 0 and "Signed out" in err and "could not" not in err, err
    assert not session_file.exists()
    with live.client() as http:
        r = http.post(
            "/token",
            data={
                "grant_type": "refresh_token",
                "refresh_token": stored["refresh_token"],
                "client_id": "grantd-cli",
            },
        )
    assert r.status_code == 400 and r.json()["error"] == "invalid_grant", r.text


def _login_process(live: Any, session_file: Path, browser: httpx.Client, *flags: str) -> tuple[str, str, str]:
    """`grantd login` as a process, approved in ``browser``: (stdout, stderr, the /device page it was approved on)."""
    proc = grantd_cli("login", "--url", live.url, "--session-file", str(session_file), *flags)
    try:
        assert proc.stderr is not None
        code = re.search(r"code ([A-Z]{4}-[A-Z]{4})", proc.stderr.readline())
        assert code
        page = browser.get("/device", params={"user_code": code.group(1)}).text
        assert decide(browser, code.group(1), True).status_code == 200
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    return out, err, page


@pytest.mark.slow
def test_grantd_login_asks_for_admin_rights_only_with_admin(live, tmp_path):
    """Issue 19 item 7: `grantd login` signs an administrator in without administrator rights;
    `grantd login --admin` asks for them (the page says so) and replaces a stored session that did
    not ask for them; the TUI's sign-in asks likewise with `grantd tui --admin`."""
    admin = create_person(live, admin=True)
    browser = cookie_client(live, start_session(live, admin["email"]))
    session_file = tmp_path / "admin-session.json"
    with browser:
        _, _, page = _login_process(live, session_file, browser)
        assert 'data-device-admin="none"' in page
        plain = json.loads(session_file.read_text())
        assert "admin" not in plain["scope"].split()
        with live.client(plain["access_token"]) as http:
            assert http.get("/api/admin/users").status_code == 403
        # --admin: the stored session did not ask for admin rights, so a new sign-in asks for them
        _, err, page = _login_process(live, session_file, browser, "--admin")
        assert "Signed in as" in err and 'data-device-admin="granted"' in page
        elevated = json.loads(session_file.read_text())
        assert "admin" in elevated["scope"].split()
        with live.client(elevated["access_token"]) as http:
            assert http.get("/api/admin/users").status_code == 200
    # with an admin session stored, `grantd login --admin` and `grantd login` both keep it
    for flags in (("--admin",), ()):
        again = grantd_cli("login", "--url", live.url, "--session-file", str(session_file), *flags)
        _, err = again.communicate(timeout=60)
        assert again.returncode == 0 and "Already signed in" in err, err
    # the console: --admin asks for the scope; a stored session without it is not used
    from grantd.tui.cli import person_credential
    from grantd.tui.signin import ADMIN_SCOPE, SCOPE, StoredSession

    assert person_credential(live.url, session_file, admin=True).session is not None  # type: ignore[attr-defined]
    session_file.write_text(json.dumps(plain))
    assert StoredSession.from_json(plain).scope == SCOPE
    console = person_credential(live.url, session_file, admin=True)
    assert console.session is None and console.scope == ADMIN_SCOPE  # type: ignore[attr-defined]
    assert person_credential(live.url, session_file).session is not None  # type: ignore[attr-defined]


def test_grantd_login_reports_a_denial(live, tmp_path):
    person = create_person(live)
    browser = cookie_client(live, start_session(live, person["email"]))
    proc = grantd_cli("login", "--url", live.url, "--session-file", str(tmp_path / "s.json"))
    try:
        assert proc.stderr is not None
        code = re.search(r"code ([A-Z]{4}-[A-Z]{4})", proc.stderr.readline())
        assert code
        with browser:
            assert decide(browser, code.group(1), False).status_code == 200
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and "denied" in err
    assert not (tmp_path / "s.json").exists()


def test_grantd_tui_as_a_process_signs_a_person_in(live, tmp_path):
    """`grantd tui` on a terminal with no session: it shows the code, a person approves, and the
    console's header names them; q quits with status 0 and the session stays stored for next time."""
    from system.test_bundle import Terminal

    person = create_person(live, name="Pat Example")
    browser = cookie_client(live, start_session(live, person["email"]))
    session_file = tmp_path / "cfg" / "session.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRANTD_", "PYTEST"))}
    env.update(PYTHONPATH=str(ROOT), TERM="xterm-256color", LANG="C.UTF-8")
    terminal = Terminal(
        [sys.executable, "-m", "grantd", "tui", "--url", live.url, "--session-file", str(session_file)],
        env,
        tmp_path,
    )
    try:
        terminal.wait_for("enter this code")
        terminal.wait_for("Waiting for approval")
        code = re.findall(r"\b([BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4})\b", terminal.text())[-1]
        with browser:
            assert decide(browser, code, True).status_code == 200
        terminal.wait_for(f"{live.url} · Pat Example")  # the header (its e-mail is cut off at 80 columns)
        terminal.press("q")
        assert terminal.exit_status() == 0
    finally:
        terminal.close()
    assert json.loads(session_file.read_text())["email"] == person["email"]


def test_grantd_login_does_not_import_textual():
    probe = (
        "import sys, runpy; sys.argv = ['grantd', 'login', '--help']\n"
        "try:\n    runpy.run_module('grantd', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print('textual' in sys.modules, 'sanic' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.stdout.strip().splitlines()[-1] == "False False", out.stderr


def test_a_grant_decided_with_the_terminal_session_is_recorded_under_the_person(srv):
    """What the TUI does with the session, over plain HTTP: the person's access token lists only
    their agents' grants and decides them as the person."""
    person = create_person(srv)
    _, session = device_session(srv, person)
    _, mine = enrol_agent(srv, owner=person["email"])
    _, foreign = enrol_agent(srv, owner=create_person(srv)["email"])
    own_grant = request_grant(srv, mine)
    other_grant = request_grant(srv, foreign)
    with srv.client(session.access_token) as http:
        listed = {g["id"] for g in http.get("/api/grants", params={"status": "pending"}).json()["data"]}
        assert own_grant["id"] in listed and other_grant["id"] not in listed
        assert http.post(f"/api/grants/{other_grant['id']}/approve", json={}).status_code in (403, 404)
        r = http.post(f"/api/grants/{own_grant['id']}/approve", json={})
    assert r.status_code == 200, r.text
    assert r.json()["grant"]["decided_by"] == person["email"]

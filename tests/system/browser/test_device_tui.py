"""The device grant end to end: `grantd tui` (driven with Textual's Pilot) signs a person in; the
person approves the code on /device in Chromium after signing in there with a passkey (the virtual
authenticator); the console then names the person in its header, lists only what they may decide,
and its decisions are recorded under them.

Playwright's async API runs on the same event loop as the Pilot (the sync one would need a loop of
its own), so this file launches its own Chromium rather than using the module's sync fixtures."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from people_support import enrol_agent, request_grant
from textual.widgets import Static

from grantd.tui.app import GrantConsole
from grantd.tui.client import GrantdClient
from grantd.tui.screens.main import MainScreen
from grantd.tui.screens.signin import SignInScreen
from grantd.tui.signin import DeviceSignIn, SessionCredential, SessionFile
from grantd.tui.widgets.grant_table import GrantTable

from conftest import unique_email
from system.browser.conftest import (
    CHROMIUM,
    CHROMIUM_ARGS,
    DESKTOP,
    PHONE,
    SCREENSHOTS,
    TIMEOUT_MS,
    localhost_server,
    origin_of,
    registration_url,
)

pytestmark = pytest.mark.anyio
SIZE = (120, 40)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def wait_for(pilot: Any, predicate: Callable[[], object], what: str, timeout: float = 45.0) -> None:
    import time

    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


async def shoot(page: Any, name: str) -> None:
    """Phone and desktop screenshots under test-artifacts/screenshots/; nothing may scroll sideways."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for label, size in (("phone", PHONE), ("desktop", DESKTOP)):
        await page.set_viewport_size(size)
        await page.screenshot(path=str(SCREENSHOTS / f"{name}-{label}.png"), full_page=True)
        overflow = await page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"{name} at {label} width scrolls sideways by {overflow}px"


async def test_the_tui_signs_a_person_in_who_approves_in_chromium(tmp_path: Path) -> None:
    server = localhost_server(tmp_path / "srv", extra="[oauth]\ndevice_poll_interval = 1\n").start()
    origin = origin_of(server)
    from playwright.async_api import async_playwright, expect

    try:
        email = unique_email("pat")
        register_url = registration_url(server, email, name="Pat Example")
        _, mine = enrol_agent(server, owner=email)
        _, foreign = enrol_agent(server, owner=unique_email("someone"))

        store = SessionFile(tmp_path / "home" / ".config" / "grantd" / "session.json")
        credential = SessionCredential(DeviceSignIn(origin), store)
        app = GrantConsole(GrantdClient(origin, credential), backoff=(0.2, 0.5, 1.0))
        async with async_playwright() as p, app.run_test(size=SIZE) as pilot:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            context = await browser.new_context(base_url=origin, viewport=DESKTOP)
            context.set_default_timeout(TIMEOUT_MS)
            page = await context.new_page()
            problems: list[str] = []
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            cdp = await context.new_cdp_session(page)
            await cdp.send("WebAuthn.enable")
            await cdp.send(
                "WebAuthn.addVirtualAuthenticator",
                {
                    "options": {
                        "protocol": "ctap2",
                        "transport": "internal",
                        "hasResidentKey": True,
                        "hasUserVerification": True,
                        "isUserVerified": True,
                        "automaticPresenceSimulation": True,
                    }
                },
            )

            # The person's passkey exists (registered through their link); they are signed out.
            await page.goto(register_url)
            await page.get_by_role("button", name="Register a passkey").click()
            await page.wait_for_url(f"{origin}/grants")
            await page.get_by_role("button", name="Sign out").first.click()
            # expect() polls the URL: a navigation the page's own redirect aborts is no failure (conftest.py)
            await expect(page).to_have_url(re.compile(re.escape(origin) + r"/login"), timeout=15_000)

            # The console shows a code and where to enter it.
            await wait_for(
                pilot,
                lambda: isinstance(app.screen, SignInScreen) and app.screen.authorization is not None,
                "the code on the sign-in screen",
            )
            screen = app.screen
            assert isinstance(screen, SignInScreen) and screen.authorization is not None
            code = screen.authorization.user_code
            assert code in str(screen.query_one("#signin-code", Static).render())
            assert f"{origin}/device" in str(screen.query_one("#signin-url", Static).render())

            # The person types the URL, signs in with the passkey, enters the code and approves.
            await page.goto(f"{origin}/device")
            await page.wait_for_url(re.compile(re.escape(origin) + r"/login\?next=/device"))
            await page.get_by_role("button", name="Sign in with a passkey").click()
            await page.wait_for_url(f"{origin}/device")
            await shoot(page, "device-code")
            await page.get_by_role("textbox", name="Code").fill(code.lower().replace("-", " "))
            await page.get_by_role("button", name="Continue").click()
            await page.get_by_role(
                "heading", name=re.compile("grantd \\(terminal\\) asks to sign in as you")
            ).wait_for()
            # D12 (issue 19): where and when the request came from, and no administrator rights
            await expect(page.locator('[data-field="client_address"]')).to_have_text(
                re.compile(r"^(127\.0\.0\.1|::1)$")
            )
            await expect(page.locator('[data-field="created_at"] time')).to_have_text(
                re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")
            )
            await expect(page.locator("[data-device-admin]")).to_have_attribute("data-device-admin", "none")
            await shoot(page, "device-approve")
            await page.get_by_role("button", name="Approve").click()
            await page.locator("[data-status]").filter(has_text="Approved").wait_for()

            # The console continues as the person.
            await wait_for(
                pilot,
                lambda: isinstance(app.screen, MainScreen) and app.screen.initial_loaded,
                "the grant list",
            )
            header = str(app.main.query_one("#server-label", Static).render())
            assert f"Pat Example <{email}>" in header, header
            assert store.load() is not None

            own = request_grant(server, mine)
            other = request_grant(server, foreign)
            table = app.main.query_one(GrantTable)
            await wait_for(pilot, lambda: table.shown(own["id"]) is not None, "the person's agent's grant")
            assert table.select(own["id"])
            await pilot.pause()
            await pilot.press("a")
            await wait_for(pilot, lambda: table.shown(own["id"]).status == "approved", "the approval")  # type: ignore[union-attr]
            with server.admin() as http:
                decided = http.get(f"/api/grants/{own['id']}").json()
            assert decided["status"] == "approved" and decided["decided_by"] == email
            await pilot.press("R")
            await pilot.pause(0.5)
            assert other["id"] not in app.main.grants and table.shown(other["id"]) is None
            with server.admin() as http:
                assert http.get(f"/api/grants/{other['id']}").json()["status"] == "pending"

            await context.close()
            await browser.close()
            assert not problems, problems
    finally:
        server.stop()

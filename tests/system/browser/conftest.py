"""Browser tests: the pages in a real headless Chromium (Debian's ``/usr/bin/chromium``) driven by
Playwright for Python, with Chromium's virtual WebAuthn authenticator (over CDP) as the person's
passkey device, against a real ``grantd serve``.

WebAuthn needs a secure context: ``http://localhost`` is one, so the server's issuer is
``http://localhost:PORT`` (RP id ``localhost``, origin ``http://localhost:PORT``) while it listens
on 127.0.0.1. ``scripts/bootstrap test`` installs Chromium (apt-get) and Playwright (the test
extras); Playwright never downloads a browser of its own.

Screenshots of every page at phone (390x844) and desktop (1280x800) size are written to
``test-artifacts/screenshots/`` (``shoot``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.chromium import close_within

from conftest import ROOT, Server, make_server, unique_email

CHROMIUM = os.environ.get("GRANTD_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # The server listens on 127.0.0.1: "localhost" must not be tried over ::1 first.
    "--host-resolver-rules=MAP localhost 127.0.0.1",
]
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
TIMEOUT_MS = 15_000

os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")


# -- the server -----------------------------------------------------------------------------------


def localhost_server(directory: Path, *, extra: str = "") -> Server:
    """A ``grantd serve`` whose issuer is ``http://localhost:PORT`` (a secure context for WebAuthn)."""
    server = make_server(directory, extra=extra)
    config = server.config_path.read_text()
    config = config.replace(
        f"port = {server.port}\n", f'port = {server.port}\nissuer = "http://localhost:{server.port}"\n', 1
    )
    server.config_path.write_text(config)
    return server


def origin_of(server: Server) -> str:
    return f"http://localhost:{server.port}"


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = localhost_server(tmp_path_factory.mktemp("site")).start()
    yield server
    server.stop()


def registration_url(server: Server, email: str, *, admin: bool = False, name: str | None = None) -> str:
    """A registration link made by an administrator (the management token) over the admin API."""
    body: dict[str, Any] = {"email": email, "admin": admin}
    if name:
        body["name"] = name
    with server.admin() as http:
        r = http.post("/api/admin/registration-urls", json=body)
    assert r.status_code == 201, r.text
    url = r.json()["url"]
    assert url.startswith(f"{origin_of(server)}/register?token="), url
    return str(url)


# -- the browser ----------------------------------------------------------------------------------


# Module scope, not session: Playwright's sync API keeps an asyncio loop running in the main thread
# while it lives, and any later test on the same xdist worker that runs a loop of its own
# (asyncio.run, anyio) would fail with "Cannot run the event loop while another loop is running".
@pytest.fixture(scope="module")
def playwright_instance() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/bootstrap test (it installs Debian's chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


class Browsers:
    """The module's Chromium, launched when first needed and again if it had to be killed
    (``close_within``: a close Chromium never answered)."""

    def __init__(self, playwright: Any):
        self.playwright = playwright
        self._browser: Any = None

    def current(self) -> Any:
        if self._browser is None or not self._browser.is_connected():
            self._browser = self.playwright.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
            )
        return self._browser

    def new_context(self, **options: Any) -> Any:
        return self.current().new_context(**options)

    def close(self) -> None:
        if self._browser is not None and self._browser.is_connected():
            close_within(self._browser.close, "the browser")
        self._browser = None


@pytest.fixture(scope="module")
def browser(playwright_instance: Any) -> Iterator[Browsers]:
    browsers = Browsers(playwright_instance)
    yield browsers
    browsers.close()


@dataclass
class Person:
    """One person at one browser: a context (cookies), a page, and a virtual passkey device."""

    server: Server
    context: Any
    page: Any
    cdp: Any
    email: str
    authenticator: str = ""
    console: list[str] = field(default_factory=list)

    @property
    def origin(self) -> str:
        return origin_of(self.server)

    def goto(self, path: str) -> Any:
        response = self.page.goto(self.origin + path)
        return response

    def add_authenticator(self) -> str:
        self.authenticator = self.cdp.send(
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
        )["authenticatorId"]
        return self.authenticator

    def remove_authenticator(self) -> None:
        self.cdp.send("WebAuthn.removeVirtualAuthenticator", {"authenticatorId": self.authenticator})
        self.authenticator = ""

    def credentials(self) -> list[dict[str, Any]]:
        return list(
            self.cdp.send("WebAuthn.getCredentials", {"authenticatorId": self.authenticator})["credentials"]
        )

    def session_cookie(self) -> dict[str, Any] | None:
        return next((c for c in self.context.cookies() if c["name"] == "grantd_session"), None)

    def status_text(self) -> str:
        return str(self.page.locator("[data-status]").inner_text())

    def register(self, url: str) -> None:
        """Open a registration link, register the passkey, arrive signed in on /grants."""
        assert url.startswith(self.origin)
        self.page.goto(url)
        self.page.get_by_role("button", name="Register a passkey").click()
        self.page.wait_for_url(f"{self.origin}/grants")

    def sign_out(self) -> None:
        from playwright.sync_api import expect

        self.page.get_by_role("button", name="Sign out").first.click()
        # expect() polls the URL: a navigation that the page's own redirect aborts (ERR_ABORTED) is
        # not a failure here, only not arriving at /login is
        expect(self.page).to_have_url(re.compile(re.escape(self.origin) + r"/login"), timeout=15_000)

    def sign_in(self, *, email: str | None = None, next_path: str = "/grants") -> None:
        if not self.page.url.startswith(f"{self.origin}/login"):
            self.goto("/login")
        if email:
            self.page.get_by_label("E-mail address").fill(email)
            self.page.get_by_role("button", name="Sign in with the passkey of this account").click()
        else:
            self.page.get_by_role("button", name="Sign in with a passkey").click()
        self.page.wait_for_url(self.origin + next_path)

    def fetch(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        """A call from the page's own script context (cookie, Origin: this origin)."""
        return dict(
            self.page.evaluate(
                """async ([method, path, body]) => {
                const init = {method, credentials: "same-origin", headers: {}};
                if (body !== null) { init.headers["Content-Type"] = "application/json"; init.body = JSON.stringify(body); }
                const r = await fetch(path, init);
                return {status: r.status, body: await r.text()};
            }""",
                [method, path, body],
            )
        )


@pytest.fixture
def new_person(browser: Browsers) -> Iterator[Any]:
    """``new_person(server, email=None, viewport=DESKTOP)``: a fresh browser context with a virtual
    authenticator (nothing registered yet)."""
    made: list[Person] = []

    def make(server: Server, email: str | None = None, viewport: dict[str, int] = DESKTOP) -> Person:
        context = browser.new_context(viewport=viewport, base_url=origin_of(server))
        context.set_default_timeout(TIMEOUT_MS)
        page = context.new_page()
        cdp = context.new_cdp_session(page)
        cdp.send("WebAuthn.enable")
        person = Person(server, context, page, cdp, email or unique_email("person"))
        page.on("console", lambda m: person.console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: person.console.append(f"pageerror: {e}"))
        person.add_authenticator()
        made.append(person)
        return person

    yield make
    for person in made:
        errors = [line for line in person.console if line.startswith(("pageerror", "error: Refused"))]
        close_within(person.context.close, "a browser context")
        assert not errors, errors  # no script errors, nothing the CSP refused


@pytest.fixture
def registered(site: Server, new_person: Any) -> Person:
    """A person registered through a registration link on the module's server, signed in."""
    person = new_person(site)
    person.register(registration_url(site, person.email, name="Pat Example"))
    return person


# -- screenshots ----------------------------------------------------------------------------------


def shoot(person: Person, name: str) -> None:
    """Save the current page at phone and desktop width (full page) under test-artifacts/screenshots/."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page = person.page
    original = page.viewport_size
    for label, size in (("phone", PHONE), ("desktop", DESKTOP)):
        page.set_viewport_size(size)
        page.screenshot(path=str(SCREENSHOTS / f"{name}-{label}.png"), full_page=True)
        # Nothing may be wider than the screen (a sideways scroll on a phone).
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"{name} at {label} width scrolls sideways by {overflow}px"
    if original:
        page.set_viewport_size(original)


def api(server: Server, method: str, path: str, **kwargs: Any) -> httpx.Response:
    with server.admin() as http:
        return http.request(method, path, **kwargs)


def problem_json(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    return dict(json.loads(response.text))


def chromium_available() -> bool:
    return Path(CHROMIUM).exists() and shutil.which(CHROMIUM) is not None

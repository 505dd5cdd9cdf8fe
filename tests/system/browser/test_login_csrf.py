"""Login CSRF in Chromium (issue 19 item 3, D8): a page on another origin (a second local HTTP
server, http://127.0.0.1:OTHER — another site than http://localhost:PORT) auto-submits an
``enctype="text/plain"`` form to the passkey verify routes, carrying the attacker's own valid
passkey response (signed in the attacker's browser, to options that browser fetched). The victim's
browser, which has no session, must not end up signed in — as the attacker or anyone.
"""

from __future__ import annotations

import html
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest
from support.soft_webauthn import PasskeyBrowser

from conftest import Server, unique_email
from system.browser.conftest import origin_of, registration_url


class EvilSite:
    """The attacker's web site: serves one page, whatever was last put up."""

    def __init__(self) -> None:
        self.page = b""
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(site.page)))
                self.end_headers()
                self.wfile.write(site.page)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/"

    def auto_submit(self, action: str, body: dict[str, Any]) -> None:
        """A form that a browser posts as ``text/plain``: ``name=value``, here the JSON of ``body``
        with a junk member ``"x": "="`` swallowing the ``=``."""
        encoded = json.dumps(body)
        name, value = encoded[:-1] + ', "x": "', '"}'
        self.page = (
            "<!doctype html><title>Win a prize</title>"
            f'<form method="POST" action="{html.escape(action)}" enctype="text/plain">'
            f'<input type="hidden" name="{html.escape(name)}" value="{html.escape(value)}"></form>'
            "<script>document.forms[0].submit()</script>"
        ).encode()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def evil() -> Iterator[EvilSite]:
    site = EvilSite()
    yield site
    site.close()


def attacker_browser(site: Server) -> PasskeyBrowser:
    """The attacker's own browser (a software authenticator), on our origin."""
    return PasskeyBrowser(f"http://127.0.0.1:{site.port}", origin_of(site))


def token_of(url: str) -> str:
    return urlsplit(url).query.split("token=", 1)[1]


def forged_login(site: Server) -> dict[str, Any]:
    mallory = attacker_browser(site)
    registered = mallory.register(token_of(registration_url(site, unique_email("mallory"))))
    assert registered.status_code == 200, registered.text
    options = mallory.request("POST", "/api/webauthn/login/options", json_body={})
    assert options.status_code == 200, options.text
    return {"response": mallory.authenticator.get(options.json(), origin_of(site))}


def forged_registration(site: Server) -> dict[str, Any]:
    mallory = attacker_browser(site)
    token = token_of(registration_url(site, unique_email("mallory-reg")))
    options = mallory.request("POST", "/api/webauthn/register/options", json_body={"token": token})
    assert options.status_code == 200, options.text
    return {"token": token, "response": mallory.authenticator.create(options.json(), origin_of(site))}


def visit(victim: Any, evil: EvilSite) -> Any:
    """The victim opens the attacker's page; its form posts itself; wait for what it led to."""
    with victim.page.expect_navigation(url=lambda url: url.startswith(victim.origin)) as navigation:
        victim.page.goto(evil.url)
    return navigation.value


@pytest.mark.parametrize("what", ["login", "register"])
def test_a_cross_site_form_does_not_sign_the_visitor_in(
    site: Server, new_person: Any, evil: EvilSite, what: str
) -> None:
    victim = new_person(site)
    victim.page.set_default_navigation_timeout(15_000)
    body = forged_login(site) if what == "login" else forged_registration(site)
    evil.auto_submit(f"{victim.origin}/api/webauthn/{what}/verify", body)
    answer = visit(victim, evil)
    assert victim.session_cookie() is None  # no session, as anyone (before the fix: the attacker's)
    victim.goto("/account")
    assert victim.page.url.startswith(f"{victim.origin}/login")  # not signed in
    assert victim.fetch("GET", "/api/me")["status"] == 401
    assert answer is not None and answer.status == 403  # refused as cross-site
    victim.console.clear()  # the refused post's page logs nothing of ours; the attacker's page is not ours to judge

"""Device-code phishing of an administrator (issue 19 item 7, D12), in Chromium: the /device page
tells an administrator what the device will be able to do for them — administrator rights spelled
out only when the device asked for the `admin` scope, "none" otherwise — with the client's address
and the time the request started; the tokens that come out match what the page said."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
from playwright.sync_api import expect

from system.browser.conftest import origin_of, registration_url, shoot

GRANT = "urn:ietf:params:oauth:grant-type:device_code"


def _start(site: Any, scope: str) -> dict[str, Any]:
    r = httpx.post(
        f"{origin_of(site)}/device_authorization", data={"client_id": "grantd-cli", "scope": scope}
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def _token(site: Any, pair: dict[str, Any]) -> str:
    deadline = time.monotonic() + 30
    while True:
        r = httpx.post(
            f"{origin_of(site)}/token",
            data={"grant_type": GRANT, "device_code": pair["device_code"], "client_id": "grantd-cli"},
        )
        if r.status_code == 200:
            return str(r.json()["access_token"])
        assert r.json()["error"] in ("authorization_pending", "slow_down") and time.monotonic() < deadline, (
            r.text
        )
        time.sleep(pair["interval"] + (5 if r.json()["error"] == "slow_down" else 0))


def _admin_users(site: Any, token: str) -> int:
    return httpx.get(
        f"{origin_of(site)}/api/admin/users", headers={"Authorization": f"Bearer {token}"}
    ).status_code


def test_the_device_page_tells_an_administrator_what_they_hand_over(site, new_person):
    admin = new_person(site)
    admin.register(registration_url(site, admin.email, admin=True, name="Ada Admin"))
    page = admin.page

    # A stranger's terminal that did not ask for admin: the page says it gets none; its token has none.
    plain = _start(site, "openid email profile offline_access")
    admin.goto(f"/device?user_code={plain['user_code']}")
    expect(page.locator('[data-device-admin="none"]')).to_contain_text("did not ask for them")
    expect(page.locator('[data-field="client_address"]')).to_have_text(re.compile(r"^(127\.0\.0\.1|::1)$"))
    expect(page.locator('[data-field="created_at"] time')).to_have_text(re.compile(r"\d\d:\d\d:\d\d UTC$"))
    page.get_by_role("button", name="Approve").click()
    page.locator("[data-status]").filter(has_text="Approved").wait_for()
    assert _admin_users(site, _token(site, plain)) == 403

    # One that asked for admin: a warning listing the administrator rights it would get.
    elevated = _start(site, "openid email profile offline_access admin")
    admin.goto(f"/device?user_code={elevated['user_code']}")
    warning = page.locator('[data-device-admin="granted"]')
    expect(warning).to_be_visible()
    expect(warning).to_contain_text("asks for administrator rights")
    for power in ("delete people", "delete any agent", "every agent's grants", "signing keys"):
        expect(page.locator('[data-field="admin"]')).to_contain_text(power)
    shoot(admin, "device-admin-warning")  # readable on a phone, nothing scrolls sideways
    page.get_by_role("button", name="Approve").click()
    page.locator("[data-status]").filter(has_text="Approved").wait_for()
    assert _admin_users(site, _token(site, elevated)) == 200

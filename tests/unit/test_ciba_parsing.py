"""CIBA `/bc-authorize` parsing (OpenID CIBA Core + RFC 9396, D16): tables of good and bad requests
with their error codes, the binding message's characters, the grantd_command detail turned into the
grant body grantd.services.grant_requests.parse_request validates (run against real services on SQLite), and
the ping endpoint rule."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grantd.oauth.ciba import (
    check_binding_message,
    check_notification_endpoint,
    grant_request,
    parse_bc_authorize,
)
from grantd.oauth.errors import OAuthError

from conftest import free_port, toml_config

DETAIL = {
    "type": "grantd_command",
    "locations": ["db1.example.com"],
    "actions": ["execute"],
    "command": ["systemctl", "restart", "nginx"],
    "run_as": "root",
    "audience": "grantd",
    "grant_type": "once",
}
GOOD = {
    "scope": "openid",
    "login_hint": "ann@example.com",
    "binding_message": "Restart nginx 4711",
    "authorization_details": json.dumps([DETAIL]),
}


def parse(**change):
    params = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    return parse_bc_authorize(params)


def test_a_good_request():
    request = parse(requested_expiry="120")
    assert request.hint.kind == "email" and request.hint.value == "ann@example.com"
    assert request.binding_message == "Restart nginx 4711" and request.requested_expiry == 120
    assert request.grant_body == {
        "target_host": "db1.example.com",
        "command": ["systemctl", "restart", "nginx"],
        "run_as": "root",
        "audience": "grantd",
        "grant_type": "once",
        "binding_message": "Restart nginx 4711",
    }
    assert request.details == [DETAIL]


def test_form_lists_and_json_bodies_parse_alike():
    form = parse_bc_authorize({k: [v] for k, v in GOOD.items()})
    as_json = parse_bc_authorize({**GOOD, "authorization_details": [DETAIL], "requested_expiry": 60})
    assert form.grant_body == as_json.grant_body == parse().grant_body and as_json.requested_expiry == 60


@pytest.mark.parametrize(
    "hint,kind,value",
    [
        ("ann@example.com", "email", "ann@example.com"),
        ("group:ops", "group", "ops"),
        ("policy", "policy", "policy"),
    ],
)
def test_login_hints(hint, kind, value):
    request = parse(login_hint=hint)
    assert (request.hint.kind, request.hint.value) == (kind, value)


def test_the_other_hints():
    assert parse(login_hint=None, login_hint_token="eyJ.a.b").hint.kind == "login_hint_token"
    assert parse(login_hint=None, id_token_hint="eyJ.a.b").hint.kind == "id_token_hint"


BAD = [
    ({"scope": None}, "invalid_scope"),
    ({"scope": "profile email"}, "invalid_scope"),
    ({"scope": "openidx"}, "invalid_scope"),
    ({"login_hint": None}, "invalid_request"),
    ({"login_hint_token": "eyJ.a.b"}, "invalid_request"),  # two hints
    ({"id_token_hint": "eyJ.a.b"}, "invalid_request"),
    ({"login_hint": None, "login_hint_token": "x", "id_token_hint": "y"}, "invalid_request"),
    ({"login_hint": "ann"}, "invalid_request"),
    ({"login_hint": "group:"}, "invalid_request"),
    ({"login_hint": ""}, "invalid_request"),
    ({"login_hint": "ann@example.com\n"}, "invalid_request"),
    ({"login_hint": ["a@example.com", "b@example.com"]}, "invalid_request"),
    ({"login_hint": {"email": "a"}}, "invalid_request"),
    ({"binding_message": "x" * 65}, "invalid_binding_message"),
    ({"binding_message": "   "}, "invalid_binding_message"),
    ({"binding_message": "ok\x1b[2Jfake"}, "invalid_binding_message"),
    ({"binding_message": "line\nbreak"}, "invalid_binding_message"),
    ({"binding_message": "tab\there"}, "invalid_binding_message"),
    ({"binding_message": "rtl \u202egnp.exe"}, "invalid_binding_message"),
    ({"binding_message": "zero\u200bwidth"}, "invalid_binding_message"),
    ({"binding_message": "tag\U000e0041"}, "invalid_binding_message"),
    ({"binding_message": "nbsp\u00a0x"}, "invalid_binding_message"),
    ({"binding_message": "hangul\u3164filler"}, "invalid_binding_message"),
    ({"requested_expiry": "0"}, "invalid_request"),
    ({"requested_expiry": "-5"}, "invalid_request"),
    ({"requested_expiry": "1e3"}, "invalid_request"),
    ({"requested_expiry": "3601"}, "invalid_request"),
    ({"requested_expiry": "１２"}, "invalid_request"),
    ({"user_code": "1234"}, "invalid_request"),
    ({"request": "eyJ.a.b"}, "request_not_supported"),
    ({"authorization_details": None}, "invalid_authorization_details"),
    ({"authorization_details": "not json"}, "invalid_authorization_details"),
    ({"authorization_details": "{}"}, "invalid_authorization_details"),
    ({"authorization_details": "[]"}, "invalid_authorization_details"),
    ({"authorization_details": "[1]"}, "invalid_authorization_details"),
    ({"authorization_details": json.dumps([DETAIL, DETAIL])}, "invalid_authorization_details"),
    (
        {"authorization_details": json.dumps([{**DETAIL, "type": "payment_initiation"}])},
        "invalid_authorization_details",
    ),
    (
        {"authorization_details": json.dumps([{k: v for k, v in DETAIL.items() if k != "type"}])},
        "invalid_authorization_details",
    ),
    ({"authorization_details": json.dumps([{**DETAIL, "locations": []}])}, "invalid_authorization_details"),
    (
        {"authorization_details": json.dumps([{**DETAIL, "locations": ["a", "b"]}])},
        "invalid_authorization_details",
    ),
    (
        {"authorization_details": json.dumps([{**DETAIL, "locations": "db1"}])},
        "invalid_authorization_details",
    ),
    (
        {"authorization_details": json.dumps([{**DETAIL, "actions": ["read"]}])},
        "invalid_authorization_details",
    ),
    (
        {"authorization_details": json.dumps([{**DETAIL, "actions": ["execute", "read"]}])},
        "invalid_authorization_details",
    ),
    (
        {"authorization_details": json.dumps([{k: v for k, v in DETAIL.items() if k != "command"}])},
        "invalid_authorization_details",
    ),
    (
        {"authorization_details": json.dumps([{k: v for k, v in DETAIL.items() if k != "audience"}])},
        "invalid_authorization_details",
    ),
    (
        {"authorization_details": json.dumps([{**DETAIL, "cmd_hash": "sha256:00"}])},
        "invalid_authorization_details",
    ),
    ({"authorization_details": "[" * 20000}, "invalid_authorization_details"),
]


@pytest.mark.parametrize("change,error", BAD, ids=[f"{i}-{e}" for i, (_, e) in enumerate(BAD)])
def test_bad_requests_get_cibas_codes(change, error):
    with pytest.raises(OAuthError) as err:
        parse(**change)
    assert err.value.error == error and err.value.status == 400 and err.value.description


def test_ping_mode_needs_a_notification_token():
    with pytest.raises(OAuthError, match="client_notification_token"):
        parse_bc_authorize(GOOD, ping=True)
    assert (
        parse_bc_authorize(
            {**GOOD, "client_notification_token": "abc-123"}, ping=True
        ).client_notification_token
        == "abc-123"
    )
    with pytest.raises(OAuthError):
        parse_bc_authorize({**GOOD, "client_notification_token": "has space"}, ping=True)


def test_binding_messages_that_show_as_themselves_pass():
    for ok in ("Restart nginx", "Überweisung 4711 ✓", "日本語のメッセージ", "x" * 64, None):
        assert check_binding_message(ok) == ok


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "scope",
                "login_hint",
                "login_hint_token",
                "id_token_hint",
                "binding_message",
                "requested_expiry",
                "authorization_details",
                "client_notification_token",
            ]
        ),
        st.one_of(
            st.none(),
            st.text(max_size=30),
            st.integers(),
            st.booleans(),
            st.lists(st.text(max_size=5), max_size=2),
        ),
    )
)
def test_any_parameters_parse_or_get_an_oauth_400(params):
    try:
        parse_bc_authorize({**GOOD, **params})
    except OAuthError as err:
        assert err.status == 400 and err.error in (
            "invalid_request",
            "invalid_scope",
            "invalid_binding_message",
            "invalid_authorization_details",
            "request_not_supported",
        )


# -- the detail through the one grant validation (real services on SQLite) --------------------------


async def _through_grants(directory: Path, details: list[dict]) -> list[object]:
    from grantd.config import load
    from grantd.core.principals import Kind, Principal
    from grantd.plugin_manager import build_plugin_manager
    from grantd.services.context import open_services

    (directory / "management-token").write_text("t" * 40)
    (directory / "management-token").chmod(0o600)
    path = directory / "grantd.toml"
    path.write_text(toml_config(free_port(), db=str(directory / "grantd.db")))
    config = load(path)
    services = await open_services(config, build_plugin_manager(config))
    agent = Principal(Kind.AGENT, "agent-1", "bot@example.com")
    answers: list[object] = []
    try:
        for detail in details:
            request = parse_bc_authorize({**GOOD, "authorization_details": json.dumps([detail])})
            try:
                answers.append(await grant_request(services, agent, request))
            except OAuthError as err:
                answers.append(err)
    finally:
        services.store.close()
    return answers


def test_the_detail_becomes_the_grant_parse_request_makes(tmp_path):
    bad = [
        {**DETAIL, "locations": ["db1/../x"]},
        {**DETAIL, "command": []},
        {**DETAIL, "command": "rm -rf /"},
        {**DETAIL, "grant_type": "forever"},
        {**DETAIL, "run_as": "root;id"},
        {**DETAIL, "duration": -1},
        {**DETAIL, "audience": ""},
    ]
    answers = asyncio.run(_through_grants(tmp_path, [DETAIL, *bad]))
    stored, requester_id = answers[0]  # type: ignore[misc]
    assert requester_id == "agent-1" and stored["requester"] == "bot@example.com"
    assert stored["command"] == DETAIL["command"] and stored["cmd_hash"].startswith("sha256:")
    assert stored["target_host"] == "db1.example.com" and stored["binding_message"] == "Restart nginx 4711"
    for answer, detail in zip(answers[1:], bad, strict=True):
        assert isinstance(answer, OAuthError), detail
        assert answer.error == "invalid_authorization_details" and answer.description.startswith(
            "grantd_command."
        )


# -- ping notification endpoints ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/ciba",
        "https://93.184.215.14/cb",
        "https://[2606:4700::1]/cb",
        "https://hooks.example.com:8443/x?y=1",
    ],
)
def test_public_https_endpoints_pass(url):
    assert check_notification_endpoint(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.com/ciba",
        "https://127.0.0.1/cb",
        "https://10.0.0.5/cb",
        "https://169.254.169.254/latest",
        "https://[::1]/cb",
        "https://[::ffff:10.0.0.1]/cb",
        "https://localhost/cb",
        "https://api.localhost/cb",
        "https://printer.local/cb",
        "https://intranet/cb",
        "https://127.1/cb",
        "https://2130706433/cb",
        "https://0x7f.0.0.1/cb",
        "https://user:pw@hooks.example.com/cb",
        "https://hooks.example.com/#f",
        "ftp://x.example/",
        "",
        None,
        5,
        "https://hooks.example.com:99999/",
        "https:///nohost",
        "https://hooks.example.com/a b",
    ],
)
def test_local_or_plain_http_endpoints_are_refused(url):
    with pytest.raises(ValueError):
        check_notification_endpoint(url)


def test_notification_allow_opens_cidrs_and_url_prefixes():
    allow = ["10.0.0.0/8", "http://hooks.internal:8080/ciba", "fd00::/8"]
    assert check_notification_endpoint("http://10.1.2.3/cb", allow)
    assert check_notification_endpoint("https://[fd00::5]/cb", allow)
    assert check_notification_endpoint("http://hooks.internal:8080/ciba", allow)
    assert check_notification_endpoint("http://hooks.internal:8080/ciba/agent-1", allow)
    for still_refused in (
        "http://hooks.internal:8080/cibax",
        "http://hooks.internal:8081/ciba",
        "https://hooks.internal:8080/ciba",
        "http://hooks.internal.evil.example:8080/ciba",
        "http://11.0.0.1/cb",
        "http://127.0.0.1/cb",
    ):
        with pytest.raises(ValueError):
            check_notification_endpoint(still_refused, allow)

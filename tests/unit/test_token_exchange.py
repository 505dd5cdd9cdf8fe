"""Token exchange (RFC 8693, D16): the delegation token's claims, request validation with RFC 8693's
codes, the exchanged token's `act` nesting, lifetime and depth, and the policy rule that a token
carrying `act` never approves, denies, reviews, delegates or administers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grantd.core import policy
from grantd.core.errors import Problem
from grantd.oauth.errors import OAuthError
from grantd.oauth.exchange import (
    GRANT_TYPE,
    JWT_TOKEN_TYPE,
    MAX_DEPTH,
    act_depth,
    delegation_token_claims,
    exchanged_claims,
    parse_request,
)

ISSUER = "https://grantd.example.com"
NOW = 1_800_000_000
DELEGATION = {"id": "d-1", "delegator": "ann@example.com", "delegate": "bot@example.com", "expires_at": None}


def delegation_token(**change):
    claims = delegation_token_claims({**DELEGATION, **change}, issuer=ISSUER, now=NOW)
    return claims


def test_the_delegation_token_names_delegator_and_delegate():
    claims = delegation_token()
    assert claims["sub"] == "ann@example.com" and claims["may_act"] == {"sub": "bot@example.com"}
    assert claims["delegation_id"] == "d-1" and claims["iss"] == ISSUER and "act" not in claims
    assert claims["exp"] == NOW + 30 * 24 * 3600
    assert delegation_token(expires_at=(NOW + 600) * 1000)["exp"] == NOW + 600


def test_the_delegate_gets_sub_delegator_act_agent():
    claims = exchanged_claims(
        delegation_token(),
        actor="bot@example.com",
        issuer=ISSUER,
        now=NOW,
        delegation_end=None,
        audience=None,
    )
    assert claims["sub"] == "ann@example.com" and claims["act"] == {"sub": "bot@example.com"}
    assert claims["delegation_id"] == "d-1" and claims["aud"] == ISSUER and "may_act" not in claims
    assert claims["exp"] == NOW + 15 * 60


@pytest.mark.parametrize(
    "end,subject_exp,expected",
    [
        (None, None, NOW + 900),
        (NOW + 60, None, NOW + 60),
        (None, NOW + 30, NOW + 30),
        (NOW + 10_000, NOW + 5000, NOW + 900),
    ],
)
def test_never_longer_than_the_delegation_the_subject_or_15_minutes(end, subject_exp, expected):
    subject = delegation_token()
    subject["exp"] = subject_exp
    claims = exchanged_claims(
        subject, actor="bot@example.com", issuer=ISSUER, now=NOW, delegation_end=end, audience=None
    )
    assert claims["exp"] == expected


def test_an_ended_delegation_gives_nothing():
    with pytest.raises(OAuthError) as err:
        exchanged_claims(
            delegation_token(),
            actor="bot@example.com",
            issuer=ISSUER,
            now=NOW,
            delegation_end=NOW,
            audience=None,
        )
    assert err.value.error == "invalid_grant"


def test_only_the_named_actor_may_exchange():
    for who in ("eve@example.com", "ann@example.com", ""):
        with pytest.raises(OAuthError) as err:
            exchanged_claims(
                delegation_token(), actor=who, issuer=ISSUER, now=NOW, delegation_end=None, audience=None
            )
        assert err.value.error == "invalid_grant"


def test_the_audience_is_the_requested_resource():
    claims = exchanged_claims(
        delegation_token(),
        actor="bot@example.com",
        issuer=ISSUER,
        now=NOW,
        delegation_end=None,
        audience="https://api.example.com/",
    )
    assert claims["aud"] == "https://api.example.com/"


def test_chains_nest_and_never_drop_act():
    first = exchanged_claims(
        delegation_token(),
        actor="bot@example.com",
        issuer=ISSUER,
        now=NOW,
        delegation_end=None,
        audience=None,
        may_act="helper@example.com",
    )
    assert first["may_act"] == {"sub": "helper@example.com"}
    with pytest.raises(OAuthError):  # the first actor may no longer use it once it names the next
        exchanged_claims(
            first, actor="bot@example.com", issuer=ISSUER, now=NOW, delegation_end=None, audience=None
        )
    second = exchanged_claims(
        first, actor="helper@example.com", issuer=ISSUER, now=NOW, delegation_end=None, audience=None
    )
    assert second["sub"] == "ann@example.com"
    assert second["act"] == {"sub": "helper@example.com", "act": {"sub": "bot@example.com"}}
    # a token with act but no may_act: only its current actor may re-exchange it, and it stays nested
    again = exchanged_claims(
        second, actor="helper@example.com", issuer=ISSUER, now=NOW, delegation_end=None, audience=None
    )
    assert act_depth(again["act"]) == 3 and again["act"]["act"] == second["act"]
    with pytest.raises(OAuthError):
        exchanged_claims(
            second, actor="bot@example.com", issuer=ISSUER, now=NOW, delegation_end=None, audience=None
        )


def test_depth_is_at_most_four():
    subject = delegation_token()
    actor = "bot@example.com"
    for _ in range(MAX_DEPTH):
        subject = exchanged_claims(
            subject, actor=actor, issuer=ISSUER, now=NOW, delegation_end=None, audience=None
        )
    assert act_depth(subject["act"]) == MAX_DEPTH
    with pytest.raises(OAuthError, match="at most 4"):
        exchanged_claims(subject, actor=actor, issuer=ISSUER, now=NOW, delegation_end=None, audience=None)
    with pytest.raises(OAuthError):  # naming a next actor beyond the depth
        three = {**subject, "act": {"sub": actor, "act": {"sub": "x@e", "act": {"sub": "y@e"}}}}
        exchanged_claims(
            three,
            actor=actor,
            issuer=ISSUER,
            now=NOW,
            delegation_end=None,
            audience=None,
            may_act="z@example.com",
        )


@pytest.mark.parametrize(
    "subject",
    [
        {
            "sub": "ann@example.com",
            "delegation_id": "d-1",
            "may_act": {"sub": "bot@example.com"},
        },  # no token_use: an ordinary token
        {
            "sub": "ann@example.com",
            "may_act": {"sub": "bot@example.com"},
            "token_use": "delegation",
        },  # no delegation_id
        {"sub": "ann@example.com", "delegation_id": "d-1", "act": "bot@example.com"},  # malformed act
        {"sub": "ann@example.com", "delegation_id": "d-1", "act": {"sub": ""}},
        {"delegation_id": "d-1", "token_use": "delegation", "may_act": {"sub": "bot@example.com"}},
    ],
)
def test_other_subject_tokens_are_invalid_grants(subject):
    with pytest.raises(OAuthError) as err:
        exchanged_claims(
            subject, actor="bot@example.com", issuer=ISSUER, now=NOW, delegation_end=None, audience=None
        )
    assert err.value.error == "invalid_grant"


GOOD = {"grant_type": GRANT_TYPE, "subject_token": "eyJ.x.y", "subject_token_type": JWT_TOKEN_TYPE}


def test_a_good_request_parses():
    request = parse_request({**GOOD, "resource": "https://api.example.com/v1", "scope": "read"})
    assert (request.subject_token, request.audience, request.scope) == (
        "eyJ.x.y",
        "https://api.example.com/v1",
        "read",
    )
    assert parse_request(GOOD).audience is None
    assert parse_request({**GOOD, "audience": "billing"}).audience == "billing"
    assert parse_request({k: [v] for k, v in GOOD.items()}).subject_token == "eyJ.x.y"


@pytest.mark.parametrize(
    "change,error",
    [
        ({"grant_type": "authorization_code"}, "unsupported_grant_type"),
        ({"grant_type": None}, "unsupported_grant_type"),
        ({"subject_token": None}, "invalid_request"),
        ({"subject_token": ""}, "invalid_request"),
        ({"subject_token": 7}, "invalid_request"),
        ({"subject_token_type": None}, "invalid_request"),
        ({"subject_token_type": "urn:ietf:params:oauth:token-type:saml2"}, "invalid_request"),
        ({"subject_token_type": "urn:ietf:params:oauth:token-type:access_token"}, "invalid_request"),
        ({"actor_token": "x", "actor_token_type": JWT_TOKEN_TYPE}, "invalid_request"),
        ({"requested_token_type": "urn:ietf:params:oauth:token-type:refresh_token"}, "invalid_request"),
        ({"subject_token": ["a", "b"]}, "invalid_request"),
        ({"resource": "not a uri"}, "invalid_target"),
        ({"resource": "https://api.example.com/#frag"}, "invalid_target"),
        ({"resource": ["https://a.example/", "https://b.example/"]}, "invalid_target"),
        ({"resource": "https://a.example/", "audience": "other"}, "invalid_target"),
        ({"audience": ""}, "invalid_target"),
        ({"audience": 5}, "invalid_target"),
    ],
)
def test_bad_requests_get_rfc8693_codes(change, error):
    params = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(OAuthError) as err:
        parse_request(params)
    assert err.value.error == error and err.value.status == 400 and err.value.description


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "grant_type",
                "subject_token",
                "subject_token_type",
                "resource",
                "audience",
                "actor_token",
                "scope",
                "requested_token_type",
            ]
        ),
        st.one_of(st.none(), st.text(max_size=20), st.integers(), st.lists(st.text(max_size=5), max_size=3)),
    )
)
def test_any_request_parses_or_gets_an_oauth_error(params):
    try:
        parse_request(params)
    except OAuthError as err:
        assert err.status == 400 and err.error in (
            "invalid_request",
            "unsupported_grant_type",
            "invalid_target",
        )


@pytest.mark.parametrize("action", sorted(policy.ACTIONS))
def test_a_token_with_act_never_decides_delegates_or_administers(action):
    assert policy.may_act_with_token({"sub": "ann@example.com"}, action)
    for claims in ({"act": {"sub": "bot@example.com"}}, {"act": None}, {"act": {}}):
        allowed = policy.may_act_with_token(claims, action)
        assert allowed == (action in ("read", "request"))
        if not allowed:
            with pytest.raises(Problem) as err:
                policy.refuse_acting_token(claims, action)
            assert err.value.status == 403
        else:
            policy.refuse_acting_token(claims, action)


def test_an_unknown_action_is_a_programming_error():
    with pytest.raises(ValueError):
        policy.may_act_with_token({}, "approve-all")

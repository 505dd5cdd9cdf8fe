"""JWT attacks by token kind: one kind is never accepted for another (D3), approvals claims at elevate (D13), DPoP proofs (D16), delegation and exchanged tokens. Shared fixtures: test_jwt_attacks."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from elevate_support import Target, elevate, make_target
from system import test_jwt_attacks

# fixtures and helpers shared with the other parts (pytest finds a fixture by its module-level name)
ARGV = test_jwt_attacks.ARGV
Kit = test_jwt_attacks.Kit
at_consume = test_jwt_attacks.at_consume
at_me = test_jwt_attacks.at_me
at_verify = test_jwt_attacks.at_verify
b64url = test_jwt_attacks.b64url
b64url_decode = test_jwt_attacks.b64url_decode
kit = test_jwt_attacks.kit
target = test_jwt_attacks.target


# -- token kinds (D3, issue 19 item 12): one kind is never accepted for another -----------------------
#
# Four kinds of token of ours, four places that accept one: the API bearer (/api/me: identity
# tokens and API-capable access tokens), /userinfo (access tokens), consume and verify (AuthZ-JWTs).
# Every real token is tried at every place: where it does not belong it is refused, where it
# belongs it is accepted (the positive controls of the same table). Then each kind's own claims,
# signed with our key under the other kind's `typ` (`JWT` <-> `at+jwt`, RFC 9068), are refused at
# the kind's own place: the `typ` is checked, not only the claims.

PLACES = ("bearer", "userinfo", "consume", "verify")
BELONGS = {
    ("identity", "bearer"),
    ("access", "bearer"),
    ("access", "userinfo"),
    ("authz", "consume"),
    ("authz", "verify"),
}


@pytest.fixture(scope="module")
def kinds(kit: Kit) -> dict[str, str]:
    from oauth_support import Person, login

    if "access" not in kit.tokens:
        answer = login(kit.srv, Person(kit.srv))  # apes-cli: an API-capable access token and an ID token
        kit.tokens["access"], kit.tokens["id"] = answer["access_token"], answer["id_token"]
    return {kind: kit.tokens[kind] for kind in ("identity", "authz", "access", "id")}


def at_userinfo(kit: Kit, token: str) -> Any:
    with kit.srv.client(token) as http:
        return http.get("/userinfo")


def accepted_at(kit: Kit, place: str, token: str) -> bool:
    """True if ``place`` accepted the token; asserts the refusal has the place's shape."""
    if place == "verify":
        r = at_verify(kit, token)
        assert r.status_code == 200, r.text
        return r.json()["valid"] is True  # type: ignore[no-any-return]
    r = {"bearer": at_me, "userinfo": at_userinfo, "consume": at_consume}[place](kit, token)
    assert r.status_code in (200, 401), r.text
    if r.status_code == 401:
        assert r.headers.get("www-authenticate", "").startswith("Bearer"), r.headers
        return False
    return place != "consume" or r.json().get("status") in ("valid", "consumed")


def test_each_kind_is_minted_with_its_typ(kinds: dict[str, str]) -> None:
    typs = {kind: jwt.get_unverified_header(token)["typ"] for kind, token in kinds.items()}
    assert typs == {"identity": "JWT", "authz": "JWT", "access": "at+jwt", "id": "JWT"}


@pytest.mark.parametrize("kind", ["identity", "authz", "access", "id"])
@pytest.mark.parametrize("place", PLACES)
def test_a_kind_is_accepted_only_where_it_belongs(
    kit: Kit, kinds: dict[str, str], kind: str, place: str
) -> None:
    assert accepted_at(kit, place, kinds[kind]) is ((kind, place) in BELONGS)


SWAPPED_TYP = {"identity": "at+jwt", "authz": "at+jwt", "access": "JWT", "id": "at+jwt"}


@pytest.mark.parametrize("spelling", ["swapped", "missing", "media type of the other kind"])
@pytest.mark.parametrize("kind", ["identity", "authz", "access", "id"])
def test_a_kinds_claims_under_another_typ_are_refused_everywhere(
    kit: Kit, kinds: dict[str, str], kind: str, spelling: str
) -> None:
    claims = jwt.decode(kinds[kind], options={"verify_signature": False})
    typ = {
        "swapped": SWAPPED_TYP[kind],
        "missing": None,
        "media type of the other kind": "application/" + SWAPPED_TYP[kind],
    }[spelling]
    token = kit.ours(claims, typ=typ)
    assert all(not accepted_at(kit, place, token) for place in PLACES)
    # the same claims under the kind's own typ (media-type spelling too) are accepted: the typ decided
    own = "at+jwt" if kind == "access" else "JWT"
    for spelled in (own, "application/" + own):
        places = [p for k, p in BELONGS if k == kind]
        assert all(accepted_at(kit, place, kit.ours(claims, typ=spelled)) for place in places)


def test_an_authz_jwt_typed_as_an_access_token_is_refused_by_elevate(
    kit: Kit, kinds: dict[str, str], target: Target
) -> None:
    claims = jwt.decode(kinds["authz"], options={"verify_signature": False})
    result = elevate(target, ARGV, token=kit.ours(claims, typ="at+jwt"))
    assert result.returncode == 5 and result.stdout.strip() != "0", (result.stdout, result.stderr)
    assert "access token" in result.stderr


@pytest.mark.parametrize("body", [b"", b"[]", b'"x"', b"null", b"1", b"   "])
def test_verify_without_a_json_object_is_a_400_problem(kit: Kit, body: bytes) -> None:
    """D2: verify's body is required; a missing, empty or non-object body is a 400, not 200 {valid: false}."""
    with kit.srv.client() as http:
        r = http.post("/api/grants/verify", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("application/problem+json")


# -- approvals claims at elevate (D13, issue 22): signed by the server's own key, still no help ----------------


def _approvals_variant(kit: Kit, name: str) -> dict[str, Any]:
    claims = kit.claims("authz")
    by, other = claims["decided_by"], "second-approver@example.com"

    def vote(sub: Any) -> dict[str, Any]:
        return {"sub": sub, "at": claims["iat"], "via": "web", "req": "prod-root/sre"}

    approvals: Any = {
        "two people (control)": [vote(by), vote(other)],
        "the same person twice": [vote(by), vote(by)],
        "the same person in another case": [vote(by), vote(by.upper())],
        "a non-string sub": [vote(by), vote(12345)],
        "a list as sub": [vote(by), vote([other])],
        "approvals not a list": {"0": vote(by), "1": vote(other)},
        "approvals as a string": f"{by},{other}",
        "a rule entry the host never opted in to": [vote(by), {"kind": "rule", "rule": "r1", "reason": "x"}],
    }[name]
    return {**claims, "approvals": approvals, "quorum": "2/2"}


APPROVALS_REFUSALS = {
    "the same person twice": "not_enough_approvals",
    "the same person in another case": "not_enough_approvals",
    "a non-string sub": "malformed_token",
    "a list as sub": "malformed_token",
    "approvals not a list": "malformed_token",
    "approvals as a string": "malformed_token",
    "a rule entry the host never opted in to": "policy_not_allowed",
}


@pytest.fixture(scope="module")
def quorum_target(kit: Kit, tmp_path_factory: pytest.TempPathFactory) -> Target:
    claims = kit.claims("authz")
    return make_target(
        tmp_path_factory.mktemp("elevate-quorum"),
        [claims["iss"]],
        allowed_audiences=["escapes"],
        allowed_approvers=[claims["decided_by"], "second-approver@example.com"],
        min_approvals=2,
    )


def test_two_signed_approvals_meet_the_hosts_quorum(kit: Kit, quorum_target: Target) -> None:
    """The positive control: the server's key, two distinct people, a host with min_approvals = 2."""
    result = elevate(quorum_target, ARGV, token=kit.ours(_approvals_variant(kit, "two people (control)")))
    assert result.returncode == 0 and result.stdout.strip() == "0", result.stderr
    alone = elevate(quorum_target, ARGV, token=kit.tokens["authz"])  # the real token: one approver
    assert alone.returncode == 5 and '"not_enough_approvals"' in alone.stderr, alone.stderr


@pytest.mark.parametrize("variant", list(APPROVALS_REFUSALS))
def test_forged_approvals_do_not_help_at_elevate(kit: Kit, quorum_target: Target, variant: str) -> None:
    result = elevate(quorum_target, ARGV, token=kit.ours(_approvals_variant(kit, variant)))
    assert result.returncode == 5, (result.returncode, result.stdout, result.stderr)
    assert result.stdout.strip() != "0", "the command ran"
    assert json.loads(result.stderr.strip().splitlines()[-1])["error"] == APPROVALS_REFUSALS[variant]


# -- DPoP proofs (D16, RFC 9449) ---------------------------------------------------------------------
# A DPoP-bound identity token and a bound AuthZ-JWT of the kit's server; each variant changes one
# thing of an otherwise good proof. Refused on the API (401, `WWW-Authenticate: DPoP
# error="invalid_dpop_proof"`) and at consume; a positive control shows the good proof passes.


@dataclass
class DpopKit:
    kit: Kit
    agent: Any
    token: str
    authz: str
    grant_id: str
    other: Any


@pytest.fixture(scope="module")
def dpop_kit(kit: Kit, tmp_path_factory: pytest.TempPathFactory) -> DpopKit:
    from conftest import enroll
    from server.test_dpop_api import _approved_bound_grant, bound_sign_in

    directory = tmp_path_factory.mktemp("dpop-attacks")
    agent = enroll(kit.srv, directory / "a")
    r = bound_sign_in(kit.srv, agent)
    assert r.status_code == 200, r.text
    agent.token = r.json()["token"]
    grant_id, authz = _approved_bound_grant(kit.srv, agent)
    return DpopKit(kit, agent, agent.token, authz, grant_id, enroll(kit.srv, directory / "b"))


def _good(d: DpopKit, method: str, path: str, token: str, **kw: Any) -> str:
    from server.test_dpop_api import proof

    return proof(d.kit.srv, d.agent, method, path, token=token, **kw)


def _private_jwk(d: DpopKit) -> dict[str, Any]:
    priv = d.agent.private_key()
    pub = priv.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return {"kty": "OKP", "crv": "Ed25519", "x": b64url(pub), "d": b64url(priv.private_bytes_raw())}


DPOP_VARIANTS: dict[str, Callable[[DpopKit, str, str, str], list[str]]] = {
    "typ JWT": lambda d, m, p, t: [_good(d, m, p, t, header_extra={"typ": "JWT"})],
    "typ application/dpop+jwt": lambda d, m, p, t: [
        _good(d, m, p, t, header_extra={"typ": "application/dpop+jwt"})
    ],
    "alg none (unsigned)": lambda d, m, p, t: [
        _good(d, m, p, t, header_extra={"alg": "none"}).rsplit(".", 1)[0] + "."
    ],
    "alg ES256": lambda d, m, p, t: [_good(d, m, p, t, header_extra={"alg": "ES256"})],
    "alg HS256": lambda d, m, p, t: [_good(d, m, p, t, header_extra={"alg": "HS256"})],
    "private key in jwk": lambda d, m, p, t: [_good(d, m, p, t, header_extra={"jwk": _private_jwk(d)})],
    "wrong htm": lambda d, m, p, t: [_good(d, "PUT", p, t)],
    "wrong htu path": lambda d, m, p, t: [_good(d, m, p + "x", t)],
    "htu of the Host, not the issuer": lambda d, m, p, t: [
        _good(d, m, p, t, url=d.kit.srv.url.replace("127.0.0.1", "localhost") + p)
    ],
    "wrong ath": lambda d, m, p, t: [_good(d, m, p, t + "A")],
    "no ath": lambda d, m, p, t: [_good(d, m, p, None)],
    "stale iat": lambda d, m, p, t: [_good(d, m, p, t, iat=d.kit.srv.clock.now_s() - 300)],
    "iat in the future": lambda d, m, p, t: [_good(d, m, p, t, iat=d.kit.srv.clock.now_s() + 300)],
    "another agent's key": lambda d, m, p, t: [_good(d, m, p, t, key=d.other.private_key())],
    "tampered payload": lambda d, m, p, t: [_tamper_proof(_good(d, m, p, t))],
    "replayed": lambda d, m, p, t: [_good(d, m, p, t)] * 2,
}


def _tamper_proof(proof: str) -> str:
    header, payload, signature = proof.split(".")
    claims = json.loads(b64url_decode(payload))
    claims["jti"] = claims["jti"] + "x"
    return f"{header}.{b64url(json.dumps(claims).encode())}.{signature}"


def _dpop_request(d: DpopKit, method: str, path: str, token: str, proof: str) -> Any:
    import httpx

    headers = {"Authorization": f"DPoP {token}", "DPoP": proof}
    with httpx.Client(base_url=d.kit.srv.url, timeout=10) as http:
        return http.request(method, path, headers=headers)


def _refused_proof(response: Any, variant: str) -> None:
    assert response.status_code == 401, (variant, response.status_code, response.text)
    assert response.headers["www-authenticate"].startswith("DPoP "), response.headers


def test_dpop_the_good_proofs_are_accepted(dpop_kit: DpopKit) -> None:
    d = dpop_kit
    assert _dpop_request(d, "GET", "/api/me", d.token, _good(d, "GET", "/api/me", d.token)).status_code == 200


@pytest.mark.parametrize("variant", list(DPOP_VARIANTS))
def test_dpop_proof_on_an_authenticated_route(dpop_kit: DpopKit, variant: str) -> None:
    proofs = DPOP_VARIANTS[variant](dpop_kit, "GET", "/api/me", dpop_kit.token)
    for earlier in proofs[:-1]:  # the replay's first use is good
        assert _dpop_request(dpop_kit, "GET", "/api/me", dpop_kit.token, earlier).status_code == 200
    _refused_proof(_dpop_request(dpop_kit, "GET", "/api/me", dpop_kit.token, proofs[-1]), variant)


@pytest.mark.parametrize("variant", [v for v in DPOP_VARIANTS if v != "replayed"])
def test_dpop_proof_at_consume(dpop_kit: DpopKit, variant: str) -> None:
    """The bound once grant stays unconsumed through every bad proof (the last test consumes it)."""
    path = f"/api/grants/{dpop_kit.grant_id}/consume"
    proof = DPOP_VARIANTS[variant](dpop_kit, "POST", path, dpop_kit.authz)[-1]
    _refused_proof(_dpop_request(dpop_kit, "POST", path, dpop_kit.authz, proof), variant)


def test_dpop_bound_tokens_as_bearer_and_a_replaced_key(dpop_kit: DpopKit, tmp_path: Path) -> None:
    d = dpop_kit
    path = f"/api/grants/{d.grant_id}/consume"
    assert at_me(d.kit, d.token).status_code == 401  # downgrade to Bearer
    with d.kit.srv.client(d.authz) as http:
        assert http.post(path).status_code == 401
    good = _good(d, "POST", path, d.authz)
    r = _dpop_request(d, "POST", path, d.authz, good)
    assert r.status_code == 200 and r.json()["status"] == "consumed", r.text
    assert _dpop_request(d, "POST", path, d.authz, good).status_code == 401  # replayed at consume
    # a key replaced mid-session: the bound token dies at once
    from conftest import ssh_keygen

    _, public = ssh_keygen(tmp_path, name="replacement")
    with d.kit.srv.admin() as http:
        assert (
            http.put(f"/api/admin/agents/{d.agent.agent_id}", json={"publicKey": public}).status_code == 200
        )
    _refused_proof(
        _dpop_request(d, "GET", "/api/me", d.token, _good(d, "GET", "/api/me", d.token)), "rekeyed"
    )


# -- delegation and exchanged tokens (D16): their own kinds, never taken for another ------------------


@pytest.fixture(scope="module")
def exchange_kinds(kit: Kit, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from people_support import create_person

    from conftest import enroll
    from server.test_token_exchange_flow import delegate, exchange

    person = create_person(kit.srv)
    agent = enroll(kit.srv, tmp_path_factory.mktemp("exchange-kinds"), owner=person["email"])
    d = delegate(kit.srv, person, agent)
    r = exchange(kit.srv, agent, d["delegation_token"])
    assert r.status_code == 200, r.text
    return {"delegation": d["delegation_token"], "exchanged": r.json()["access_token"]}


def test_a_delegation_token_is_no_credential_anywhere(kit: Kit, exchange_kinds: dict[str, str]) -> None:
    token = exchange_kinds["delegation"]
    assert jwt.get_unverified_header(token)["typ"] == "grantd-delegation+jwt"
    assert all(not accepted_at(kit, place, token) for place in PLACES)


def test_an_exchanged_token_is_a_bearer_only_under_its_own_typ(
    kit: Kit, exchange_kinds: dict[str, str]
) -> None:
    token = exchange_kinds["exchanged"]
    assert jwt.get_unverified_header(token)["typ"] == "grantd-act+jwt"
    assert accepted_at(kit, "bearer", token)  # control: the real one reads
    claims = jwt.decode(token, options={"verify_signature": False})
    for typ in ("JWT", "at+jwt", "grantd-delegation+jwt", None):
        assert all(not accepted_at(kit, place, kit.ours(claims, typ=typ)) for place in PLACES), typ
    # a delegation token's claims under the exchanged kind's typ are still a delegation token: refused
    delegation = jwt.decode(exchange_kinds["delegation"], options={"verify_signature": False})
    assert all(not accepted_at(kit, place, kit.ours(delegation, typ="grantd-act+jwt")) for place in PLACES)

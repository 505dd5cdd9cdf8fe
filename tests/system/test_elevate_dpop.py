"""`grantd elevate` with a DPoP-bound AuthZ-JWT (D16): the grant comes as the JSON line
{authz_jwt, dpop} on --grant-stdin; a bound token (cnf.jkt) runs only with a fresh proof by that key
for POST {iss}/api/grants/{id}/consume, checked locally before consume and forwarded to consume as
`Authorization: DPoP` + `DPoP`; the bare JWT is refused (exit 5, dpop_required). Real elevate
processes against a hand-made issuer (FakeIssuer) whose keys the test holds."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grantd.dpop import ath_of, make_proof, thumbprint_of_raw

from elevate_support import FakeIssuer, attempts, elevate, error_line

ARGV = ["id", "-u"]
AGENT = Ed25519PrivateKey.generate()
OTHER = Ed25519PrivateKey.generate()


def jkt(key: Ed25519PrivateKey) -> str:
    from cryptography.hazmat.primitives import serialization

    return thumbprint_of_raw(
        key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )


@pytest.fixture
def issuer() -> Iterator[FakeIssuer]:
    fake = FakeIssuer().serve()
    yield fake
    fake.close()


def bound(issuer: FakeIssuer, **overrides) -> tuple[str, str]:
    grant_id = str(uuid.uuid4())
    token = issuer.token(ARGV, grant_id=grant_id, cnf={"jkt": jkt(AGENT)}, **overrides)
    return token, f"{issuer.url}/api/grants/{grant_id}/consume"


def proof_for(token: str, url: str, key=AGENT, **kw) -> str:
    args = {
        "method": "POST",
        "url": url,
        "iat": int(time.time()),
        "jti": str(uuid.uuid4()),
        "access_token": token,
    }
    args.update(kw)
    return make_proof(key, **args)


def line(token: str, proof: str | None) -> str:
    return json.dumps({"authz_jwt": token, "dpop": proof})


def test_a_bound_grant_runs_with_its_proof_and_forwards_it_to_consume(issuer, tmp_path):
    target = issuer.target(tmp_path / "t")
    token, url = bound(issuer)
    proof = proof_for(token, url)
    result = elevate(target, ARGV, token=line(token, proof))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"
    headers = {k.lower(): v for k, v in issuer.consume_headers[-1].items()}
    assert headers["authorization"] == f"DPoP {token}" and headers["dpop"] == proof
    assert attempts(target)[-1]["result"] == "allowed"
    assert proof not in target.audit_log.read_text() and token not in target.audit_log.read_text()


def test_the_bare_bound_jwt_is_refused(issuer, tmp_path):
    target = issuer.target(tmp_path / "t")
    token, _ = bound(issuer)
    for grant in (token, line(token, None)):
        result = elevate(target, ARGV, token=grant)
        assert result.returncode == 5, result.stderr
        assert error_line(result)["error"] == "dpop_required"
    assert issuer.consumed == []  # never consumed


@pytest.mark.parametrize(
    "name",
    [
        "another key",
        "wrong htu",
        "another grant's htu",
        "wrong htm",
        "wrong ath",
        "stale",
        "future",
        "typ JWT",
        "issuer host tricked",
    ],
)
def test_a_bad_proof_is_refused_before_consume(issuer, tmp_path, name):
    target = issuer.target(tmp_path / "t")
    token, url = bound(issuer)
    now = int(time.time())
    proof = {
        "another key": lambda: proof_for(token, url, key=OTHER),
        "wrong htu": lambda: proof_for(token, f"{issuer.url}/api/grants"),
        "another grant's htu": lambda: proof_for(token, f"{issuer.url}/api/grants/{uuid.uuid4()}/consume"),
        "wrong htm": lambda: proof_for(token, url, method="GET"),
        "wrong ath": lambda: proof_for(token, url, access_token=token + "x"),
        "stale": lambda: proof_for(token, url, iat=now - 600),
        "future": lambda: proof_for(token, url, iat=now + 600),
        "typ JWT": lambda: proof_for(token, url, header_extra={"typ": "JWT"}),
        "issuer host tricked": lambda: proof_for(token, url.replace("127.0.0.1", "localhost")),
    }[name]()
    result = elevate(target, ARGV, token=line(token, proof))
    assert result.returncode == 5, result.stderr
    refusal = error_line(result)
    assert refusal["error"] == "bad_dpop_proof" and refusal["reason"].startswith("bad DPoP proof: ")
    assert issuer.consumed == [] and result.stdout == ""


def test_a_proof_for_another_token_is_refused(issuer, tmp_path):
    """A proof lifted with one bound token does not carry another (ath)."""
    target = issuer.target(tmp_path / "t")
    token, url = bound(issuer)
    other_token, _ = bound(issuer)
    result = elevate(target, ARGV, token=line(other_token, proof_for(token, url)))
    assert result.returncode == 5 and error_line(result)["error"] == "bad_dpop_proof"


def test_an_unbound_grant_is_unchanged_and_sends_no_proof(issuer, tmp_path):
    target = issuer.target(tmp_path / "t")
    token = issuer.token(ARGV)
    result = elevate(target, ARGV, token=line(token, None))
    assert result.returncode == 0, result.stderr
    assert issuer.consume_headers[-1]["Authorization"] == f"Bearer {token}"
    assert "DPoP" not in issuer.consume_headers[-1]


@pytest.mark.parametrize(
    "grant,why",
    [
        ("{not json", "not JSON"),
        ('{"dpop": "x"}', "authz_jwt"),
        ('{"authz_jwt": 5}', "authz_jwt"),
        ('{"authz_jwt": "a.b.c", "dpop": 7}', "dpop"),
        ('{"authz_jwt": "a.b.c", "extra": 1}', "unknown members"),
    ],
)
def test_a_malformed_grant_line_is_a_usage_error(issuer, tmp_path, grant, why):
    target = issuer.target(tmp_path / "t")
    result = elevate(target, ARGV, token=grant)
    assert result.returncode == 1 and why in error_line(result)["reason"]


@pytest.mark.parametrize("cnf", [{"jkt": 5}, "jkt", {"x5t#S256": "abc"}])
def test_a_malformed_cnf_is_refused(issuer, tmp_path, cnf):
    target = issuer.target(tmp_path / "t")
    token = issuer.token(ARGV, cnf=cnf)
    result = elevate(target, ARGV, token=line(token, "a.b.c"))
    assert result.returncode == 5 and error_line(result)["error"] == "malformed_token"


def test_the_proof_names_the_consume_url_and_the_tokens_hash(issuer):
    token, url = bound(issuer)
    claims = json.loads(__import__("base64").urlsafe_b64decode(proof_for(token, url).split(".")[1] + "=="))
    assert claims["htu"] == url and claims["ath"] == ath_of(token) and Path(url).name == "consume"

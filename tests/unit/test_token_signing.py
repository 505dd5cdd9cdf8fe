"""grantd.services.tokens signs EdDSA tokens without PyJWT's per-call work (issue 27: the AuthZ-JWT
of every approve, the identity token of every sign-in): the tokens are byte for byte what
``jwt.encode`` makes, and verify as before; other algorithms still go through PyJWT."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grantd.services.tokens import TYP_ACCESS, TYP_JWT, Tokens


class _Ring:
    def __init__(self) -> None:
        self.keys = {
            "EdDSA": SimpleNamespace(kid="k-ed", private=Ed25519PrivateKey.generate()),
            "ES256": SimpleNamespace(kid="k-ec", private=ec.generate_private_key(ec.SECP256R1())),
        }

    async def signing_key(self, alg: str = "EdDSA") -> Any:
        return self.keys[alg]


def _tokens(ring: _Ring) -> Tokens:
    config: Any = SimpleNamespace(
        server=SimpleNamespace(issuer="https://id.example.com"),
        tokens=SimpleNamespace(agent_audience="grantd", agent_token_ttl=3600),
    )
    return Tokens(ring, SimpleNamespace(), config)  # type: ignore[arg-type]


CLAIMS: list[dict[str, Any]] = [
    {"iss": "https://id.example.com", "sub": "bot@example.com", "iat": 1, "exp": 2, "jti": "j"},
    {
        "iss": "https://id.example.com",
        "sub": "bøt@example.com",  # not ASCII: escaped the same way
        "aud": "host",
        "grant_id": "g1",
        "command": ["ls", "-l", '/tmp/ä "q"'],
        "permissions": [],
        "approvals": [{"email": "a@example.com", "at": 1_764_000_000_123, "requirement": None}],
        "duration": None,
        "flag": True,
        "iat": 1_764_000_000,
        "exp": 1_764_000_300,
    },
]


@pytest.mark.parametrize("claims", CLAIMS)
@pytest.mark.parametrize("typ", [TYP_JWT, TYP_ACCESS, "grantd-act+jwt"])
def test_eddsa_tokens_are_what_pyjwt_makes(claims: dict[str, Any], typ: str) -> None:
    ring = _Ring()
    tokens = _tokens(ring)
    key = ring.keys["EdDSA"]
    for _ in range(2):  # the first call makes the header segment, the second reuses it
        ours = asyncio.run(tokens._sign(claims, typ=typ))  # noqa: SLF001
        assert ours == jwt.encode(
            claims, key.private, algorithm="EdDSA", headers={"kid": key.kid, "typ": typ}
        )
    header = jwt.get_unverified_header(ours)
    assert header == {"alg": "EdDSA", "kid": "k-ed", "typ": typ}
    decoded = jwt.decode(
        ours,
        key.private.public_key(),
        algorithms=["EdDSA"],
        options={"verify_aud": False, "verify_exp": False},
    )
    assert decoded == claims


def test_a_new_key_gets_its_own_header() -> None:
    ring = _Ring()
    tokens = _tokens(ring)
    first = asyncio.run(tokens._sign(CLAIMS[0]))  # noqa: SLF001
    ring.keys["EdDSA"] = SimpleNamespace(kid="k-ed-2", private=Ed25519PrivateKey.generate())
    second = asyncio.run(tokens._sign(CLAIMS[0]))  # noqa: SLF001
    assert jwt.get_unverified_header(first)["kid"] == "k-ed"
    assert jwt.get_unverified_header(second)["kid"] == "k-ed-2"
    jwt.decode(
        second, ring.keys["EdDSA"].private.public_key(), algorithms=["EdDSA"], options={"verify_exp": False}
    )


def test_other_algorithms_go_through_pyjwt() -> None:
    ring = _Ring()
    token = asyncio.run(_tokens(ring)._sign(CLAIMS[0], alg="ES256"))  # noqa: SLF001
    assert jwt.get_unverified_header(token) == {"alg": "ES256", "kid": "k-ec", "typ": "JWT"}
    public = ring.keys["ES256"].private.public_key()
    assert jwt.decode(token, public, algorithms=["ES256"], options={"verify_exp": False}) == CLAIMS[0]

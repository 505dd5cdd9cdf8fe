"""The management token's compare with the bearer's digest made once per request and the
configured token's digest remembered per process (grantd.services.authn, issue 27)."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace

from grantd.services.authn import Credentials, ManagementToken
from grantd.services.tokens import token_digest


def _services(token: str) -> SimpleNamespace:
    admin = SimpleNamespace(management_token=token, management_identity="mgmt@example.com")
    return SimpleNamespace(config=SimpleNamespace(admin=admin))


def _accepts(layer: ManagementToken, services: SimpleNamespace, bearer: str, scheme: str = "bearer") -> bool:
    found = asyncio.run(layer.authenticate(services, Credentials(bearer=bearer, scheme=scheme)))  # type: ignore[arg-type]
    return found is not None


def test_the_digest_is_the_bearers_and_follows_it_through_replace() -> None:
    credentials = Credentials(bearer="a.b.c", client="127.0.0.1")
    assert credentials.digest == token_digest("a.b.c")
    assert Credentials().digest == b""
    assert dataclasses.replace(credentials, bearer="x").digest == token_digest("x")
    assert credentials == Credentials(bearer="a.b.c", client="127.0.0.1")  # not compared


def test_a_changed_management_token_is_compared_with_its_own_digest() -> None:
    layer = ManagementToken()
    first, second = "f" * 32, "s" * 32
    assert _accepts(layer, _services(first), first)
    assert not _accepts(layer, _services(first), second)
    assert not _accepts(layer, _services(first), first, scheme="dpop")  # only as Bearer
    # the setting changes in this process: the remembered digest must not outlive it
    assert _accepts(layer, _services(second), second)
    assert not _accepts(layer, _services(second), first)
    assert not _accepts(layer, _services(""), first)  # no management token: nothing matches

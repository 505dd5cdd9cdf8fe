"""DPoP (RFC 9449, D16) on grantd's own endpoints: the one place that turns a request's ``DPoP``
header into a verified proof with this server's settings. The pure verifier is ``grantd.dpop``.

- ``[tokens] agent_dpop``: ``off`` (proofs are ignored, no token is bound), ``optional`` (an agent
  that proves its key gets bound tokens; the peer CLI, which never does, keeps bearer tokens) or
  ``required`` (an agent token is issued only against a proof, and an unbound one is refused).
- ``htu`` is ``server.issuer`` + the route's path, never the Host header (``expected_htu``).
- The replay check is ``store.onetime`` kind ``dpop`` keyed by SHA-256 of ``<jkt>:<jti>``: its
  insert is decided by the database (one winner across processes and nodes), and expired rows are
  swept by the next insert. It runs last, so a proof refused for another reason never burns its jti.
- Server nonces (``[tokens] dpop_nonce``) are stateless HMACs of the time step with a secret derived
  from the active EdDSA signing key, which every process and node shares through storage.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grantd.core.errors import Problem
from grantd.dpop import (
    PROOF_ALGS,
    DpopError,
    DpopProof,
    Nonces,
    expected_htu,
    thumbprint_of_ssh_key,
    verify_proof,
)
from grantd.store import Conflict

if TYPE_CHECKING:
    from grantd.services.context import Services

ONETIME_KIND = "dpop"
OFF, OPTIONAL, REQUIRED = "off", "optional", "required"


@dataclass(frozen=True)
class ProofRequest:
    """What the web layer hands over of one request: the ``DPoP`` header values (all of them: more
    than one is refused), the method and the raw path (no query)."""

    proofs: tuple[str, ...]
    method: str
    path: str

    @property
    def present(self) -> bool:
        return bool(self.proofs)


def mode(services: Services) -> str:
    return str(services.config.tokens.agent_dpop)


async def nonces(services: Services) -> Nonces | None:
    """The server nonces, or None when ``[tokens] dpop_nonce`` is off."""
    if not services.config.tokens.dpop_nonce:
        return None
    from cryptography.hazmat.primitives import serialization

    key = await services.keyring.signing_key("EdDSA")
    raw = key.private.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    return Nonces(hashlib.sha256(b"grantd-dpop-nonce\n" + raw).digest())


async def current_nonce(services: Services) -> str | None:
    found = await nonces(services)
    return None if found is None else found.current(services.clock.now_ms() / 1000)


async def verify(
    services: Services,
    request: ProofRequest,
    *,
    expected_jkt: str | None,
    access_token: str | None = None,
) -> DpopProof:
    """The verified proof of this request (DpopError otherwise), replay checked in the store."""
    if len(request.proofs) != 1:
        raise DpopError("exactly one DPoP header is required" if request.proofs else "no DPoP proof")
    now = services.clock.now_ms() / 1000
    try:
        htu = expected_htu(services.issuer, request.path)
    except ValueError:
        raise DpopError("the request path makes no URL at the issuer") from None
    proof = verify_proof(
        request.proofs[0],
        method=request.method,
        htu=htu,
        now=now,
        access_token=access_token,
        nonces=await nonces(services),
        expected_jkt=expected_jkt,
    )
    key = hashlib.sha256(f"{proof.jkt}:{proof.jti}".encode()).hexdigest()
    expires_ms = (proof.iat + 60 + 2 * 5) * 1000 + 1000
    try:
        await services.store.onetime.put(ONETIME_KIND, key, {}, expires_ms, services.clock.now_ms())
    except Conflict:
        raise DpopError("the proof was used before (jti replayed)") from None
    return proof


def agent_jkt(public_key_line: str) -> str | None:
    try:
        return thumbprint_of_ssh_key(public_key_line)
    except ValueError:
        return None


async def _challenge_headers(services: Services, error: DpopError | None, description: str) -> dict[str, str]:
    code = error.error if error is not None else "invalid_token"
    safe = description.replace("\\", "").replace('"', "'")
    headers = {
        "WWW-Authenticate": f'DPoP error="{code}", error_description="{safe}", algs="{" ".join(PROOF_ALGS)}"'
    }
    nonce = await current_nonce(services)
    if nonce is not None:
        headers["DPoP-Nonce"] = nonce
    return headers


async def api_refusal(services: Services, error: DpopError) -> Problem:
    """401 for a bad proof on the API (RFC 9449 §7.1): ``WWW-Authenticate: DPoP error=...``."""
    detail = f"{error.error}: {error.reason}"
    return Problem(
        401,
        detail,
        headers=await _challenge_headers(services, error, error.reason),
        extra={"error": error.error, "error_description": error.reason},
    )


async def token_refusal(services: Services, detail: str) -> Problem:
    """401 for a token used against its binding (a bound token as Bearer, an unbound one as DPoP,
    an unbound one where DPoP is required)."""
    return Problem(
        401,
        f"invalid token: {detail}",
        headers=await _challenge_headers(services, None, detail),
        extra={"error": "invalid_token", "error_description": detail},
    )


async def bind_for_agent(
    services: Services, request: ProofRequest | None, public_key_line: str
) -> str | None:
    """When an agent obtains a token: the ``cnf.jkt`` to bind it to (its enrolled key's thumbprint)
    if it sent a valid proof made with that key, None for a bearer token. DpopError for a bad
    proof, or for none when ``agent_dpop = "required"``."""
    current = mode(services)
    if current == OFF:
        return None
    if request is None or not request.present:
        if current == REQUIRED:
            raise DpopError(
                "this grantd issues agent tokens only against a DPoP proof (agent_dpop = required)"
            )
        return None
    expected = agent_jkt(public_key_line)
    if expected is None:
        raise DpopError("the agent's enrolled key makes no DPoP key")
    return (await verify(services, request, expected_jkt=expected)).jkt


__all__ = [
    "OFF",
    "ONETIME_KIND",
    "OPTIONAL",
    "REQUIRED",
    "ProofRequest",
    "agent_jkt",
    "api_refusal",
    "bind_for_agent",
    "current_nonce",
    "mode",
    "token_refusal",
    "verify",
]

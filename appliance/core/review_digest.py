"""What a passkey signs when a person decides a grant from a review link (D15): the grant's digest,
the RFC 8785 canonical JSON of ``{grant_id, cmd_hash, target_host, run_as, grant_type, duration}``,
and the WebAuthn challenge ``SHA-256(digest || nonce)`` with a single-use server nonce. So the
assertion approves *this* command on *this* host as *this* user, once, and is kept as the vote's
evidence (D14); a verifier recomputes the digest from the grant and checks the challenge."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import rfc8785


def digest_fields(grant: Mapping[str, Any]) -> dict[str, Any]:
    request = grant.get("request") or {}
    return {
        "grant_id": grant["id"],
        "cmd_hash": request.get("cmd_hash"),
        "target_host": request.get("target_host"),
        "run_as": request.get("run_as"),
        "grant_type": request.get("grant_type", grant.get("grant_type")),
        "duration": request.get("duration"),
    }


def grant_digest(grant: Mapping[str, Any]) -> bytes:
    """The RFC 8785 canonical JSON of the grant's digest fields."""
    return rfc8785.dumps(digest_fields(grant))


def review_challenge(digest: bytes, nonce: bytes) -> bytes:
    """The WebAuthn challenge of a decision: SHA-256 of the digest followed by the nonce."""
    return hashlib.sha256(digest + nonce).digest()


__all__ = ["digest_fields", "grant_digest", "review_challenge"]

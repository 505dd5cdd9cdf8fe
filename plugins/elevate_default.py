"""The elevation tool's standard checks on a signature-verified AuthZ-JWT (D10 order).

Issuer, audience, target host, approver and the exact command. Signature, expiry and
consumption are done by `grantd elevate` itself, around this hook.
"""

from __future__ import annotations

import hashlib
from typing import Any

from appliance.hookspecs import hookimpl


def cmd_hash(argv: list[str]) -> str:
    """D4: sha256 over the argv joined by single spaces, with the sha256: prefix."""
    return "sha256:" + hashlib.sha256(" ".join(argv).encode("utf-8")).hexdigest()


def _strip(value: str) -> str:
    return value[7:] if value.startswith("sha256:") else value


@hookimpl
def elevate_verify(claims: dict[str, Any], argv: list[str], context: dict[str, Any]) -> list[str]:
    if claims.get("iss") not in context.get("allowed_issuers", []):
        return ["issuer not in allowed issuers"]
    aud = claims.get("aud")
    if not isinstance(aud, str) or aud not in context.get("allowed_audiences", []):
        return ["audience mismatch"]
    if claims.get("target_host") != context.get("host"):
        return ["target_host differs from the system host name"]
    approvers = context.get("allowed_approvers", [])
    decided_by = str(claims.get("decided_by", "")).lower()
    if "*" not in approvers and decided_by not in [a.lower() for a in approvers]:
        return ["approver not allowed"]
    granted = claims.get("command")
    if isinstance(granted, list):
        if granted != argv:
            return ["cmd_hash mismatch (command differs from the granted command)"]
    elif not isinstance(claims.get("cmd_hash"), str) or _strip(claims["cmd_hash"]) != _strip(cmd_hash(argv)):
        return ["cmd_hash mismatch (command differs from the granted command)"]
    return []

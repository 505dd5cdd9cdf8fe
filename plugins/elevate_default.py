"""The elevation tool's standard checks on a signature-verified AuthZ-JWT (D10 order).

Issuer, audience, target host, approvers (D13: rule opt-in, `approvers_mode`, `min_approvals`;
grantd.elevate.approvals) and the exact command. Signature, expiry and
consumption are done by `grantd elevate` itself, around this hook. This implementation runs
first (``tryfirst``), so its reason is the one `grantd elevate` reports when several plugins
object; site plugins add their own reasons after it.
"""

from __future__ import annotations

from typing import Any

# Only the tiny digest module and the elevation tool's own spec: `grantd elevate` runs this as root.
from grantd.commands import cmd_hash
from grantd.elevate.approvals import APPROVER_NOT_ALLOWED, approval_reasons
from grantd.elevate.hookspecs import hookimpl

__all__ = ["APPROVER_NOT_ALLOWED", "cmd_hash"]

# The reasons, worded as the specification's Errors section names them. `grantd elevate` maps
# each to a stable error code for its JSON line (grantd.elevate.checks.REASON_CODES).
ISSUER_NOT_ALLOWED = "issuer not in allowed issuers"
AUDIENCE_MISMATCH = "audience mismatch"
HOST_MISMATCH = "target_host differs from the system host name"
CMD_MISMATCH = "cmd_hash mismatch (command differs from the granted command)"


def _strip(value: str) -> str:
    return value[7:] if value.startswith("sha256:") else value


def command_matches(claims: dict[str, Any], argv: list[str]) -> bool:
    """D4: the `command` array element by element; only without one, `cmd_hash` (prefix optional)."""
    granted = claims.get("command")
    if granted is not None:
        return isinstance(granted, list) and all(isinstance(a, str) for a in granted) and granted == argv
    expected = claims.get("cmd_hash")
    return isinstance(expected, str) and bool(argv) and _strip(expected).lower() == _strip(cmd_hash(argv))


@hookimpl(tryfirst=True)
def elevate_verify(claims: dict[str, Any], argv: list[str], context: dict[str, Any]) -> list[str]:
    if claims.get("iss") not in context.get("allowed_issuers", []):
        return [ISSUER_NOT_ALLOWED]
    aud = claims.get("aud")
    if not isinstance(aud, str) or aud not in context.get("allowed_audiences", []):
        return [AUDIENCE_MISMATCH]
    host = claims.get("target_host")
    if not isinstance(host, str) or host != context.get("host"):
        return [HOST_MISMATCH]
    decided_by = claims.get("decided_by")
    if not isinstance(decided_by, str) or not decided_by:
        return [APPROVER_NOT_ALLOWED]
    refusal = approval_reasons(claims, context)
    if refusal:
        return refusal
    if not command_matches(claims, argv):
        return [CMD_MISMATCH]
    return []

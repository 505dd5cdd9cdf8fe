"""What the agent CLI prints: the server's values escaped (grantd.core.display, D18), or JSON with --json."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from grantd.agent.errors import CliError
from grantd.core.display import escape_text, summarize_argv

# -- output ------------------------------------------------------------------------------------------


def _ms(value: Any) -> str:
    if not isinstance(value, int | float) or not value:
        return "-"
    return datetime.fromtimestamp(value / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def shown(value: Any) -> str:
    """A value the server sent, as one line a terminal shows as it is (grantd.core.display, D18)."""
    return escape_text("" if value is None else str(value))


def command_line(req: dict[str, Any]) -> str:
    """The command (each argument escaped, quoted when needed) or the permissions."""
    command = req.get("command")
    if isinstance(command, list) and command:
        return summarize_argv([str(arg) for arg in command])
    return ", ".join(shown(p) for p in req.get("permissions") or [])


def describe_grant(grant: dict[str, Any]) -> str:
    req = grant.get("request") or {}
    lines = [
        f"grant {shown(grant.get('id'))}: {shown(grant.get('status'))}",
        f"  {shown(req.get('grant_type', 'once'))} on {shown(req.get('target_host'))} for {shown(req.get('audience'))}"
        + (f" as {shown(req['run_as'])}" if req.get("run_as") else ""),
        f"  command: {command_line(req) or '-'}",
    ]
    if req.get("reason"):
        lines.append(f"  reason: {shown(req['reason'])}")
    if grant.get("decided_by"):
        lines.append(
            f"  decided by {shown(grant['decided_by'])} at {_ms(grant.get('decided_at'))}"
            + (f": {shown(grant['decision_reason'])}" if grant.get("decision_reason") else "")
        )
    if grant.get("expires_at"):
        lines.append(f"  expires {_ms(grant['expires_at'])}")
    return "\n".join(lines)


def approval_hint(issuer: str, grant_id: str) -> str:
    return (
        f"grantd: grant {shown(grant_id)} waits for a human decision. An approver can decide\n"
        f"  in the console:  grantd tui\n"
        f"  in a browser:    {shown(approval_url(issuer, grant_id))}"
    )


def approval_url(issuer: str, grant_id: str) -> str:
    return f"{issuer}/grant-approval?grant_id={quote(grant_id)}"


def not_usable(grant: dict[str, Any]) -> CliError:
    status = shown(grant.get("status"))
    gid = shown(grant.get("id"))
    by = shown(grant.get("decided_by"))
    why = shown(grant.get("decision_reason"))
    if status == "denied":
        message = f"grant {gid} was denied" + (f" by {by}" if by else "") + (f": {why}" if why else "")
    elif status == "revoked":
        message = f"grant {gid} was revoked" + (f" (approved by {by})" if by else "")
    elif status == "expired":
        message = f"grant {gid} expired" + (" before anyone decided" if not by else "")
    elif status == "consumed":
        message = f"grant {gid} was already consumed (a once grant runs one time): request a new one"
    else:
        message = f"grant {gid} is {status}"
    return CliError(message, kind=str(grant.get("status")), grant=grant)


def emit(args: argparse.Namespace, data: Any, human: str) -> None:
    """The result on stdout: ``data`` as JSON with --json, else the ``human`` text (already escaped)."""
    if getattr(args, "json", False):
        print(json.dumps(data))
    elif human:
        print(human)


def info(args: argparse.Namespace, message: str, **data: Any) -> None:
    """Progress on stderr: a JSON event with --json, else ``message``."""
    if getattr(args, "json", False):
        print(json.dumps({"event": data.pop("event", "info"), "message": message, **data}), file=sys.stderr)
    else:
        print(message, file=sys.stderr)

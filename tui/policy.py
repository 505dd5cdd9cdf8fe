"""`grantd policy test --agent X [--host H --run-as U --type T --audience A] -- CMD...`: what the
server's approval policies (D13) would do with a grant request, and who could approve it, without
creating anything. It calls `POST /api/policies/evaluate` (administrators) with the management token
(--management-token: the config's admin.management_token; --token-file) or as the signed-in
person (`grantd login --admin`). `--json` prints the server's answer as it is; otherwise a short
report, every value from the server escaped (D18).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
from pathlib import Path
from typing import Any

from grantd.core.display import escape_text, summarize_argv

HELP = "approval policies: test what a request would meet and who could approve it (creates nothing)"
DEFAULT_AUDIENCE = "grantd"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from grantd.tui.cli import CONFIG_ENV, DEFAULT_CONFIG_NAME, ISSUER_ENV, SESSION_ENV

    policy = subparsers.add_parser("policy", help=HELP)
    psub = policy.add_subparsers(dest="policy_command", metavar="SUBCOMMAND", required=True)
    p = psub.add_parser(
        "test",
        help="show the outcome of a grant request under the server's policies and who could approve it",
        description=(
            "Asks the server what its [[rules]] and [[policies]] would do with a grant request for the agent "
            "(POST /api/policies/evaluate, administrators only); nothing is created. Prints the outcome "
            "(auto_approve, auto_deny, needs_review), the rules and policies that matched, each requirement "
            "and who may approve it. Exit status 0 whatever the outcome; 1 when the server refused."
        ),
    )
    p.add_argument(
        "--agent", required=True, help="the requesting agent's e-mail or id (or a person's e-mail)"
    )
    p.add_argument("--host", help="target host (default: this host's name)")
    p.add_argument("--run-as", help="user the command would run as (default: root)")
    p.add_argument(
        "--type", dest="grant_type", choices=("once", "timed", "always"), default="once", help="grant type"
    )
    p.add_argument("--duration", type=int, help="seconds (timed grants)")
    p.add_argument(
        "--audience", default=DEFAULT_AUDIENCE, help=f"grant audience (default {DEFAULT_AUDIENCE})"
    )
    p.add_argument("--json", action="store_true", help="print the server's answer as JSON")
    p.add_argument("--url", help=f"server base URL (default: [server] issuer from the config, ${ISSUER_ENV})")
    p.add_argument("--config", "-c", help=f"config file (default: ${CONFIG_ENV} or ./{DEFAULT_CONFIG_NAME})")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--management-token", action="store_true", help="act with the config's management token")
    who.add_argument("--token-file", type=Path, help="act with the management token held in this file")
    p.add_argument(
        "--session-file",
        type=Path,
        help=f"a person's stored sign-in (default: ${SESSION_ENV} or ~/.config/grantd/session.json)",
    )
    p.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="-- CMD ARGS... (none: a permissions-free command test is refused; give the command)",
    )
    p.set_defaults(func=cmd_policy_test)


def request_body(args: argparse.Namespace) -> dict[str, Any]:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ValueError("give the command after --, e.g. grantd policy test --agent bot@example.com -- id")
    body: dict[str, Any] = {
        "requester": args.agent,
        "target_host": args.host or socket.gethostname(),
        "audience": args.audience,
        "grant_type": args.grant_type,
        "command": command,
    }
    if args.run_as:
        body["run_as"] = args.run_as
    if args.duration is not None:
        body["duration"] = args.duration
    return body


def report(answer: dict[str, Any]) -> str:
    """The human-readable report of an evaluation (every server value escaped)."""
    e = escape_text
    lines = [f"outcome: {e(str(answer.get('outcome')))}"]
    if answer.get("rules_matched"):
        lines.append("rules matched: " + ", ".join(e(str(r)) for r in answer["rules_matched"]))
    if answer.get("reason"):
        lines.append(f"reason: {e(str(answer['reason']))}")
    policies = answer.get("policies_matched") or []
    lines.append(
        "policies matched: "
        + (
            ", ".join(e(str(p)) for p in policies)
            if policies
            else "none (the default policy: one vote by the owner, the approver or an administrator)"
        )
    )
    if answer.get("outcome") == "needs_review":
        eligible = {
            str(item.get("requirement")): item.get("eligible") or []
            for item in answer.get("eligible_approvers") or []
        }
        for requirement in answer.get("requirements") or []:
            rid = str(requirement.get("id"))
            lines.append(
                f"requirement {e(rid)}: {requirement.get('approve')} approval(s) of "
                f"{', '.join(e(str(g)) for g in requirement.get('groups') or [])}; "
                f"{requirement.get('deny')} denial(s) deny"
            )
            people = eligible.get(rid, [])
            if not people:
                lines.append("  nobody may approve it now")
            for who in people:
                name = f" ({e(str(who.get('name')))})" if who.get("name") else ""
                lines.append(f"  {e(str(who.get('email')))}{name}")
    return "\n".join(lines)


def cmd_policy_test(args: argparse.Namespace) -> int:
    from grantd.tui.cli import Connection, UsageError, person_credential, resolve_connection, resolve_person
    from grantd.tui.client import ApiError, Credential, GrantdClient, ManagementTokenCredential

    try:
        body = request_body(args)
        if args.management_token or args.token_file is not None:
            url, token = resolve_connection(args)
            connection = Connection(url, token)
        else:
            connection = resolve_person(args)
    except (UsageError, ValueError) as exc:
        print(f"grantd: {exc}", file=sys.stderr)
        return 2
    credential: Credential
    if connection.token is not None:
        credential = ManagementTokenCredential(connection.token)
    else:
        credential = person_credential(connection.url, connection.session_file, admin=True)

    async def ask() -> dict[str, Any]:
        async with GrantdClient(connection.url, credential) as client:
            return await client.evaluate_policies(body)

    try:
        answer = asyncio.run(ask())
    except ApiError as exc:
        print(f"grantd: the server refused: {escape_text(str(exc))}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(answer, indent=2, ensure_ascii=True))
    else:
        print(f"request: {summarize_argv(body['command'])} on {escape_text(body['target_host'])}")
        print(report(answer))
    return 0

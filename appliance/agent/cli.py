"""The agent's side: `grantd agent ...`, `grantd grant ...` and `grantd run`.

    grantd agent keygen                       Ed25519 key (OpenSSH format, 0600) + the line to enrol
    grantd agent login --idp URL --key FILE --email E
    grantd grant request|status|list|wait|token
    grantd run [--as USER] [--type once|timed|always] [--duration 1h] [--wait] -- CMD ARGS...

State lives in $XDG_CONFIG_HOME/grantd (default ~/.config/grantd): `agent.json` (0600) holds the
IdP, e-mail, key path and the current agent token, so an expiring token is renewed silently by
signing a fresh challenge; `agent.toml` (optional) holds defaults (idp, email, key, audience,
elevate_command, wait_timeout).

`grantd run` never puts the AuthZ-JWT on a command line: as root it hands the token to
`grantd elevate --grant-fd N` through a pipe and execs it; otherwise it runs
`sudo -n /usr/local/bin/grantd elevate --grant-file FIFO` and writes the token into a FIFO in a
private (0700) directory. Exit codes: 0 ok, 1 error, 2 usage, 75 grant still pending; under
`run` the command's own exit status (and elevate's 5/126/127).

This module is the entry (the parsers and the error wiring); the rest is in grantd.agent's modules.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from grantd.agent.api import issuer_of
from grantd.agent.commands import (
    DEFAULT_AUDIENCE,
    DEFAULT_WAIT,
    FINAL,
    _idp_for,
    cmd_grant_list,
    cmd_grant_request,
    cmd_grant_status,
    cmd_grant_token,
    cmd_grant_wait,
    cmd_keygen,
    cmd_login,
    cmd_logout,
    cmd_run,
    cmd_whoami,
)
from grantd.agent.errors import CliError
from grantd.agent.output import approval_url, shown
from grantd.agent.run import DEFAULT_ELEVATE_PATH
from grantd.agent.state import State, agent_settings

_DURATION = re.compile(r"(\d+)([smhdw]?)")


def parse_duration(text: str) -> int:
    """ "3600", "90s", "5m", "1h30m", "7d" -> seconds."""
    units = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    text = text.strip().lower()
    pos, total = 0, 0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += int(match.group(1)) * units[match.group(2)]
        pos = match.end()
    if pos != len(text) or total <= 0:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (examples: 3600, 90s, 5m, 1h, 7d)")
    return total


# -- wiring ------------------------------------------------------------------------------------------


def _run_safely(func: Any) -> Any:
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return int(func(args))
        except CliError as exc:
            if getattr(args, "json", False):
                print(
                    json.dumps(
                        {
                            "error": exc.kind,
                            "message": exc.message,
                            **{k: v for k, v in exc.extra.items() if k != "grant" or v},
                        }
                    ),
                    file=sys.stderr,
                )
            else:
                print(f"grantd: {exc.message}", file=sys.stderr)
                if exc.kind == "pending" and exc.extra.get("grant"):
                    grant = exc.extra["grant"]
                    print(
                        f"grantd: still waiting after the timeout; approve it at "
                        f"{shown(approval_url(_safe_issuer(args), str(grant.get('id'))))}",
                        file=sys.stderr,
                    )
            return exc.exit_code

    wrapper.__doc__ = func.__doc__
    return wrapper


def _safe_issuer(args: argparse.Namespace) -> str:
    """The issuer for a link in an error message, without asking the server again."""
    try:
        state = State.load()
        idp = _idp_for(args, state, agent_settings())
    except CliError:
        return "ISSUER"
    return (state.issuer or issuer_of(state.token) or idp) if state.idp == idp else idp


def _common(p: argparse.ArgumentParser, *, idp: bool = True) -> argparse.ArgumentParser:
    p.add_argument("--json", action="store_true", help="machine-readable output (errors as JSON on stderr)")
    if idp:
        p.add_argument("--idp", help="IdP base URL (default: the one you logged in at; env GRANTD_IDP)")
    return p


def _grant_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--type", choices=("once", "timed", "always"), default="once", help="grant type (default once)"
    )
    p.add_argument("--duration", type=parse_duration, help="for timed grants: 3600, 30m, 1h, 7d")
    p.add_argument("--reason", help="shown to the approver (default: the command)")
    p.add_argument("--wait", action="store_true", help="wait for the decision instead of exiting 75")
    p.add_argument(
        "--timeout", type=parse_duration, help=f"how long --wait waits (default {DEFAULT_WAIT // 60} min)"
    )


def register(subparsers: Any) -> None:
    agent = subparsers.add_parser("agent", help="agent identity: key, sign-in")
    asub = agent.add_subparsers(dest="agent_command", metavar="ACTION", required=True)
    p = _common(asub.add_parser("keygen", help="make an Ed25519 agent key (OpenSSH format, 0600)"), idp=False)
    p.add_argument("--output", "-f", help="private key file (default: ~/.config/grantd/agent_ed25519)")
    p.add_argument("--comment", "-C", help="comment of the public key (use the agent's e-mail)")
    p.add_argument("--force", action="store_true", help="replace an existing key")
    p.set_defaults(func=_run_safely(cmd_keygen))
    p = _common(
        asub.add_parser("login", help="sign in by challenge-response; the token is cached and renewed")
    )
    p.add_argument("--key", help="private key: OpenSSH or PKCS#8, unencrypted, Ed25519")
    p.add_argument("--email", help="the agent's enrolled e-mail")
    p.set_defaults(func=_run_safely(cmd_login))
    p = _common(asub.add_parser("whoami", help="who is logged in where (asks the IdP; renews the token)"))
    p.set_defaults(func=_run_safely(cmd_whoami))
    p = _common(asub.add_parser("logout", help="forget the cached token"), idp=False)
    p.set_defaults(func=_run_safely(cmd_logout))

    grant = subparsers.add_parser("grant", help="request and follow grants")
    gsub = grant.add_subparsers(dest="grant_command", metavar="ACTION", required=True)
    p = _common(
        gsub.add_parser("request", help="ask for a grant: --audience A --host H [...] -- CMD ARGS...")
    )
    p.add_argument("--audience", required=True, help="service the grant is for (e.g. grantd, escapes)")
    p.add_argument("--host", required=True, help="target host")
    p.add_argument("--run-as", help="user to run the command as on the target")
    p.add_argument("--permission", action="append", help="a permission string (repeatable)")
    _grant_options(p)
    p.add_argument("argv", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    p.set_defaults(func=_run_safely(cmd_grant_request))
    p = _common(gsub.add_parser("status", help="show one grant"))
    p.add_argument("id")
    p.set_defaults(func=_run_safely(cmd_grant_status))
    p = _common(gsub.add_parser("list", help="list your grants"))
    p.add_argument("--status", choices=("pending", *FINAL))
    p.add_argument("--limit", type=int, default=20)
    p.set_defaults(func=_run_safely(cmd_grant_list))
    p = _common(gsub.add_parser("wait", help="wait for a decision (event stream, falls back to polling)"))
    p.add_argument("id")
    p.add_argument(
        "--timeout", type=parse_duration, help=f"default {DEFAULT_WAIT // 60} min; exit 75 when it passes"
    )
    p.set_defaults(func=_run_safely(cmd_grant_wait))
    p = _common(
        gsub.add_parser("token", help="print the grant's AuthZ-JWT (pipe it; never put it on a command line)")
    )
    p.add_argument("id")
    p.set_defaults(func=_run_safely(cmd_grant_token))

    p = _common(
        subparsers.add_parser(
            "run",
            help="run a command with a grant: request (or reuse), wait, then grantd elevate",
            description="Requests a grant for CMD on this host (audience 'grantd'), reuses an approved timed/always "
            "grant, waits with --wait (else exits 75), then runs `grantd elevate` (directly as root, "
            "else through `sudo -n /usr/local/bin/grantd`, or the command --elevate-command names) and "
            "passes the token through a pipe. Exit status: the command's; 5 refused by elevate; "
            "75 pending; 1 errors.",
        )
    )
    p.add_argument("--as", dest="as_user", metavar="USER", help="run as USER (default root)")
    p.add_argument("--audience", help=f"grant audience (default {DEFAULT_AUDIENCE}; agent.toml audience)")
    p.add_argument("--host", help="target host (default: this host's name)")
    p.add_argument(
        "--elevate-command",
        metavar="CMD",
        help='the command that runs grantd for `grantd elevate` (e.g. "sudo -n /opt/grantd/grantd"; '
        "env GRANTD_ELEVATE_COMMAND, agent.toml elevate_command; default: this grantd as root, "
        f"else sudo -n {DEFAULT_ELEVATE_PATH})",
    )
    p.add_argument(
        "--elevate-config",
        metavar="FILE",
        help="elevate.toml for `grantd elevate --config` (env GRANTD_ELEVATE_CONFIG; default "
        "/etc/grantd/elevate.toml; through sudo only files in /etc/grantd/)",
    )
    p.add_argument(
        "--protocol",
        choices=("grantd", "ciba"),
        default="grantd",
        help="grantd: the grant API (default); ciba: OpenID CIBA (/bc-authorize, private_key_jwt, /token polling)",
    )
    p.add_argument(
        "--message",
        help="with --protocol ciba: a binding message (at most 64 characters) shown to the approver",
    )
    _grant_options(p)
    p.add_argument("argv", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    p.set_defaults(func=_run_safely(cmd_run))

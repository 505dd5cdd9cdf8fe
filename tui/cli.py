"""`grantd tui`: start the approver console against a grantd server."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DEFAULT_CONFIG_NAME = "grantd.toml"
CONFIG_ENV = "GRANTD_CONFIG"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "tui",
        help="approver console: live pending grants, decide with one key",
        description=(
            "Show pending grants as they arrive and approve, deny or revoke them. "
            "The credential is the management token from the config (admin.management_token) or "
            "--token-file; it is never given on the command line."
        ),
    )
    p.add_argument("--url", help="server base URL (default: [server] issuer from the config)")
    p.add_argument("--config", "-c", help=f"config file (default: ${CONFIG_ENV} or ./{DEFAULT_CONFIG_NAME})")
    p.add_argument("--token-file", type=Path, help="file holding the management token (instead of the config's)")
    p.add_argument("--bell", action="store_true", help="ring the terminal bell when a new grant arrives")
    p.add_argument("--theme", help="Textual theme, e.g. textual-light or textual-dark (default: textual-dark)")
    p.add_argument("--poll-interval", type=float, default=5.0, help="seconds between polls when events are unavailable")
    p.set_defaults(func=cmd_tui)


class UsageError(Exception):
    pass


def resolve_connection(args: argparse.Namespace) -> tuple[str, str]:
    """The server URL and the management token, from the flags and/or the config file."""
    from grantd.config import load

    config_path = args.config or os.environ.get(CONFIG_ENV)
    config = None
    if config_path:
        config = load(Path(config_path))
    elif (args.url is None or args.token_file is None) and Path(DEFAULT_CONFIG_NAME).exists():
        config = load(Path(DEFAULT_CONFIG_NAME))
    url = args.url or (config.server.issuer if config is not None else None)
    if not url:
        raise UsageError(f"no server: give --url or a config (--config, ${CONFIG_ENV} or ./{DEFAULT_CONFIG_NAME})")
    if args.token_file is not None:
        try:
            token = args.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise UsageError(f"cannot read --token-file {args.token_file}: {exc.strerror}") from None
    elif config is not None and config.admin.management_token:
        token = str(config.admin.management_token).strip()
    else:
        raise UsageError("no credential: set admin.management_token in the config or give --token-file")
    if not token:
        raise UsageError("the management token is empty")
    return url, token


def cmd_tui(args: argparse.Namespace) -> int:
    try:
        url, token = resolve_connection(args)
    except UsageError as exc:
        print(f"grantd: {exc}", file=sys.stderr)
        return 2
    # Textual is imported only here so `grantd --help` and the other commands stay fast.
    from grantd.tui.app import GrantConsole
    from grantd.tui.client import GrantdClient, ManagementTokenCredential

    if args.theme and args.theme not in GrantConsole.theme_names():
        print(f"grantd: unknown theme {args.theme!r}; choose one of {', '.join(GrantConsole.theme_names())}", file=sys.stderr)
        return 2
    if args.poll_interval <= 0:
        print("grantd: --poll-interval must be positive", file=sys.stderr)
        return 2
    client = GrantdClient(url, ManagementTokenCredential(token))
    GrantConsole(client, bell=args.bell, theme=args.theme, poll_interval=args.poll_interval).run()
    return 0

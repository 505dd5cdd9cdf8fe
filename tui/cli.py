"""`grantd tui`: start the approver console against a grantd server.

By default the console acts as a person: the one signed in on this terminal (the session `grantd
login` stores), or, without one, it signs a person in first with the device grant (it shows the
code and the URL; the person approves in a browser). Decisions are then recorded under that person
and the list holds exactly what they may decide. The management token is an explicit option
(``--management-token`` reads the config's ``admin.management_token``; ``--token-file`` a file).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grantd.tui.client import Credential

DEFAULT_CONFIG_NAME = "grantd.toml"
CONFIG_ENV = "GRANTD_CONFIG"
ISSUER_ENV = "GRANTD_ISSUER"
SESSION_ENV = "GRANTD_SESSION_FILE"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "tui",
        help="approver console: live pending grants, decide with one key",
        description=(
            "Show pending grants as they arrive and approve, deny or revoke them. By default you act as "
            "yourself: the session of `grantd login` is used, or the console signs you in first (it shows a "
            "code to approve in a browser). With --management-token (the config's admin.management_token) or "
            "--token-file it acts with the management token instead; a token is never given on the command line."
        ),
    )
    p.add_argument(
        "--url",
        help=f"server base URL (default: [server] issuer from the config, ${ISSUER_ENV}, "
        "or the stored session's)",
    )
    p.add_argument("--config", "-c", help=f"config file (default: ${CONFIG_ENV} or ./{DEFAULT_CONFIG_NAME})")
    who = p.add_mutually_exclusive_group()
    who.add_argument(
        "--management-token",
        action="store_true",
        help="act with the management token of the config (admin.management_token), not as a person",
    )
    who.add_argument("--token-file", type=Path, help="act with the management token held in this file")
    p.add_argument(
        "--session-file",
        type=Path,
        help=f"where a person's sign-in is stored (default: ${SESSION_ENV} or ~/.config/grantd/session.json)",
    )
    p.add_argument(
        "--admin",
        action="store_true",
        help="as a person: sign in asking for administrator rights (see `grantd login --admin`); a stored "
        "sign-in that did not ask for them is replaced by a new one",
    )
    p.add_argument("--bell", action="store_true", help="ring the terminal bell when a new grant arrives")
    p.add_argument(
        "--confirm-root",
        action="store_true",
        help="ask before approving a command that runs as root (run as unset or root)",
    )
    p.add_argument(
        "--theme", help="Textual theme, e.g. textual-light or textual-dark (default: textual-dark)"
    )
    p.add_argument(
        "--poll-interval", type=float, default=5.0, help="seconds between polls when events are unavailable"
    )
    p.set_defaults(func=cmd_tui)


class UsageError(Exception):
    pass


@dataclass(frozen=True)
class Connection:
    url: str
    token: str | None  # the management token, or None: a person's session (session_file)
    session_file: Path | None = None


def _config(args: argparse.Namespace, *, needed: bool) -> object | None:
    from grantd.config import load_for_client as load

    config_path = getattr(args, "config", None) or os.environ.get(CONFIG_ENV)
    if config_path:
        return load(Path(config_path))
    if needed and Path(DEFAULT_CONFIG_NAME).exists():
        return load(Path(DEFAULT_CONFIG_NAME))
    return None


def resolve_connection(args: argparse.Namespace) -> tuple[str, str]:
    """The server URL and the management token (``--management-token``/``--token-file``)."""
    token_file = getattr(args, "token_file", None)
    config = _config(args, needed=args.url is None or token_file is None)
    url = args.url or (config.server.issuer if config is not None else None)  # type: ignore[attr-defined]
    if not url:
        raise UsageError(
            f"no server: give --url or a config (--config, ${CONFIG_ENV} or ./{DEFAULT_CONFIG_NAME})"
        )
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise UsageError(f"cannot read --token-file {token_file}: {exc.strerror}") from None
    elif config is not None and config.admin.management_token:  # type: ignore[attr-defined]
        token = str(config.admin.management_token).strip()  # type: ignore[attr-defined]
    else:
        raise UsageError("no credential: set admin.management_token in the config or give --token-file")
    if not token:
        raise UsageError("the management token is empty")
    return str(url).rstrip("/"), token


def resolve_person(args: argparse.Namespace) -> Connection:
    """The server URL for a person's session: --url, the config's issuer, $GRANTD_ISSUER, or the stored session's."""
    from grantd.tui.signin import SessionFile

    store = SessionFile(getattr(args, "session_file", None))
    url = args.url
    if not url:
        config = _config(args, needed=True)
        url = config.server.issuer if config is not None else None  # type: ignore[attr-defined]
    url = url or os.environ.get(ISSUER_ENV)
    if not url:
        stored = store.load()
        url = stored.issuer if stored is not None else None
    if not url:
        raise UsageError(
            f"no server: give --url, ${ISSUER_ENV} or a config (--config, ${CONFIG_ENV} or "
            f"./{DEFAULT_CONFIG_NAME})"
        )
    return Connection(str(url).rstrip("/"), None, store.path)


def cmd_tui(args: argparse.Namespace) -> int:
    try:
        if args.management_token or args.token_file is not None:
            url, token = resolve_connection(args)
            connection = Connection(url, token)
        else:
            connection = resolve_person(args)
    except UsageError as exc:
        print(f"grantd: {exc}", file=sys.stderr)
        return 2
    # Textual is imported only here so `grantd --help` and the other commands stay fast.
    from grantd.tui.app import GrantConsole
    from grantd.tui.client import GrantdClient, ManagementTokenCredential

    if args.theme and args.theme not in GrantConsole.theme_names():
        print(
            f"grantd: unknown theme {args.theme!r}; choose one of {', '.join(GrantConsole.theme_names())}",
            file=sys.stderr,
        )
        return 2
    if args.poll_interval <= 0:
        print("grantd: --poll-interval must be positive", file=sys.stderr)
        return 2
    credential: Credential
    if connection.token is not None:
        credential = ManagementTokenCredential(connection.token)
    else:
        credential = person_credential(connection.url, connection.session_file, admin=args.admin)
    client = GrantdClient(connection.url, credential)
    GrantConsole(
        client,
        bell=args.bell,
        theme=args.theme,
        poll_interval=args.poll_interval,
        confirm_root=args.confirm_root,
    ).run()
    return 0


def person_credential(url: str, session_file: Path | None, *, admin: bool = False) -> Credential:
    """The stored session for ``url`` (refreshed when first used), or an empty one: the console then
    starts on its sign-in screen. With ``admin`` the sign-in asks for administrator rights (D12), and
    a stored session that did not ask for them is not used."""
    from grantd.tui.signin import ADMIN_SCOPE, SCOPE, DeviceSignIn, SessionCredential, SessionFile

    store = SessionFile(session_file)
    stored = store.load()
    if stored is not None and stored.issuer.rstrip("/") != url.rstrip("/"):
        stored = None  # a session with another server: sign in here (it is replaced once this one succeeds)
    if stored is not None and admin and not stored.asked_admin:
        stored = None  # signed in without administrator rights: sign in again, asking for them
    return SessionCredential(DeviceSignIn(url), store, stored, scope=ADMIN_SCOPE if admin else SCOPE)

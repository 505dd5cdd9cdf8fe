"""The `grantd` command: a thin dispatcher that imports only the module of the subcommand it runs.

`grantd elevate` runs as root and must not import the server, `grantd run` should not pay for Sanic
or Textual, and `grantd --help` should not import anything. So this module keeps a static table of
the subcommands (name -> module, one-line help), looks at the first argument, imports that one
module and lets it add its real argparse subparsers (``register(subparsers)``); every other
subcommand gets a placeholder subparser with the same one-line help, so the top-level help, usage
and error messages are what one parser holding everything would print. tests/unit/test_layers.py checks
that the table's helps match the modules' and that `grantd --help` imports no subcommand module.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NamedTuple

from grantd import __version__

EXIT_CONFIG = 1
EXIT_USAGE = 2


class Command(NamedTuple):
    module: str  # has register(subparsers), adding this command's subparser(s)
    help: str  # the one line of `grantd --help`; the module's subparser uses the same text


# In the order `grantd --help` lists them. One module may provide several commands.
COMMANDS: dict[str, Command] = {
    "serve": Command("grantd.cli.server", "run the server (writes a dev config if none exists)"),
    "config": Command("grantd.cli.server", "validate or create configuration files"),
    "keys": Command("grantd.cli.server", "signing keys"),
    "db": Command("grantd.cli.server", "database maintenance"),
    "users": Command(
        "grantd.cli.server", "people: add (prints a one-time passkey registration link), list, delete, link"
    ),
    "audit": Command(
        "grantd.cli.audit",
        "the decision log: verify it (exit 0 ok, 2 tampered, 3 a rule broken) or export it",
    ),
    "plugins": Command("grantd.cli.server", "list loaded plugins and their hooks"),
    "version": Command("grantd.cli.server", "print the version"),
    "agent": Command("grantd.agent.cli", "agent identity: key, sign-in"),
    "grant": Command("grantd.agent.cli", "request and follow grants"),
    "run": Command(
        "grantd.agent.cli", "run a command with a grant: request (or reuse), wait, then grantd elevate"
    ),
    "elevate": Command(
        "grantd.elevate.cli",
        "run a command as root (or the grant's run_as) if an AuthZ-JWT allows it; run through sudo",
    ),
    "policy": Command(
        "grantd.tui.policy",
        "approval policies: test what a request would meet and who could approve it (creates nothing)",
    ),
    "tui": Command("grantd.tui.cli", "approver console: live pending grants, decide with one key"),
    "login": Command(
        "grantd.tui.signin",
        "sign a person in on this terminal (device code shown here, approved in a browser)",
    ),
    "logout": Command("grantd.tui.signin", "revoke and delete the stored terminal sign-in"),
}


def _load(module_name: str) -> Any | None:
    """The subcommand's module, or None when that part of grantd is not installed."""
    try:
        # __import__ rather than importlib.import_module: the import statement's path, which
        # `python -X importtime` reports (docs/layout.md measures `grantd elevate` with it).
        return __import__(module_name, fromlist=["register"])
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            return None  # anything else missing is a real error and propagates
        raise


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser, with the real subparsers of `command`'s module and placeholders for the rest."""
    parser = argparse.ArgumentParser(
        prog="grantd", description="Identity provider and human-in-the-loop grants for agents."
    )
    parser.add_argument("--version", action="version", version=f"grantd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    missing: set[str] = set()
    if command in COMMANDS:
        module_name = COMMANDS[command].module
        module = _load(module_name)
        if module is None:
            missing = {name for name, c in COMMANDS.items() if c.module == module_name}
        else:
            module.register(sub)
            for name, parser_of in sub.choices.items():  # `grantd CMD --help` says what CMD does
                if parser_of.description is None and name in COMMANDS:
                    parser_of.description = COMMANDS[name].help[0].upper() + COMMANDS[name].help[1:] + "."
    for name, entry in COMMANDS.items():
        if name not in sub.choices and name not in missing:
            sub.add_parser(name, help=entry.help, add_help=False)  # a placeholder: never parsed here
    return parser


def _command_of(argv: list[str]) -> str | None:
    """The subcommand: the first argument that is not an option (the top level only has -h and --version)."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg
        if arg == "--":
            return None
    return None


def _print_config_error(exc: Any) -> None:
    where = f" in {exc.path}" if exc.path else ""
    count = len(exc.problems)
    print(
        f"grantd: configuration invalid{where} ({count} problem{'s' if count != 1 else ''}):", file=sys.stderr
    )
    for problem in exc.problems:
        print(f"  - {problem}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_of(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        # A ConfigError can only come from grantd.config, so it is looked up only when that module
        # was imported: `grantd elevate` and `grantd run` never import the server's config code.
        config = sys.modules.get("grantd.config")
        if config is not None and isinstance(exc, config.ConfigError):
            _print_config_error(exc)
            return EXIT_CONFIG
        raise

"""The server's and its operators' commands: serve, config, keys, db, plugins, version.

Imported by the dispatcher (grantd.cli) only when one of them runs. Errors: a ConfigError
escapes to the dispatcher, which prints every problem and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grantd import __version__
from grantd.config import (
    CONFIG_ENV,
    DEFAULT_CONFIG_NAME,
    Config,
    ConfigError,
    load,
    render,
    write_new_config,
)

EXIT_OK = 0
EXIT_CONFIG = 1


def _err(message: str) -> None:
    print(f"grantd: {message}", file=sys.stderr)


def config_path_from(args: argparse.Namespace) -> Path | None:
    given = getattr(args, "config", None) or os.environ.get(CONFIG_ENV)
    return Path(given) if given else None


def load_config_or_exit(args: argparse.Namespace) -> Config:
    path = config_path_from(args)
    if path is None:
        path = Path(DEFAULT_CONFIG_NAME)
        if not path.exists():
            raise ConfigError([f"no config given (--config or {CONFIG_ENV}) and ./{DEFAULT_CONFIG_NAME} does not exist"])
    return load(path)


# -- serve -------------------------------------------------------------------------------------
def cmd_serve(args: argparse.Namespace) -> int:
    path = config_path_from(args)
    if path is None:
        path = Path(DEFAULT_CONFIG_NAME).resolve()
        if not path.exists():
            token, token_path = write_new_config(path, host=args.host or "127.0.0.1", port=args.port or 8000)
            print(f"grantd: no config given; wrote a development config to {path}", file=sys.stderr)
            print(f"grantd: management token (shown once, kept in {token_path}):", file=sys.stderr)
            print(f"\n    {token}\n", file=sys.stderr)
    config = load(path)
    for warning in config.warnings:
        print(f"grantd: warning: {warning}", file=sys.stderr)
    if args.host or args.port:
        # Command-line overrides for a quick run; the issuer follows unless the config sets one.
        raw_server = dict(config.raw.get("server", {}))
        raw_server.update({k: v for k, v in (("host", args.host), ("port", args.port)) if v})
        config = _revalidate(config, {"server": raw_server})
    from grantd.web.app import serve

    issuer = config.server.issuer
    print(f"grantd: serving {issuer}  (health: {issuer}/healthz, keys: {issuer}/.well-known/jwks.json)", file=sys.stderr)
    print("grantd: enroll an agent: see README.md, 'Sign in an agent with curl and ssh-keygen'", file=sys.stderr)
    print(f"grantd: decide grants live: grantd tui --config {config.path}  (events: {issuer}/api/grants/events)",
          file=sys.stderr)
    serve(config)
    return EXIT_OK


def _revalidate(config: Config, changes: dict[str, dict[str, Any]]) -> Config:
    from grantd.config import validate

    raw = {**config.raw}
    for section, values in changes.items():
        raw[section] = values
    return validate(raw, config.path)


# -- config ------------------------------------------------------------------------------------
def cmd_config_validate(args: argparse.Namespace) -> int:
    config = load(args.file)
    from grantd.plugin_manager import build_federation_providers, build_plugin_manager

    build_federation_providers(build_plugin_manager(config), config)  # each type's own keys and secrets
    for warning in config.warnings:
        print(f"warning: {warning}")
    print(f"{args.file}: valid (issuer {config.server.issuer}, storage {config.storage.plugin})")
    return EXIT_OK


def cmd_config_init(args: argparse.Namespace) -> int:
    path = Path(args.path)
    try:
        token, token_path = write_new_config(path, host=args.host, port=args.port, force=args.force)
    except FileExistsError:
        _err(f"{path} exists; use --force to overwrite it")
        return EXIT_CONFIG
    print(f"wrote {path.resolve()}")
    print(f"management token (shown once) written to {token_path}:")
    print(f"    {token}")
    return EXIT_OK


def cmd_config_example(args: argparse.Namespace) -> int:
    sys.stdout.write(render(example=True))
    return EXIT_OK


# -- keys / db ---------------------------------------------------------------------------------
async def _with_services(config: Config, work: Callable[[Any], Any]) -> Any:
    from grantd.plugin_manager import build_plugin_manager
    from grantd.services.context import open_services

    services = await open_services(config, build_plugin_manager(config))
    try:
        return await work(services)
    finally:
        services.store.close()


def cmd_keys_list(args: argparse.Namespace) -> int:
    config = load_config_or_exit(args)

    async def work(services: Any) -> list[dict[str, Any]]:
        return services.keyring.describe()

    keys = asyncio.run(_with_services(config, work))
    if args.json:
        print(json.dumps(keys))
    else:
        for k in keys:
            print(f"{k['kid']}  {k['alg']}  {k['state']}")
    return EXIT_OK


def cmd_keys_rotate(args: argparse.Namespace) -> int:
    config = load_config_or_exit(args)

    async def work(services: Any) -> tuple[str, list[str]]:
        return await services.keyring.rotate()

    kid, retired = asyncio.run(_with_services(config, work))
    if args.json:
        print(json.dumps({"kid": kid, "retired": retired}))
    else:
        print(f"new signing key {kid}; retired {', '.join(retired) or 'none'} (still published until their tokens expire)")
    return EXIT_OK


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    """Emergency revocation (D12): the key leaves the JWKS and every token it signed stops verifying,
    in every server process within a second. Revoking the active key rotates to a new one first."""
    config = load_config_or_exit(args)

    async def work(services: Any) -> tuple[bool, str | None]:
        return await services.keyring.revoke(args.kid)

    existed, new_kid = asyncio.run(_with_services(config, work))
    if not existed:
        _err(f"no signing key {args.kid!r} (see grantd keys list)")
        return EXIT_CONFIG
    if args.json:
        print(json.dumps({"revoked": args.kid, "new_active_kid": new_kid}))
    else:
        rotated = f"; new signing key {new_kid}" if new_kid else ""
        print(f"revoked {args.kid}: tokens it signed no longer verify{rotated}")
    return EXIT_OK


def cmd_db_migrate(args: argparse.Namespace) -> int:
    config = load_config_or_exit(args)

    async def work(services: Any) -> int:
        return int(services.store.schema_version())

    print(f"schema version {asyncio.run(_with_services(config, work))}")
    return EXIT_OK


def cmd_db_backup(args: argparse.Namespace) -> int:
    config = load_config_or_exit(args)
    target = Path(args.target).resolve()
    if target.exists():
        _err(f"{target} exists; choose a new file")
        return EXIT_CONFIG

    async def work(services: Any) -> None:
        await services.store.backup(str(target))

    asyncio.run(_with_services(config, work))
    print(f"backup written to {target}")
    return EXIT_OK


# -- plugins -----------------------------------------------------------------------------------
def cmd_plugins(args: argparse.Namespace) -> int:
    from grantd.plugin_manager import build_plugin_manager, describe_plugins

    path = config_path_from(args)
    config = load(path) if path else None
    infos = describe_plugins(build_plugin_manager(config))
    if args.json:
        print(json.dumps([info.__dict__ for info in infos]))
        return EXIT_OK
    for info in infos:
        print(f"{info.name} {info.version} ({info.source})")
        print(f"    hooks: {', '.join(info.hooks) or '-'}")
    return EXIT_OK


def cmd_version(args: argparse.Namespace) -> int:
    print(f"grantd {__version__}")
    return EXIT_OK


def register(sub: Any) -> None:
    """The server's and its operators' commands; the one-line helps are the dispatcher's (grantd.cli.COMMANDS)."""
    from grantd.cli import COMMANDS

    def with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--config", "-c", help=f"config file (default: ${CONFIG_ENV} or ./{DEFAULT_CONFIG_NAME})")
        return p

    p = with_config(sub.add_parser("serve", help=COMMANDS["serve"].help))
    p.add_argument("--host", help="override [server] host")
    p.add_argument("--port", type=int, help="override [server] port")
    p.set_defaults(func=cmd_serve)

    config = sub.add_parser("config", help=COMMANDS["config"].help)
    csub = config.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    p = csub.add_parser("validate", help="check a config file and list every problem")
    p.add_argument("file")
    p.set_defaults(func=cmd_config_validate)
    p = csub.add_parser("init", help="write a commented config with fresh secrets")
    p.add_argument("--path", default=DEFAULT_CONFIG_NAME)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=cmd_config_init)
    p = csub.add_parser("example", help="print every key with its default and meaning")
    p.set_defaults(func=cmd_config_example)

    keys = sub.add_parser("keys", help=COMMANDS["keys"].help)
    ksub = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    p = with_config(ksub.add_parser("list", help="list signing keys"))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_keys_list)
    p = with_config(ksub.add_parser("rotate", help="make a new signing key; old keys stay published until their tokens expire"))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_keys_rotate)
    p = with_config(ksub.add_parser("revoke", help="stop trusting a key at once: every token it signed stops verifying"))
    p.add_argument("kid", help="the key id (grantd keys list)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_keys_revoke)

    db = sub.add_parser("db", help=COMMANDS["db"].help)
    dsub = db.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    p = with_config(dsub.add_parser("migrate", help="apply pending schema migrations"))
    p.set_defaults(func=cmd_db_migrate)
    p = with_config(dsub.add_parser("backup", help="write a consistent copy of the database"))
    p.add_argument("target")
    p.set_defaults(func=cmd_db_backup)

    p = with_config(sub.add_parser("plugins", help=COMMANDS["plugins"].help))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plugins)

    p = sub.add_parser("version", help=COMMANDS["version"].help)
    p.set_defaults(func=cmd_version)

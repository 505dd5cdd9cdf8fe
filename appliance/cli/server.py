"""The server's and its operators' commands: serve, config, keys, db, users, plugins, version.

Imported by the dispatcher (grantd.cli) only when one of them runs. Errors: a ConfigError
escapes to the dispatcher, which prints every problem and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
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
    development_issuer,
    render,
    write_new_config,
    write_secret_file,
)

EXIT_OK = 0
EXIT_CONFIG = 1
EXIT_STARTUP = 1  # storage, port or plugin failure at start: one line, before any banner


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
            raise ConfigError(
                [f"no config given (--config or {CONFIG_ENV}) and ./{DEFAULT_CONFIG_NAME} does not exist"]
            )
    from grantd.plugin_manager import load_with_plugins

    return load_with_plugins(path)  # with the sections its plugins declare


# -- serve -------------------------------------------------------------------------------------
def grantd_program() -> tuple[str, bool]:
    """How to run this very grantd from another terminal (for the serve banner): ``("grantd", True)``
    when that name on PATH is this program, else its full path (``.venv/bin/grantd`` after
    scripts/serve) and False."""
    import shutil

    here = Path(sys.executable) if getattr(sys, "frozen", False) else Path(sys.executable).parent / "grantd"
    if not here.exists():
        return f"{sys.executable} -m grantd", True
    found = shutil.which("grantd")
    if found and Path(found).resolve() == here.resolve():
        return "grantd", True
    return str(here.absolute()), False


def readme_path() -> str:
    """Where this grantd's README is: beside an installed bundle (packaging/install puts it in
    /opt/grantd/docs/), or in the source checkout it runs from; else the name of the file in
    grantd's source."""
    if getattr(sys, "frozen", False):
        candidates = [Path(sys.executable).resolve().parent / "docs" / "README.md"]
    else:
        import grantd

        candidates = [Path(grantd.__file__).resolve().parent.parent / "README.md"]
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    return "README.md of grantd's source"


def cmd_serve(args: argparse.Namespace) -> int:
    path = config_path_from(args)
    new_token: tuple[str, Path] | None = None  # printed last, framed, once the banner is out
    if path is None:
        path = Path(DEFAULT_CONFIG_NAME).resolve()
        if not path.exists():
            new_token = write_new_config(
                path, host=args.host or "127.0.0.1", port=args.port or 8000, first_admin=DEV_FIRST_ADMIN
            )
            print(f"grantd: no config given; wrote a development config to {path}", file=sys.stderr)
    from grantd.plugin_manager import check_startup

    try:
        config = check_startup(
            path, storage=False, checks=_startup_checks()
        )  # `config validate`'s checks (D18); preflight opens the storage
    except ConfigError as exc:
        if _log_format_of(path) != "json":
            raise  # the dispatcher lists every problem
        _startup_failed(
            "json",
            f"configuration invalid in {exc.path or path}: {'; '.join(exc.problems)}",
            problems=exc.problems,
        )
        return EXIT_CONFIG
    for warning in config.warnings:
        _say(config.log.format, f"warning: {warning}", level=logging.WARNING, event="config_warning")
    if args.host or args.port:
        # Command-line overrides for a quick run; the issuer follows unless the config sets one.
        raw_server = dict(config.raw.get("server", {}))
        generated = raw_server.get("issuer") == development_issuer(config.server.host, config.server.port)
        if raw_server.get("issuer") == f"http://{config.server.host}:{config.server.port}":
            del raw_server["issuer"]  # an issuer that is just host:port follows them
        raw_server.update({k: v for k, v in (("host", args.host), ("port", args.port)) if v})
        if generated:  # the generated development issuer follows too, keeping its form
            raw_server["issuer"] = development_issuer(str(raw_server["host"]), int(raw_server["port"]))
        config = _revalidate(config, {"server": raw_server})
        from grantd.plugin_manager import SERVE_SERVER_ENV

        os.environ[SERVE_SERVER_ENV] = json.dumps(raw_server)  # every process of this server reads it
    from grantd.web.app import describe_startup_error, preflight
    from grantd.web.processes import serve

    try:
        preflight(config)  # storage and port: a failure is one line, before any banner
    except Exception as exc:
        _startup_failed(config.log.format, describe_startup_error(exc))
        return EXIT_STARTUP
    issuer = config.server.issuer
    fmt = config.log.format
    _say(
        fmt,
        f"serving {issuer}  (health: {issuer}/healthz, keys: {issuer}/.well-known/jwks.json)",
        event="banner",
    )
    _say(
        fmt, f"enroll an agent: {readme_path()}, 'Sign in an agent with curl and ssh-keygen'", event="banner"
    )
    program, on_path = grantd_program()
    # --host/--port moved the issuer away from the file's: the console (which reads the file) is told
    overridden = f" --url {issuer}" if args.host or args.port else ""
    _say(
        fmt,
        f"decide grants live: {program} tui --config {config.path}{overridden} --management-token"
        f"  (or as a person, signed in with a passkey: without --management-token)",
        event="banner",
    )
    if not on_path:
        _say(
            fmt,
            f"('grantd' is not on PATH here; to type just 'grantd': export PATH=\"{Path(program).parent}:$PATH\")",
            event="banner",
        )
    try:
        _print_first_admin_link(config)
        if new_token is not None:
            _print_token_frame(config, *new_token)
        serve(config, checked=True)
    except Exception as exc:  # e.g. the port was taken between the check and the bind
        _startup_failed(config.log.format, describe_startup_error(exc))
        return EXIT_STARTUP
    return EXIT_OK


def _print_token_frame(config: Config, token: str, token_path: Path) -> None:
    """The development config's management token, once, as the banner's last lines in a frame (so
    it is not lost above the install and start-up lines), with who it acts as."""
    rule = "grantd: " + "=" * 72
    lines = [
        rule,
        f"grantd: management token (shown once; kept in {token_path}, mode 0600):",
        "grantd:",
        f"grantd:     {token}",
        "grantd:",
        f"grantd: it acts as {config.admin.management_identity} (admin.management_identity), an administrator",
        "grantd: that is no person: people sign in with a passkey, like the first administrator above.",
        rule,
    ]
    print("\n".join(lines), file=sys.stderr, flush=True)


def _log_format_of(path: Path) -> str:
    """``[log] format`` of a config file that does not validate (so its failure is written the
    way its logs are); "text" when even that cannot be read."""
    import tomllib

    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        fmt = raw.get("log", {}).get("format")
    except (OSError, ValueError, AttributeError):
        return "text"
    return "json" if fmt == "json" else "text"


def _say(fmt: str, message: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """One banner line on stderr: ``grantd: message``, or in ``[log] format = "json"`` a JSON object
    like every log line (so that every line of a JSON-logging server parses). Printed, not logged:
    the first administrator's link must not reach a log handler's file."""
    if fmt != "json":
        print(f"grantd: {message}", file=sys.stderr, flush=True)
        return
    from grantd.logs import LOGGER, JsonFormatter

    record = logging.LogRecord(LOGGER, level, __file__, 0, "%s", (message,), None)
    line = json.loads(JsonFormatter().format(record))
    print(json.dumps({**line, **fields}, separators=(",", ":")), file=sys.stderr, flush=True)


def _startup_failed(fmt: str, message: str, **fields: Any) -> None:
    """The one line of a start that failed, on stderr: text, or a JSON object like every log line."""
    _say(fmt, f"cannot start: {message}", level=logging.ERROR, event="startup_failed", **fields)


DEV_FIRST_ADMIN = "admin@localhost"


def _print_first_admin_link(config: Config) -> None:
    """D8, first admin in a minute: ``people.first_admin`` (set by the development config) exists as
    an administrator; while they have no passkey, a fresh single-use registration link is printed
    here, on the terminal only (print, never the logger: the token must not reach a log file)."""
    email = config.people.first_admin
    if not email:
        return
    from grantd.services import people

    async def work(services: Any) -> str | None:
        return await people.first_admin_link(services, email)

    link = asyncio.run(_with_services(config, work))
    if link:
        hours = config.people.registration_ttl / 3600
        _say(
            config.log.format,
            f"first administrator {email}: open {link} to register your passkey "
            f"(single use, valid {hours:g} h; a new link at each start until then)",
            event="first_admin",
        )


def _revalidate(config: Config, changes: dict[str, dict[str, Any]]) -> Config:
    from grantd.config import validate
    from grantd.plugin_manager import build_plugin_manager, declared_sections

    raw = {**config.raw}
    for section, values in changes.items():
        raw[section] = values
    return validate(raw, config.path, declared_sections(build_plugin_manager(config)))


# -- config ------------------------------------------------------------------------------------
def _startup_checks() -> tuple[Any, ...]:
    """The checks of check_startup that live above the platform layer: the notification channels."""
    from grantd.notify import startup_problems

    return (startup_problems,)


def cmd_config_validate(args: argparse.Namespace) -> int:
    """Every check `grantd serve` makes before it opens the storage and binds the port, every problem
    at once (D18): what this accepts, serve starts."""
    from grantd.plugin_manager import check_startup

    config = check_startup(args.file, checks=_startup_checks())
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


def cmd_config_secret(args: argparse.Namespace) -> int:
    """A new URL-safe secret in a 0600 file (``grantd.config.new_secret`` says why URL-safe)."""
    path = Path(args.path)
    try:
        write_secret_file(path, force=args.force)
    except FileExistsError:
        _err(f"{path} exists; use --force to replace it")
        return EXIT_CONFIG
    except OSError as exc:
        _err(f"cannot write {path}: {exc.strerror or exc}")
        return EXIT_CONFIG
    print(f"wrote a new secret (URL-safe: A-Z a-z 0-9 - _) to {path.resolve()}, mode 0600")
    print(
        f'name it in the config as client_secret = "file:{path}" (an OAuth client) or credential = '
        f'"file:{path}" (an MCP resource, [[mcp.resources]]) and give the client the same file\'s content'
    )
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
    if args.log:

        async def rotate_log(services: Any) -> str:
            return str(await services.audit.rotate_key())

        vkey = asyncio.run(_with_services(config, rotate_log))
        if args.json:
            print(json.dumps({"vkey": vkey}))
        else:
            print(f"new decision log key {vkey}; the old one stays listed at /api/audit/key")
        return EXIT_OK

    async def work(services: Any) -> tuple[str, list[str]]:
        return await services.keyring.rotate()

    kid, retired = asyncio.run(_with_services(config, work))
    if args.json:
        print(json.dumps({"kid": kid, "retired": retired}))
    else:
        print(
            f"new signing key {kid}; retired {', '.join(retired) or 'none'} (still published until their tokens expire)"
        )
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


def cmd_db_restore(args: argparse.Namespace) -> int:
    """Replace the database with a backup (docs/operations.md, "Restore drill"). The storage
    backend refuses while a server uses the database and checks the file first; the previous
    contents are kept (SQLite: ``<database>.before-restore``, 0600)."""
    from grantd.store import StoreError

    config = load_config_or_exit(args)
    source = Path(args.source).resolve()
    if not source.is_file():
        _err(f"{source}: no such file")
        return EXIT_CONFIG

    async def work(services: Any) -> tuple[str, int]:
        kept = await services.store.restore(str(source))
        return kept, int(services.store.schema_version())

    try:
        kept, version = asyncio.run(_with_services(config, work))
    except StoreError as exc:
        _err(f"restore refused: {exc}")
        return EXIT_CONFIG
    print(f"restored {source} (schema version {version}); the previous contents are kept in {kept}")
    return EXIT_OK


# -- users -------------------------------------------------------------------------------------
USERS_CREATOR = "grantd users"


def _users(args: argparse.Namespace, work: Callable[[Any], Any]) -> int:
    """Run a `grantd users` action; a refused one (a Problem: unknown user, taken e-mail, ...) is
    one line on stderr and exit status 1."""
    from grantd.core.errors import Problem

    config = load_config_or_exit(args)
    try:
        answer = asyncio.run(_with_services(config, work))
    except Problem as exc:
        _err(exc.detail)
        return EXIT_CONFIG
    if args.json:
        print(json.dumps(answer["json"]))
    else:
        print(answer["text"])
    return EXIT_OK


def _cli_email(value: str) -> str:
    from grantd.core.fields import email_field

    email = email_field({"email": value}, "email")
    assert email is not None
    return email


def _link_text(answer: dict[str, Any]) -> str:
    kind = "add-device link (one more passkey)" if answer["purpose"] == "add-device" else "registration link"
    return f"{kind} for {answer['email']}, single use, valid {answer['expiresInHours']:g} h:\n    {answer['url']}"


def cmd_users_add(args: argparse.Namespace) -> int:
    from grantd.core.errors import Problem
    from grantd.services import people

    async def work(services: Any) -> dict[str, Any]:
        email = _cli_email(args.email)
        person = await services.store.people.get(email)
        created = person is None
        if person is None:
            person = await people.create_person(services, email, name=args.name, admin=args.admin)
        else:
            changes = {
                k: v
                for k, v in (("admin", True if args.admin else None), ("name", args.name))
                if v is not None
            }
            if changes:
                changes["updated_at"] = services.clock.now_ms()
                person = await services.store.people.update(person["person_id"], changes) or person
            if await people.has_passkey(services, person):
                raise Problem(
                    409,
                    f"{email} already has a passkey; for another device: grantd users link {email} --add-device",
                )
        url, record = await people.create_registration_url(
            services, email, admin=person["admin"], purpose="register", created_by=USERS_CREATOR, ttl=args.ttl
        )
        link = people.registration_answer(services, url, record)
        view = people.person_view(person, services.admin_emails)
        role = "administrator" if view["admin"] else "user"
        verb = "created" if created else "exists:"
        return {
            "json": {"user": view, "created": created, "registration": link},
            "text": f"{verb} {role} {email}\n{_link_text(link)}",
        }

    return _users(args, work)


def cmd_users_list(args: argparse.Namespace) -> int:
    from grantd.core.paging import MAX_LIMIT
    from grantd.services import people

    async def work(services: Any) -> dict[str, Any]:
        query: dict[str, Any] = {"limit": str(MAX_LIMIT), "search": args.search}
        users: list[dict[str, Any]] = []
        while True:
            answer = await people.list_people(services, query)
            users += answer["data"]
            if not answer["pagination"]["has_more"]:
                break
            query["cursor"] = answer["pagination"]["cursor"]
        for user in users:
            user["passkeys"] = len(await services.store.credentials.list_for(user["person_id"]))
        lines = [
            f"{u['email']}  {u['name']}  {'admin' if u['admin'] else '-'}  {u['status']}  passkeys: {u['passkeys']}"
            for u in users
        ]
        return {"json": users, "text": "\n".join(lines) or "no users"}

    return _users(args, work)


def cmd_users_delete(args: argparse.Namespace) -> int:
    from grantd.services import people

    async def work(services: Any) -> dict[str, Any]:
        person = await people.delete_person(services, None, args.email)
        return {
            "json": {"deleted": True, "user": people.person_view(person, services.admin_emails)},
            "text": f"deleted {person['email']} (their passkeys and sessions too; their grants and delegations revoked)",
        }

    return _users(args, work)


def cmd_users_link(args: argparse.Namespace) -> int:
    from grantd.services import people

    async def work(services: Any) -> dict[str, Any]:
        person = await people.get_person(services, args.email)
        url, record = await people.create_registration_url(
            services,
            person["email"],
            admin=person["admin"],
            purpose="add-device" if args.add_device else "register",
            created_by=USERS_CREATOR,
            ttl=args.ttl,
        )
        link = people.registration_answer(services, url, record)
        return {"json": link, "text": _link_text(link)}

    return _users(args, work)


# -- plugins -----------------------------------------------------------------------------------
def cmd_plugins(args: argparse.Namespace) -> int:
    from grantd.plugin_manager import build_plugin_manager, describe_plugins, load_with_plugins

    path = config_path_from(args)
    config = load_with_plugins(path) if path else None
    pm = build_plugin_manager(config)
    infos = describe_plugins(pm)
    if args.json:
        print(json.dumps([info.__dict__ for info in infos]))
        return EXIT_OK
    for info in infos:
        print(f"{info.name} {info.version} ({info.source})")
        print(f"    hooks: {', '.join(info.hooks) or '-'}")
    from grantd.notify import channel_types

    print("notification channel types:")
    for name, kind in sorted(channel_types(pm).items()):
        print(f"    {name}: {kind.description or '-'}")
    return EXIT_OK


def cmd_version(args: argparse.Namespace) -> int:
    print(f"grantd {__version__}")
    return EXIT_OK


def register(sub: Any) -> None:
    """The server's and its operators' commands; the one-line helps are the dispatcher's (grantd.cli.COMMANDS)."""
    from grantd.cli import COMMANDS

    def with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument(
            "--config", "-c", help=f"config file (default: ${CONFIG_ENV} or ./{DEFAULT_CONFIG_NAME})"
        )
        return p

    p = with_config(
        sub.add_parser(
            "serve",
            help=COMMANDS["serve"].help,
            description="Run the grantd server until SIGTERM or SIGINT (in-flight requests get [server] "
            "graceful_shutdown_timeout). The config is --config, else $GRANTD_CONFIG, else ./grantd.toml; "
            "without any, a development config is written to ./grantd.toml with a fresh management token "
            "(printed once) and a first administrator, admin@localhost, whose passkey registration link is "
            "printed. The config is checked as `grantd config validate` checks it; problems are listed and "
            "the exit status is 1.",
        )
    )
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
    p = csub.add_parser(
        "secret", help="write a new URL-safe secret to a 0600 file (an OAuth client's client_secret)"
    )
    p.add_argument("path")
    p.add_argument("--force", action="store_true", help="replace the file if it exists")
    p.set_defaults(func=cmd_config_secret)
    p = csub.add_parser("example", help="print every key with its default and meaning")
    p.set_defaults(func=cmd_config_example)

    keys = sub.add_parser("keys", help=COMMANDS["keys"].help)
    ksub = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    p = with_config(ksub.add_parser("list", help="list signing keys"))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_keys_list)
    p = with_config(
        ksub.add_parser(
            "rotate", help="make a new signing key; old keys stay published until their tokens expire"
        )
    )
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--log",
        action="store_true",
        help="rotate the decision log's checkpoint key instead (D14; the old one stays listed)",
    )
    p.set_defaults(func=cmd_keys_rotate)
    p = with_config(
        ksub.add_parser("revoke", help="stop trusting a key at once: every token it signed stops verifying")
    )
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
    p = with_config(
        dsub.add_parser(
            "restore",
            help="replace the database with a backup (stop the server first; the old contents are kept)",
        )
    )
    p.add_argument("source", help="a file written by grantd db backup")
    p.set_defaults(func=cmd_db_restore)

    users = sub.add_parser("users", help=COMMANDS["users"].help)
    usub = users.add_subparsers(dest="users_command", metavar="ACTION", required=True)
    p = with_config(
        usub.add_parser("add", help="create a person (if needed) and print a one-time registration link")
    )
    p.add_argument("email")
    p.add_argument("--admin", action="store_true", help="make them an administrator")
    p.add_argument("--name", help="display name (default: the e-mail's local part)")
    p.add_argument(
        "--ttl", type=int, help="seconds the link stays valid (default: [people] registration_ttl)"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_users_add)
    p = with_config(usub.add_parser("list", help="list people"))
    p.add_argument("--search", help="part of an e-mail or a name")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_users_list)
    p = with_config(usub.add_parser("delete", help="delete a person with their passkeys and sessions"))
    p.add_argument("email", help="e-mail or person id")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_users_delete)
    p = with_config(usub.add_parser("link", help="a new one-time registration link for a person"))
    p.add_argument("email", help="e-mail or person id")
    p.add_argument(
        "--add-device", action="store_true", help="for one more passkey (the person already has one)"
    )
    p.add_argument(
        "--ttl", type=int, help="seconds the link stays valid (default: [people] registration_ttl)"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_users_link)

    p = with_config(
        sub.add_parser(
            "plugins",
            help=COMMANDS["plugins"].help,
            description="List the plugins grantd loads (built-in, entry points, and the config's [plugins] modules "
            "when a config is given) with their versions and the hooks each implements.",
        )
    )
    p.add_argument("--json", action="store_true", help="one JSON list: name, source, version, hooks")
    p.set_defaults(func=cmd_plugins)

    p = sub.add_parser(
        "version",
        help=COMMANDS["version"].help,
        description="Print grantd's version (the same as grantd --version).",
    )
    p.set_defaults(func=cmd_version)

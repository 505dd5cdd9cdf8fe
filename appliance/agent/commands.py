"""The agent CLI's commands: `grantd agent ...`, `grantd grant ...` and `grantd run`."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from grantd.agent.api import Api, grant_line, login
from grantd.agent.errors import EXIT_ERROR, EXIT_OK, EXIT_PENDING, EXIT_USAGE, CliError
from grantd.agent.output import (
    approval_hint,
    approval_url,
    command_line,
    describe_grant,
    emit,
    info,
    not_usable,
    shown,
)
from grantd.agent.run import elevate_missing, elevate_prefix, hand_off
from grantd.agent.state import State, agent_settings, config_dir, private_dir, public_line, write_private
from grantd.agent.wait import Waiter

DEFAULT_AUDIENCE = "grantd"
DEFAULT_WAIT = 15 * 60
FINAL = ("approved", "denied", "revoked", "consumed", "expired")


# -- commands ----------------------------------------------------------------------------------------


def _idp_for(args: argparse.Namespace, state: State, settings: dict[str, Any]) -> str:
    idp = getattr(args, "idp", None) or os.environ.get("GRANTD_IDP") or state.idp or settings.get("idp")
    if not idp:
        raise CliError(
            "no IdP known: pass --idp URL (or run grantd agent login --idp URL first)",
            kind="usage",
            exit_code=EXIT_USAGE,
        )
    return str(idp).rstrip("/")


def _api(args: argparse.Namespace) -> Api:
    settings = agent_settings()
    state = State.load()
    idp = _idp_for(args, state, settings)
    if state.idp and state.idp != idp:
        raise CliError(
            f"logged in at {state.idp}, not {idp}: run grantd agent login --idp {idp} ...", kind="auth"
        )
    return Api(idp, state)


def cmd_keygen(args: argparse.Namespace) -> int:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = Path(args.output) if args.output else private_dir() / "agent_ed25519"
    if path.exists() and not args.force:
        raise CliError(
            f"{path} exists; use --force to replace it (the IdP knows the old public key)", kind="exists"
        )
    comment = args.comment or os.environ.get("GRANTD_EMAIL") or f"grantd-agent@{socket.gethostname()}"
    key = Ed25519PrivateKey.generate()
    write_private(
        path,
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        ),
    )
    line = public_line(key, comment)
    pub = path.with_name(path.name + ".pub")
    pub.write_text(line + "\n")
    emit(
        args,
        {"private_key": str(path.resolve()), "public_key_file": str(pub.resolve()), "public_key": line},
        f"{line}\n\nprivate key: {path} (0600)\npublic key:  {pub}\n"
        "Give the public key line to an admin to enrol (POST /api/agent/enroll, field publicKey),\n"
        f"then: grantd agent login --idp URL --key {path} --email AGENT_EMAIL",
    )
    return EXIT_OK


def cmd_login(args: argparse.Namespace) -> int:
    settings = agent_settings()
    state = State.load()
    idp = _idp_for(args, state, settings)
    key = (
        args.key
        or os.environ.get("GRANTD_KEY")
        or settings.get("key")
        or (state.key_path if state.key_path and Path(state.key_path).exists() else None)
    )
    if not key:
        default = config_dir() / "agent_ed25519"
        key = str(default) if default.exists() else os.path.expanduser("~/.ssh/id_ed25519")
    email = (
        args.email
        or os.environ.get("GRANTD_EMAIL")
        or settings.get("email")
        or _email_from_pub(key)
        or state.email
    )
    if not email:
        raise CliError("no agent e-mail: pass --email", kind="usage", exit_code=EXIT_USAGE)
    fresh = State() if (state.idp and state.idp != idp) or (state.email and state.email != email) else state
    api = Api(idp, fresh)
    try:
        state = login(api, email, key)
    finally:
        api.close()
    emit(
        args,
        state.public(),
        f"logged in as {state.email} at {state.idp} (token valid until "
        f"{datetime.fromtimestamp(state.expires_at, UTC):%H:%M:%S} UTC; renewed automatically)",
    )
    return EXIT_OK


def _email_from_pub(key: str) -> str | None:
    try:
        parts = Path(key + ".pub").read_text().split()
    except OSError:
        return None
    return parts[2] if len(parts) > 2 and "@" in parts[2] else None


def cmd_whoami(args: argparse.Namespace) -> int:
    """Asks the IdP who the cached token belongs to (renewing it first if it is about to expire)."""
    api = _api(args)
    try:
        me = api.json("GET", "/api/me")
    finally:
        api.close()
    info = {**api.state.public(), "server": me} if api.state else {"server": me}
    emit(
        args,
        info,
        f"{shown(info.get('email'))} at {shown(info.get('idp'))} (token valid until "
        f"{datetime.fromtimestamp(int(info.get('expires_at') or 0), UTC):%Y-%m-%d %H:%M:%S} UTC)",
    )
    return EXIT_OK


def cmd_logout(args: argparse.Namespace) -> int:
    State.path().unlink(missing_ok=True)
    emit(args, {"logged_out": True}, "logged out")
    return EXIT_OK


def _command_of(args: argparse.Namespace) -> list[str]:
    argv = list(args.argv or [])
    if argv and argv[0] == "--":
        argv = argv[1:]
    return argv


def _grant_body(args: argparse.Namespace, *, audience: str, host: str, argv: list[str]) -> dict[str, Any]:
    body: dict[str, Any] = {"target_host": host, "audience": audience, "grant_type": args.type}
    if argv:
        body["command"] = argv
    if getattr(args, "permission", None):
        body["permissions"] = args.permission
    if not argv and not body.get("permissions"):
        raise CliError(
            "nothing to grant: give a command after -- (or --permission)", kind="usage", exit_code=EXIT_USAGE
        )
    if args.duration:
        body["duration"] = args.duration
    run_as = getattr(args, "run_as", None)
    if run_as:
        body["run_as"] = run_as
    body["reason"] = args.reason or (shlex.join(argv) if argv else "")
    return body


def request_grant(api: Api, args: argparse.Namespace, body: dict[str, Any]) -> dict[str, Any]:
    """POST /api/grants. A timed request without --duration is fine when it reuses an approved grant;
    the server refuses it only for a new one, which the CLI then words as a usage error."""
    try:
        return dict(api.json("POST", "/api/grants", json=body))
    except CliError as exc:
        if (
            args.type == "timed"
            and "duration" not in body
            and exc.extra.get("status") == 400
            and "duration" in exc.message
        ):
            raise CliError(
                "--type timed needs --duration (e.g. 1h): no approved timed grant for this command to reuse",
                kind="usage",
                exit_code=EXIT_USAGE,
            ) from None
        raise


def _wait(api: Api, args: argparse.Namespace, grant: dict[str, Any]) -> dict[str, Any]:
    timeout = (
        float(args.timeout)
        if getattr(args, "timeout", None)
        else float(agent_settings().get("wait_timeout", DEFAULT_WAIT))
    )
    waiter = Waiter(api, str(grant["id"]), timeout=timeout, progress=lambda m: info(args, f"grantd: {m}"))
    return waiter.wait()


def cmd_grant_request(args: argparse.Namespace) -> int:
    argv = _command_of(args)
    api = _api(args)
    try:
        body = _grant_body(args, audience=args.audience, host=args.host, argv=argv)
        grant = request_grant(api, args, body)
        if grant.get("status") == "pending" and args.wait:
            info(
                args,
                approval_hint(api.issuer, grant["id"]),
                event="pending",
                id=grant["id"],
                approval_url=approval_url(api.issuer, grant["id"]),
            )
            grant = _wait(api, args, grant)
        emit(args, grant, describe_grant(grant))
        if grant.get("status") == "pending":
            if not args.json:
                print(approval_hint(api.issuer, grant["id"]), file=sys.stderr)
            return EXIT_PENDING
        return EXIT_OK if grant.get("status") == "approved" else EXIT_ERROR
    finally:
        api.close()


def cmd_grant_status(args: argparse.Namespace) -> int:
    api = _api(args)
    try:
        grant = api.json("GET", f"/api/grants/{quote(args.id, safe='')}")
    finally:
        api.close()
    emit(args, grant, describe_grant(grant))
    return EXIT_OK


def cmd_grant_list(args: argparse.Namespace) -> int:
    api = _api(args)
    params: dict[str, Any] = {"limit": args.limit}
    if args.status:
        params["status"] = args.status
    try:
        answer = api.json("GET", "/api/grants", params=params)
    finally:
        api.close()
    items = answer.get("data", []) if isinstance(answer, dict) else answer
    if args.json:
        print(json.dumps(answer))
        return EXIT_OK
    if not items:
        print("no grants")
    for g in items:
        req = g.get("request") or {}
        print(
            f"{shown(g.get('id'))}  {shown(g.get('status')):9}  {shown(req.get('grant_type', 'once')):6}  "
            f"{shown(req.get('target_host'))}  {command_line(req)}"
        )
    return EXIT_OK


def cmd_grant_wait(args: argparse.Namespace) -> int:
    api = _api(args)
    try:
        grant = _wait(api, args, {"id": args.id})
    finally:
        api.close()
    emit(args, grant, describe_grant(grant))
    if grant.get("status") != "approved":
        raise not_usable(grant)
    return EXIT_OK


def fetch_token(api: Api, grant_id: str) -> str:
    try:
        answer = api.json("POST", f"/api/grants/{quote(grant_id, safe='')}/token")
    except CliError as exc:
        if exc.extra.get("status") != 400:
            raise
        # The grant is no longer usable (consumed, revoked, ...): say so in the words `grantd run`
        # uses, once. Piped into `grantd elevate --grant-stdin`, this line is the only one: elevate
        # stays quiet about a pipe that closed without a token.
        try:
            grant = api.json("GET", f"/api/grants/{quote(grant_id, safe='')}")
        except CliError:
            raise exc from None
        if isinstance(grant, dict) and grant.get("status") != "approved":
            raise not_usable(grant) from None
        raise
    token = answer.get("authz_jwt") if isinstance(answer, dict) else None
    if not isinstance(token, str) or not token:
        raise CliError(f"the IdP returned no token for grant {shown(grant_id)}", kind="http")
    return token


def cmd_grant_token(args: argparse.Namespace) -> int:
    api = _api(args)
    try:
        token = fetch_token(api, args.id)
        line = grant_line(api, token)
    finally:
        api.close()
    data = {"id": args.id, "authz_jwt": token}
    if line != token:  # DPoP-bound (D16): the line elevate reads, with a proof for consume
        data["dpop"] = json.loads(line)["dpop"]
    emit(args, data, shown(line))  # a JWT is ASCII: escaping changes only a forgery
    return EXIT_OK


def _run_ciba(
    api: Api, args: argparse.Namespace, argv: list[str], settings: dict[str, Any], **where: Any
) -> int:
    """`grantd run --protocol ciba` (grantd.agent.ciba)."""
    from grantd.agent import ciba

    try:
        api.token()  # logged in: the key and e-mail are known
        args.run_as = args.as_user
        body = _grant_body(args, audience=where["audience"], host=where["host"], argv=argv)
        ack = ciba.request(api, body, args.message)
        info(args, "grantd: asked through CIBA; waiting for a person to decide", event="pending")
        answer = ciba.poll(api, ack, lambda m: None)
        token = grant_line(api, str(answer["access_token"]))
    finally:
        api.close()
    info(args, f"grantd: grant {shown(str(answer.get('grant_id')))} approved (CIBA)", event="approved")
    return hand_off(
        token, argv, settings, elevate_command=args.elevate_command, config=where["elevate_config"]
    )


def _pending_hint(
    grant: dict[str, Any], argv: list[str], settings: dict[str, Any], args: Any, config: str | None
) -> str:
    """What to do next without --wait. A timed or always grant is reused by the next ``grantd run``
    of the same command once approved; a once grant never is (the next run asks again), so it is
    run by handing its token to elevate."""
    gid = shown(grant["id"])
    found = grant.get("request")
    request: dict[str, Any] = found if isinstance(found, dict) else {}
    if (request.get("grant_type") or grant.get("grant_type") or "once") != "once":
        return (
            f"grantd: run the same command again once it is approved, or wait for it: grantd grant wait {gid}"
        )
    prefix = elevate_prefix(settings, args.elevate_command)[0]
    elevate = shlex.join(
        [*prefix, "elevate", *(["--config", config] if config else []), "--grant-stdin", "--"]
    )
    return (
        f"grantd: a once grant is used by one run and a new `grantd run` asks again; once it is approved:\n"
        f"  grantd grant wait {gid} && grantd grant token {gid} | {elevate} {shown(shlex.join(argv))}\n"
        f"(or run with --wait, which waits and runs it)"
    )


def cmd_run(args: argparse.Namespace) -> int:
    argv = _command_of(args)
    if not argv:
        raise CliError(
            "no command: grantd run [--as USER] -- CMD ARGS...", kind="usage", exit_code=EXIT_USAGE
        )
    settings = agent_settings()
    audience = (
        args.audience or os.environ.get("GRANTD_AUDIENCE") or settings.get("audience") or DEFAULT_AUDIENCE
    )
    host = args.host or socket.gethostname()
    elevate_config = args.elevate_config or os.environ.get("GRANTD_ELEVATE_CONFIG") or None
    missing = elevate_missing(elevate_prefix(settings, args.elevate_command)[0])
    if missing:  # before a person is asked to approve something that cannot run
        raise CliError(missing, kind="elevate", exit_code=EXIT_ERROR)
    api = _api(args)
    if getattr(args, "protocol", "grantd") == "ciba":
        return _run_ciba(
            api, args, argv, settings, audience=audience, host=host, elevate_config=elevate_config
        )
    try:
        args.run_as = args.as_user
        body = _grant_body(args, audience=audience, host=host, argv=argv)
        grant = request_grant(api, args, body)
        if grant.get("status") == "pending":
            url = approval_url(api.issuer, grant["id"])
            if not args.wait:
                data = {
                    "id": grant["id"],
                    "status": "pending",
                    "approval_url": url,
                    "exit_code": EXIT_PENDING,
                }
                emit(args, data, "")
                if not args.json:
                    print(approval_hint(api.issuer, grant["id"]), file=sys.stderr)
                    print(_pending_hint(grant, argv, settings, args, elevate_config), file=sys.stderr)
                return EXIT_PENDING
            info(
                args,
                approval_hint(api.issuer, grant["id"]),
                event="pending",
                id=grant["id"],
                approval_url=url,
            )
            grant = _wait(api, args, grant)
        if grant.get("status") != "approved":
            raise not_usable(grant)
        token = grant_line(api, fetch_token(api, grant["id"]))
    finally:
        api.close()
    kind = (grant.get("request") or {}).get("grant_type", args.type)
    reused = bool(grant.get("reused"))
    info(
        args,
        f"grantd: {'reusing grant' if reused else 'grant'} {shown(grant['id'])} ({shown(kind)}) approved by "
        f"{shown(grant.get('decided_by') or 'delegation')}; running as {shown(args.as_user or 'root')}",
        event="approved",
        id=grant["id"],
        grant_type=kind,
        decided_by=grant.get("decided_by"),
        reused=reused,
    )
    return hand_off(token, argv, settings, elevate_command=args.elevate_command, config=elevate_config)

"""`grantd elevate`: run one command as another user, if and only if an AuthZ-JWT allows it (D10).

    sudo -n grantd elevate [--config FILE] (--grant-stdin | --grant-fd N | --grant-file F | --grant JWT) -- CMD ARGS...

It runs as root through a narrow sudoers rule (packaging/sudoers.grantd, installed by packaging/install), never setuid.
Order of work, every step fail-closed (this module runs them in `_elevate`; the module doing each
is named in brackets):

  1. must be root; config (/etc/grantd/elevate.toml) root-owned, not group/world-writable;
     the audit log is opened before anything else can happen (no audit -> no elevation)
     [config, audit]
  2. the grant is read: never from argv under sudo (/proc/PID/cmdline is readable by every local
     user); a --grant-file is opened as the calling user and must be theirs and private (0600)
     [grant, caller]
  3. issuer allowed -> signature (JWKS of the issuer, cached on disk with a bound) -> exp
     -> the `elevate_verify` hook: audience -> target_host -> approvers (rule opt-in, approvers_mode,
     min_approvals: D13) -> exact command, then
     any site plugin's checks [checks, jwks, net; the standard checks: plugins/elevate_default.py]
  4. the run_as user exists and the command is found (before consuming a `once` grant) [run]
  5. consume at the issuer: only a 200 answer with a JSON object counts. A 5xx, a timeout, a
     redirect or a body that is not JSON fails (exit 1). A `timed`/`always` grant runs without the
     issuer only when the config's `offline_grant_types` (default empty) names its type and the
     issuer cannot be connected to at all (refused, unresolvable, no route); `once` never does
     [consume, net]
  6. one audit line (event "attempt", result "allowed"), then the command as a child: fork, then
     in the child a sanitised environment, fixed PATH, initgroups + setgid + setuid and execve;
     the parent (still root, holding nothing the child can reach) forwards signals to it, waits,
     writes a second audit line (event "exit": the status or the signal) and exits with the
     command's status (128+N when a signal N ended it) [env, run, audit]
  7. with a host key (--init-host), every attempt with a token an allowed issuer signed ends with a
     signed receipt posted to the issuer (spooled ones first; spooled itself when the issuer cannot
     take it); its fate is a field of the audit line, never a change of the exit status [receipts, hostkey]

Exit codes: 5 refused (one JSON line on stderr: {"error": code, "reason": text}); 1 config,
usage or network errors; 126 not executable; 127 not found; otherwise the command's own. Every
attempt is one JSON line in the audit log, and an allowed one gets a second when the command ends.
How an attempt ends (Stop, exit codes, the stderr line) lives in grantd.elevate.errors.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import sys
import time
from typing import Any

from grantd.elevate.approvals import approvers_of
from grantd.elevate.audit import Audit
from grantd.elevate.caller import caller_ids, through_sudo
from grantd.elevate.checks import (
    check_binding,
    check_shape,
    check_times,
    decode_unverified,
    plugin_manager,
    run_checks,
    verify_signature,
)
from grantd.elevate.config import DEFAULT_AUDIT_LOG, DEFAULT_CONFIG, approvals_summary, load_config
from grantd.elevate.consume import consume
from grantd.elevate.env import sanitized_env
from grantd.elevate.errors import EXIT_ERROR, EXIT_REFUSED, Stop, config_error, emit, refused
from grantd.elevate.grant import GRANT_IN_ARGV, read_grant, split_grant
from grantd.elevate.jwks import JwksCache
from grantd.elevate.receipts import Attempt, Outbox, check_receipt_config
from grantd.elevate.run import group_name, resolve_command, run_command


def cmd_elevate(args: argparse.Namespace) -> int:
    argv = list(args.argv or [])
    if argv and argv[0] == "--":
        argv = argv[1:]
    config_path = args.config or os.environ.get("GRANTD_ELEVATE_CONFIG") or DEFAULT_CONFIG
    uid, sudo_uid, sudo_user = caller_ids()
    audit = Audit(DEFAULT_AUDIT_LOG)
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = None
    audit.record = {
        "real_uid": sudo_uid if sudo_uid is not None else uid,
        "sudo_user": sudo_user,
        "pid": os.getpid(),
        "command": argv,
        "cmd_hash": None,
        "cwd": cwd,
        "agent": None,
        "grant_id": None,
        "grant_type": None,
        "decided_by": None,
        "issuer": None,
        "audience": None,
        "jti": None,
        "run_as": None,
        "host": None,
    }
    attempt = Attempt(started_at=time.time())
    outbox: list[Outbox] = []  # set once the config is read: where receipts go
    try:
        return _elevate(args, argv, config_path, audit, attempt, outbox)
    except Stop as stop:
        emit(stop)
        if audit.fd is None and config_path == DEFAULT_CONFIG:
            with contextlib.suppress(OSError, Stop):
                audit.open()  # the default log, so that a broken installation or call is still audited
        receipt: dict[str, Any] = {}
        if outbox and not audit.written:  # an attempt tied to a grant: its receipt says it was refused
            try:
                status = outbox[0].send(attempt, "refused", stop.exit_code, stop.reason)
            except Exception as exc:  # noqa: BLE001 - a receipt never changes how an attempt ends
                status = f"lost: {exc.__class__.__name__}: {exc}"
            receipt = {} if status is None else {"receipt": status}
        try:
            audit.write(
                "refused" if stop.exit_code == EXIT_REFUSED else "error",
                stop.reason,
                exit_code=stop.exit_code,
                **receipt,
            )
        except OSError as exc:
            print(json.dumps({"warning": f"cannot write the audit log: {exc}"}), file=sys.stderr)
        return stop.exit_code


def _elevate(
    args: argparse.Namespace,
    argv: list[str],
    config_path: str,
    audit: Audit,
    attempt: Attempt,
    outbox: list[Outbox],
) -> int:
    from grantd.commands import cmd_hash

    if os.geteuid() != 0:
        raise Stop(EXIT_ERROR, "config", "grantd elevate must run as root: use sudo -n grantd elevate ...")
    if args.grant is not None:
        if through_sudo():
            raise Stop(EXIT_ERROR, "grant_in_argv", GRANT_IN_ARGV)
        print(
            json.dumps(
                {
                    "warning": "--grant shows the token to every local user in the process list while the "
                    "command runs; prefer --grant-stdin, --grant-fd N or --grant-file FILE"
                }
            ),
            file=sys.stderr,
            flush=True,
        )
    # --init-host through sudo is allowed (issue 23): `sudo grantd elevate --init-host` is how an
    # administrator runs it. What it makes stays root's alone (a 0600 root-owned key in a root-owned
    # folder, never overwritten); a caller learns only the public line, and the audit log names them.
    _, sudo_uid, _ = caller_ids()
    if sudo_uid not in (None, 0) and os.path.dirname(os.path.abspath(config_path)) != os.path.dirname(
        DEFAULT_CONFIG
    ):
        # A sudo caller may pick another config only among the ones root put into /etc/grantd.
        raise config_error(f"--config outside {os.path.dirname(DEFAULT_CONFIG)}/ is for root only")
    cfg = load_config(config_path)
    audit.path = cfg.audit_log
    try:
        audit.open()
    except OSError as exc:
        raise config_error(f"cannot open the audit log {cfg.audit_log}: {exc.strerror}") from None
    audit.record["host"] = cfg.host
    if args.init_host or args.flush_receipts:
        audit.written = True  # not an attempt
        return _init_host(cfg, audit) if args.init_host else _flush(cfg)
    if args.check_config:
        plugin_manager(cfg)
        receipts = check_receipt_config(cfg)  # host key, spool: a bad one is a config error
        print(
            json.dumps(
                {
                    **receipts,
                    "config": cfg.path,
                    "allowed_issuers": cfg.allowed_issuers,
                    "allowed_approvers": cfg.allowed_approvers,
                    "allowed_audiences": cfg.allowed_audiences,
                    "host": cfg.host,
                    "audit_log": cfg.audit_log,
                    "timeout": cfg.timeout,
                    "offline_grant_types": cfg.offline_grant_types,
                    "offline": (
                        f"{' and '.join(cfg.offline_grant_types)} grants run on cached keys when the issuer "
                        "cannot be connected to at all; once grants always need the issuer"
                        if cfg.offline_grant_types
                        else "every grant needs the issuer (consume)"
                    ),
                    "jwks_refresh": cfg.jwks_refresh,
                    "jwks_max_stale": cfg.jwks_max_stale,
                    "min_approvals": cfg.min_approvals,
                    "approvers_mode": cfg.approvers_mode,
                    "approvals": approvals_summary(cfg),
                    "plugins": cfg.plugins,
                }
            )
        )
        audit.written = True  # not an attempt
        return 0
    if not argv:
        raise Stop(EXIT_ERROR, "usage", "no command given after --")
    audit.record["cmd_hash"] = cmd_hash(argv)
    pm = plugin_manager(cfg)
    token, proof = split_grant(read_grant(args, cfg.timeout))
    header, claims = decode_unverified(token)
    audit.record.update(
        {
            k: claims.get(c) if isinstance(claims.get(c), str) else None
            for k, c in (
                ("agent", "sub"),
                ("grant_id", "grant_id"),
                ("grant_type", "grant_type"),
                ("decided_by", "decided_by"),
                ("issuer", "iss"),
                ("audience", "aud"),
                ("jti", "jti"),
            )
        }
    )
    audit.record["run_as"] = claims.get("run_as") if isinstance(claims.get("run_as"), str) else "root"
    issuer = claims["iss"]
    # 1. issuer, before any network call: a token never makes us talk to a server we do not trust.
    if issuer not in cfg.allowed_issuers:
        raise refused("issuer_not_allowed", "issuer not in allowed issuers")
    # 2. signature, 3. expiry
    cache = JwksCache(cfg)
    verify_signature(token, header, issuer, cache)
    # From here on the attempt is tied to a grant the issuer signed: it gets a receipt (D14). Not
    # before: a forged token would let any local user add log leaves for grants nobody made.
    attempt.issuer = issuer
    attempt.grant_id = audit.record["grant_id"]
    attempt.authz_jti = audit.record["jti"] or ""
    attempt.cmd_hash = audit.record["cmd_hash"]
    attempt.run_as = audit.record["run_as"]
    outbox.append(Outbox(cfg, quiet=True))
    now = time.time()
    check_times(claims, cfg.leeway, now)
    check_shape(claims)
    proof = check_binding(claims, token, proof, cfg.leeway, now)  # a bound grant needs its proof (D16)
    found = approvers_of(claims)  # for the audit line: who approved, as the signed token says
    audit.record["approvers"] = [*found.people, *(f"policy:{rule}" for rule in found.rules)]
    # 4.-7. audience, host, approver, command (plugins.elevate_default), then site plugins
    context = {
        "allowed_issuers": cfg.allowed_issuers,
        "allowed_approvers": cfg.allowed_approvers,
        "allowed_audiences": cfg.allowed_audiences,
        "host": cfg.host,
        "real_uid": audit.record["real_uid"],
        "min_approvals": cfg.min_approvals,
        "approvers_mode": cfg.approvers_mode,
        "now": now,
        "config": cfg.raw,
    }
    run_checks(pm, claims, argv, context)
    # Before consuming a once grant: the user exists and the program can be found.
    run_as = claims.get("run_as") or "root"
    try:
        user = pwd.getpwnam(run_as)
    except KeyError:
        raise Stop(
            EXIT_ERROR, "unknown_user", f"run_as user {run_as!r} does not exist on this host"
        ) from None
    audit.record["run_as"] = attempt.run_as = user.pw_name
    program = resolve_command(argv[0], cfg.path_env)
    # 8. consume
    note = consume(cfg, claims, token, proof)
    env = sanitized_env(dict(os.environ), user, cfg)
    groups = sorted({group_name(g) for g in os.getgrouplist(user.pw_name, user.pw_gid)})
    try:
        audit.write(
            "allowed",
            None,
            uid=user.pw_uid,
            gid=user.pw_gid,
            groups=groups,
            program=program,
            jwks=cache.note,
            consume=note,
        )
    except OSError as exc:  # no audit, no elevation
        raise Stop(EXIT_ERROR, "audit", f"cannot write the audit log {audit.path}: {exc.strerror}") from None
    box = outbox[0]
    return run_command(
        program,
        argv,
        env,
        user,
        audit,
        on_end=lambda result, code, reason: box.send(attempt, result, code, reason),
    )


def _init_host(cfg: Any, audit: Audit) -> int:
    """--init-host: make the host key and print its public line (to enrol with POST /api/hosts)."""
    from grantd.elevate.hostkey import init_host

    line = init_host(cfg)
    audit.host_key_made(cfg.host_key, line)  # who made this host's identity (root, or who ran sudo)
    print(line, flush=True)
    print(
        json.dumps(
            {
                "note": f"host key {cfg.host_key} made; enrol the line above as host {cfg.host!r} "
                "(POST /api/hosts {host, publicKey})"
            }
        ),
        file=sys.stderr,
    )
    return 0


def _flush(cfg: Any) -> int:
    """--flush-receipts: send the spooled receipts; 0 when none is left, 1 otherwise."""
    counts = Outbox(cfg).flush()
    print(json.dumps({"receipt_spool": cfg.receipt_spool, **counts}))
    return 0 if counts["kept"] == 0 else EXIT_ERROR


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "elevate",
        help="run a command as root (or the grant's run_as) if an AuthZ-JWT allows it; run through sudo",
        description="Verify an AuthZ-JWT (issuer, signature, expiry, audience, host, approver, exact command), "
        "consume it at the issuer, then run the command and wait for it. Exit status: the command's "
        "(128+N when signal N ended it); 5 = refused (JSON line on stderr), 1 = config/network error, "
        "126 = not executable, 127 = not found. "
        "Usage: sudo -n grantd elevate --grant-stdin -- CMD ARGS...",
    )
    p.add_argument("--config", help=f"elevation config (default {DEFAULT_CONFIG})")
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--grant-stdin", action="store_true", help="read the token from the first line of stdin"
    )
    source.add_argument(
        "--grant-fd", type=int, metavar="N", help="read the token from file descriptor N (until EOF)"
    )
    source.add_argument(
        "--grant-file",
        metavar="FILE",
        help="read the token from a file or FIFO: opened as the caller, must be the caller's and 0600",
    )
    source.add_argument(
        "--grant",
        metavar="JWT",
        help="the token itself: refused under sudo, since every local user can read it in the process list",
    )
    p.add_argument(
        "--check-config", action="store_true", help="validate the config and plugins, print them, run nothing"
    )
    p.add_argument(
        "--init-host",
        action="store_true",
        help="make this host's key (config host_key, root 0600; never "
        "overwritten) and print the ssh-ed25519 line to enrol",
    )
    p.add_argument(
        "--flush-receipts",
        action="store_true",
        help="send the receipts spooled while the issuer was unreachable (exit 1 when some are still left)",
    )
    p.add_argument("argv", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    p.set_defaults(func=cmd_elevate)

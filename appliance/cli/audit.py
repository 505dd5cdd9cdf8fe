"""`grantd audit verify` and `grantd audit export` (D14, issue 23): an auditor's view of the decision
log over HTTP, checked with grantd.core.tlog.verify.

verify: the newest signed checkpoint, its consistency with the checkpoint saved in ``--state``
(the server's consistency proof), the root recomputed from every leaf, then the semantics. Exit 0
when all holds (the new state is saved), 2 a cryptographic mismatch (the first bad index printed; a
log that shrank or forked against the state), 3 a semantic violation, 1 when the server cannot be
asked (network, credentials).

export: the leaves (with their stored hashes) and the newest checkpoint into a directory, for WORM
storage or a SIEM; checkpoint files already there are kept (a cron job running it collects every
checkpoint it saw), one with other content for the same size is refused.

Credentials: ``--token-file``, else ``$GRANTD_MANAGEMENT_TOKEN``, else the person signed in with
``grantd login`` (for the same server).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx

from grantd.core.tlog.export import ExportError, export_files, load_export, write_export
from grantd.core.tlog.note import NoteError, Verifier
from grantd.core.tlog.verify import VerifyResult, verify_export, verify_log

EXIT_TROUBLE = 1
PAGE = 1000
TOKEN_ENV = "GRANTD_MANAGEMENT_TOKEN"  # noqa: S105 - the name of an environment variable


class AuditError(Exception):
    """The server could not be asked, or the arguments are unusable (exit 1)."""


def _vkeys(value: str) -> list[str]:
    """``--key``: a vkey, or a file of vkey lines (e.g. a saved ``GET /api/audit/key``)."""
    lines = Path(value).read_text(encoding="utf-8").splitlines() if os.path.isfile(value) else [value]
    keys = [line.strip() for line in lines if line.strip()]
    try:
        for key in keys:
            Verifier.from_vkey(key)
    except NoteError as error:
        raise AuditError(f"--key: {error}") from None
    if not keys:
        raise AuditError("--key: no verifier key given")
    return keys


def _token(args: argparse.Namespace) -> str | None:
    if args.token_file:
        try:
            return Path(args.token_file).read_text(encoding="utf-8").strip()
        except OSError as error:
            raise AuditError(f"--token-file: {error.strerror}") from None
    return os.environ.get(TOKEN_ENV, "").strip() or None


def _auth(args: argparse.Namespace, url: str) -> httpx.Auth | None:
    token = _token(args)
    if token:
        return _Bearer(token)
    from grantd.tui.signin import DeviceSignIn, SessionCredential, SessionFile

    store = SessionFile()
    session = store.load()
    if session is None or session.issuer.rstrip("/") != url:
        return None
    return SessionCredential(DeviceSignIn(url), store, session)


class _Bearer(httpx.Auth):
    def __init__(self, token: str):
        self.token = token

    def auth_flow(self, request: httpx.Request) -> Any:
        request.headers["Authorization"] = f"Bearer {self.token}"
        yield request


async def _fetch(url: str, auth: httpx.Auth | None, state_size: int | None) -> dict[str, Any]:
    """The newest note, every leaf with its stored hash up to its size, and the consistency proof
    from ``state_size`` (when the server can give one)."""
    async with httpx.AsyncClient(
        base_url=url, auth=auth, timeout=30, headers={"User-Agent": "grantd-audit"}
    ) as http:
        r = await http.get("/api/audit/checkpoint")
        if r.status_code != 200:
            raise AuditError(f"GET /api/audit/checkpoint: {r.status_code} {r.text[:200]}")
        note = r.text
        try:
            size = int(note.split("\n")[1])
        except (IndexError, ValueError):
            raise AuditError("the checkpoint is not a tlog-checkpoint note") from None
        leaves: list[bytes] = []
        hashes: list[bytes] = []
        while len(leaves) < size:
            r = await http.get(
                "/api/audit/entries", params={"start": len(leaves), "end": min(size, len(leaves) + PAGE)}
            )
            if r.status_code != 200:
                raise AuditError(f"GET /api/audit/entries: {r.status_code} {_detail(r)}")
            entries = r.json().get("entries") or []
            if not entries:
                break  # fewer leaves than the checkpoint: the verifier says what that means
            for entry in entries:
                leaves.append(str(entry["leaf"]).encode("utf-8"))
                hashes.append(base64.b64decode(entry.get("leaf_hash", "")))
        proof = None
        if state_size is not None and 0 < state_size <= size:
            r = await http.get("/api/audit/proof/consistency", params={"from": state_size, "to": size})
            if r.status_code == 200:
                proof = [base64.b64decode(h) for h in r.json()["hashes"]]
        return {
            "note": note,
            "size": size,
            "leaves": leaves,
            "hashes": hashes,
            "proof": proof,
            "issuer": await _issuer(http, url),
        }


async def _issuer(http: httpx.AsyncClient, url: str) -> str:
    """The server's issuer as its discovery document names it: the audience the hosts' receipts are
    signed for, whichever spelling of the server's address (127.0.0.1, localhost, a proxy's name)
    the auditor gave as ``--url``; ``url`` itself when the document cannot be read."""
    try:
        r = await http.get("/.well-known/openid-configuration")
        issuer = r.json().get("issuer") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        issuer = None
    return issuer.rstrip("/") if isinstance(issuer, str) and issuer else url


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", ""))
    except ValueError:
        return response.text[:200]


def _load_state(path: str) -> dict[str, Any] | None:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as error:
        raise AuditError(f"--state: {error.strerror}") from None
    try:
        state = json.loads(text)
    except ValueError:
        raise AuditError(f"--state: {path} is not JSON") from None
    if not isinstance(state, dict) or not isinstance(state.get("size"), int):
        raise AuditError(f"--state: {path} is not a saved state")
    return state


def _save_state(path: str, state: dict[str, Any]) -> None:
    target = Path(path)
    temporary = target.with_name(target.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(state, f)
        f.write("\n")
    temporary.replace(target)


def _report(result: VerifyResult, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result.as_dict()))
        return
    if result.code == 0:
        size = result.checkpoint.size if result.checkpoint else 0
        print(f"ok: {size} leaves, checkpoint signature, consistency, root and semantics verified")
        return
    where = f" (first bad index {result.bad_index})" if result.bad_index is not None else ""
    kind = "cryptographic mismatch" if result.code == 2 else "semantic violation"
    print(f"FAILED, {kind}{where}: {result.reason}")


def cmd_verify(args: argparse.Namespace) -> int:
    import asyncio

    try:
        keys = _vkeys(args.key)
        state = _load_state(args.state)
        if args.from_export:
            try:
                export = load_export(args.from_export)
            except (ExportError, OSError) as error:
                raise AuditError(f"--from-export: {error}") from None
            result = verify_export(export, keys, state, audience=args.url.rstrip("/") if args.url else None)
        else:
            if not args.url:
                raise AuditError("--url is required (or --from-export DIR)")
            url = args.url.rstrip("/")
            fetched = asyncio.run(_fetch(url, _auth(args, url), state["size"] if state else None))
            result = verify_log(
                fetched["note"],
                keys,
                state,
                fetched["leaves"],
                consistency_proof=fetched["proof"],
                claimed_leaf_hashes=fetched["hashes"]
                if len(fetched["hashes"]) == len(fetched["leaves"])
                else None,
                audience=fetched["issuer"],
            )
    except (AuditError, httpx.HTTPError) as error:
        print(f"grantd audit verify: {error}", file=sys.stderr)
        return EXIT_TROUBLE
    if result.code == 0 and result.state is not None:
        _save_state(args.state, result.state)
    _report(result, args.json)
    return result.code


def cmd_export(args: argparse.Namespace) -> int:
    import asyncio

    try:
        url = args.url.rstrip("/")
        fetched = asyncio.run(_fetch(url, _auth(args, url), None))
        if len(fetched["leaves"]) < fetched["size"]:
            raise AuditError(
                f"the server gave {len(fetched['leaves'])} leaves for a checkpoint of {fetched['size']}"
            )
        keys = [] if not args.key else _vkeys(args.key)
        if not keys:

            async def vkeys() -> list[str]:
                async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                    return [
                        line for line in (await http.get("/api/audit/key")).text.splitlines() if line.strip()
                    ]

            keys = asyncio.run(vkeys())
        leaves = fetched["leaves"][: fetched["size"]]
        files = export_files(
            leaves, [fetched["note"]], keys, leaf_hashes=fetched["hashes"][: fetched["size"]]
        )
        write_export(args.directory, files)
    except (AuditError, ExportError, OSError, httpx.HTTPError) as error:
        print(f"grantd audit export: {error}", file=sys.stderr)
        return EXIT_TROUBLE
    print(f"exported {fetched['size']} leaves and checkpoint {fetched['size']} to {args.directory}")
    return 0


def register(sub: Any) -> None:
    from grantd.cli import COMMANDS

    audit = sub.add_parser("audit", help=COMMANDS["audit"].help)
    asub = audit.add_subparsers(dest="audit_command", metavar="SUBCOMMAND", required=True)

    def credentials(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--token-file", help=f"a file holding a bearer token (default: ${TOKEN_ENV}, else `grantd login`)"
        )

    p = asub.add_parser(
        "verify", help="check the log: signature, consistency with --state, root, semantics (exit 0/2/3)"
    )
    p.add_argument("--url", help="the server (its issuer URL)")
    p.add_argument("--key", required=True, help="the log's vkey, or a file of vkey lines")
    p.add_argument(
        "--state", required=True, help="where the last verified checkpoint is kept (created on first run)"
    )
    p.add_argument("--json", action="store_true", help="one JSON object: code, reason, bad_index")
    p.add_argument(
        "--from-export", metavar="DIR", help="check an export directory offline instead of the server"
    )
    credentials(p)
    p.set_defaults(func=cmd_verify)

    p = asub.add_parser(
        "export", help="write the leaves and the newest checkpoint to DIR (earlier checkpoints kept)"
    )
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--url", required=True, help="the server (its issuer URL)")
    p.add_argument("--key", help="vkeys to record in DIR/keys.txt (default: the server's /api/audit/key)")
    credentials(p)
    p.set_defaults(func=cmd_export)

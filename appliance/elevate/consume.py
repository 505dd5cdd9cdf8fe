"""Consuming the grant at the issuer: only a 200 answer with the expected JSON object counts."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from grantd.elevate.config import ElevateConfig
from grantd.elevate.errors import EXIT_ERROR, Stop, refused
from grantd.elevate.net import NetworkError, http_request

MAX_CONSUME_BYTES = 16 * 1024
CONSUME_ERRORS = {
    "already_consumed": "grant already consumed",
    "revoked": "grant revoked",
    "denied": "grant denied",
    "expired": "grant expired",
    "not_approved": "grant not approved",
}
# What a 200 answer must say for each grant type.
CONSUME_ANSWERS = {"once": "consumed", "timed": "valid", "always": "valid"}


def consume(cfg: ElevateConfig, claims: dict[str, Any], token: str, dpop: str | None = None) -> str:
    """Ask the issuer; returns a note for the audit line.

    Only a 200 answer with a JSON object counts: ``{"status": "consumed"}`` for once grants,
    ``{"status": "valid"}`` for timed/always, ``{"error": ...}`` refuses (exit 5), and so does any
    4xx. A 5xx, a redirect, a body that is not JSON or a timeout is a failure (exit 1), never "the
    issuer is away": only a connection that cannot be made at all lets a grant whose type
    ``offline_grant_types`` names run on its signature; a once grant never does.

    A bound grant (``dpop``: its checked proof) goes as ``Authorization: DPoP <token>`` with the
    proof in the ``DPoP`` header (RFC 9449 §7.1); the issuer refuses a replayed proof."""
    url = f"{claims['iss']}/api/grants/{quote(claims['grant_id'], safe='')}/consume"
    grant_type = claims["grant_type"]
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json",
    }
    if dpop is not None:
        headers["Authorization"] = f"DPoP {token}"
        headers["DPoP"] = dpop
    try:
        status, body = http_request(cfg, "POST", url, headers=headers, max_bytes=MAX_CONSUME_BYTES)
    except NetworkError as exc:
        if exc.unreachable and grant_type in cfg.offline_grant_types:
            return f"issuer unreachable, {grant_type} grant accepted on its signature (offline_grant_types): {exc}"
        why = ""
        if exc.unreachable and grant_type != "once":
            why = f" ({grant_type} grants run without the issuer only when offline_grant_types names them)"
        elif exc.unreachable:
            why = " (once grants always need the issuer)"
        raise Stop(EXIT_ERROR, "network", f"cannot consume the grant at the issuer: {exc}{why}") from None
    try:
        answer = json.loads(body) if body else None
    except ValueError:
        answer = None
    if status != 200 and not 400 <= status < 500:  # a redirect, a 5xx, a 204...: no answer to count on
        raise Stop(
            EXIT_ERROR,
            "consume_failed",
            f"cannot consume the grant at the issuer: {url} answered HTTP {status} "
            "(consume must answer 200 with JSON)",
        )
    if status != 200:
        detail = answer.get("detail") if isinstance(answer, dict) else None
        raise refused(
            "rejected_by_issuer",
            f"the issuer refused the grant (HTTP {status}{': ' + str(detail) if detail else ''})",
        )
    if not isinstance(answer, dict):
        raise Stop(
            EXIT_ERROR,
            "consume_failed",
            f"cannot consume the grant at the issuer: {url} answered 200 without "
            "a JSON object (consume must answer 200 with JSON)",
        )
    error = answer.get("error")
    if isinstance(error, str):
        raise refused(
            error if error in CONSUME_ERRORS else "consume_refused",
            CONSUME_ERRORS.get(error, f"the issuer refused the grant: {error}"),
        )
    if answer.get("status") != CONSUME_ANSWERS[grant_type]:
        raise Stop(
            EXIT_ERROR,
            "consume_failed",
            f"cannot consume the grant at the issuer: {url} answered status "
            f"{str(answer.get('status'))[:40]!r} for a {grant_type} grant "
            f"(expected {CONSUME_ANSWERS[grant_type]!r})",
        )
    return f"consume: {answer['status']}"

"""Request-body parsing and field checks shared by every route and service. Violations name the field (400)."""

from __future__ import annotations

import json
import re
from typing import Any

from grantd.core.errors import Problem, bad_request

MAX_TEXT = 255  # identifiers and short texts

EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+$")


def field_error(name: str, message: str) -> Problem:
    """A 400 that names the offending field (D6: violations name the field)."""
    return Problem(400, message, extra={"field": name})


def json_body(raw: bytes | None, *, required: bool = True) -> dict[str, Any]:
    """Parse a JSON object body. A missing optional body is {}; anything else malformed is a 400."""
    if not raw or not raw.strip():
        if required:
            raise bad_request("request body required: a JSON object")
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise bad_request("malformed JSON body") from None
    if not isinstance(value, dict):
        raise bad_request("request body must be a JSON object")
    return value


def string_field(body: dict[str, Any], name: str, *, required: bool = True, max_len: int = 255) -> str | None:
    value = body.get(name)
    if value is None:
        if required:
            raise field_error(name, f"{name} is required")
        return None
    if not isinstance(value, str) or not value.strip():
        raise field_error(name, f"{name} must be a non-empty string")
    if len(value) > max_len:
        raise field_error(name, f"{name} is longer than {max_len} characters")
    return value


def email_field(body: dict[str, Any], name: str, *, required: bool = True) -> str | None:
    value = string_field(body, name, required=required, max_len=254)
    if value is None:
        return None
    value = value.strip().lower()
    if not EMAIL_RE.match(value):
        raise field_error(name, f"{name} must be an e-mail address")
    return value


def first_of(body: dict[str, Any], *names: str) -> tuple[str, Any]:
    """The first of several accepted field names that is present (e.g. agent_id or id)."""
    for name in names:
        if body.get(name) is not None:
            return name, body[name]
    return names[0], None


def seconds_field(body: dict[str, Any], name: str, maximum: int) -> int | None:
    """A positive whole number of seconds, at most ``maximum``; None if absent."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise field_error(name, f"{name} must be a whole number of seconds")
    if value <= 0:
        raise field_error(name, f"{name} must be positive")
    if value > maximum:
        raise field_error(name, f"{name} must be at most {maximum} seconds")
    return value

"""Request-body parsing and field checks shared by every route and service. Violations name the field (400)."""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

from grantd.core.errors import Problem, bad_request

MAX_TEXT = 255  # identifiers and short texts
MAX_DEPTH = 32  # arrays and objects nested deeper than this in a request body are refused

EMAIL_RE = re.compile(r"[^@\s]+@[^@\s]+")  # always used with fullmatch: the whole value


def is_email(value: str) -> bool:
    """The one rule for what grantd takes as an e-mail identifier (people, agents, owners, approvers,
    delegators, delegates, federated sign-ins): ``local@domain`` without white space, and no trailing
    dot on the domain (issue 19: ``alice@example.com.`` names the same mailbox in DNS terms but is
    another string, so it could pose as a second identity of alice)."""
    return bool(EMAIL_RE.fullmatch(value)) and not value.endswith(".")


# D12: identifiers refuse control (Cc) and format (Cf) characters; so does free text, except tab
# and newline. Lone surrogates (Cs) and the Unicode line/paragraph separators (Zl, Zp) go with them:
# none has a place in a name, and all of them can forge or hide text where the value is shown.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_TEXT_ALLOWED = frozenset("\t\n")
_SURROGATE = re.compile("[\ud800-\udfff]")


def field_error(name: str, message: str) -> Problem:
    """A 400 that names the offending field (D6: violations name the field)."""
    return Problem(400, message, extra={"field": name})


def refused_character(value: str, *, identifier: bool = True) -> str | None:
    """The first character ``value`` may not hold (None if clean): for an identifier any control,
    format, surrogate or line/paragraph-separator character; free text may also hold tab and newline."""
    if value.isprintable():  # the common case, in C; printable text holds none of them
        return None
    for char in value:
        if not identifier and char in _TEXT_ALLOWED:
            continue
        if unicodedata.category(char) in _REFUSED_CATEGORIES:
            return char
    return None


def check_identifier(name: str, value: str) -> str:
    """``value`` unchanged if it is a clean identifier, else a 400 naming the field (D12)."""
    char = refused_character(value)
    if char is not None:
        raise field_error(
            name, f"{name} must not contain control or format characters (found U+{ord(char):04X})"
        )
    return value


def check_text(name: str, value: str) -> str:
    """``value`` unchanged if it is clean free text (tab and newline allowed), else a 400 naming the field."""
    char = refused_character(value, identifier=False)
    if char is not None:
        raise field_error(
            name, f"{name} must not contain control or format characters (found U+{ord(char):04X})"
        )
    return value


class _RefusedJson(ValueError):
    """A body that parses but that grantd does not take (the message says why)."""


def _refuse_constant(name: str) -> Any:
    raise _RefusedJson(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _RefusedJson("a number in the JSON body is too large")
    return value


def _check_tree(value: Any) -> None:
    """Refuse nesting deeper than MAX_DEPTH and strings (keys included) with lone surrogates
    (``"\\ud800"`` escapes): they cannot be encoded as UTF-8, so storage, hashing and logs would fail on
    them later. Iterative, so a deep body cannot exhaust the stack here."""
    stack: list[tuple[Any, int, str | None]] = [(value, 0, None)]
    while stack:
        item, depth, top = stack.pop()
        if isinstance(item, str):
            if not item.isascii() and _SURROGATE.search(item):
                raise bad_request(
                    "JSON body holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape): strings must be valid Unicode",
                    **({"field": top} if top is not None and not _SURROGATE.search(top) else {}),
                )
            continue
        if isinstance(item, dict | list):
            if depth >= MAX_DEPTH:
                raise bad_request(f"JSON body is nested more than {MAX_DEPTH} levels deep")
            if isinstance(item, dict):
                for key, child in item.items():
                    field = key if top is None else top
                    stack.append((key, depth + 1, field))
                    stack.append((child, depth + 1, field))
            else:
                stack.extend((child, depth + 1, top) for child in item)


def json_body(raw: bytes | None, *, required: bool = True) -> dict[str, Any]:
    """Parse a JSON object body. A missing optional body is {}; anything else malformed is a 400,
    and so is a body no service could safely take (see _check_tree; NaN and infinities)."""
    if not raw or not raw.strip():
        if required:
            raise bad_request("request body required: a JSON object")
        return {}
    try:
        value = json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise bad_request(f"JSON body is nested more than {MAX_DEPTH} levels deep") from None
    except _RefusedJson as exc:
        raise bad_request(str(exc)) from None
    except (ValueError, UnicodeDecodeError):
        raise bad_request("malformed JSON body") from None
    if not isinstance(value, dict):
        raise bad_request("request body must be a JSON object")
    _check_tree(value)
    return value


def string_field(
    body: dict[str, Any],
    name: str,
    *,
    required: bool = True,
    max_len: int = 255,
    identifier: bool = False,
    blank_is_absent: bool = False,
) -> str | None:
    """A non-empty string of at most ``max_len`` characters; ``null`` means absent, and so does an
    empty or blank string with ``blank_is_absent``. An ``identifier`` refuses every control and
    format character (D12); free text keeps tab and newline."""
    value = body.get(name)
    if blank_is_absent and isinstance(value, str) and not value.strip():
        value = None
    if value is None:
        if required:
            raise field_error(name, f"{name} is required")
        return None
    if not isinstance(value, str) or not value.strip():
        raise field_error(name, f"{name} must be a non-empty string")
    if len(value) > max_len:
        raise field_error(name, f"{name} is longer than {max_len} characters")
    return check_identifier(name, value) if identifier else check_text(name, value)


def identifier_field(
    body: dict[str, Any], name: str, *, required: bool = True, max_len: int = 255
) -> str | None:
    """A name, host, audience, ...: string_field(identifier=True)."""
    return string_field(body, name, required=required, max_len=max_len, identifier=True)


def email_field(body: dict[str, Any], name: str, *, required: bool = True) -> str | None:
    """An e-mail address (an identifier: no control or format characters), stored lowercased (D1)."""
    value = identifier_field(body, name, required=required, max_len=254)
    if value is None:
        return None
    value = value.strip().lower()
    if not is_email(value):
        raise field_error(name, f"{name} must be an e-mail address (without a trailing dot)")
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

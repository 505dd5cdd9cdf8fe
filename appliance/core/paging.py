"""Paging for every list route: one default, one maximum, one cursor format.

Lists are ordered newest first by ``(created_at, id)``; the cursor is ``"<created_at>_<id>"`` of
the last item of a page (opaque to clients, who pass it back as ``cursor``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grantd.core.fields import field_error

DEFAULT_LIMIT = 20
MAX_LIMIT = 100  # larger values are clamped (D6; the peer CLI sends 200)
MAX_CURSOR = 160
_MAX_MS_DIGITS = 15  # ms since the epoch for the next 30,000 years; more digits are not a cursor


@dataclass(frozen=True)
class Cursor:
    created_at: int
    id: str


@dataclass(frozen=True)
class PageRequest:
    limit: int
    after: Cursor | None


def page_request(args: Mapping[str, Any]) -> PageRequest:
    """``limit`` and ``cursor`` from query arguments; bad values are a 400 naming the field."""
    return PageRequest(parse_limit(args.get("limit")), parse_cursor(args.get("cursor")))


def parse_limit(value: Any) -> int:
    if value is None or value == "":
        return DEFAULT_LIMIT
    text = str(value)
    if not text.isascii() or not text.lstrip("-").isdigit() or len(text) > 12:
        raise field_error("limit", "limit must be a whole number")
    return max(1, min(int(text), MAX_LIMIT))


def parse_cursor(value: Any) -> Cursor | None:
    if value is None or value == "":
        return None
    text = str(value)
    at, sep, ident = text.partition("_")
    if (
        not sep
        or not ident
        or len(text) > MAX_CURSOR
        or not at.isascii()
        or not at.isdigit()
        or len(at) > _MAX_MS_DIGITS
        or not ident.isprintable()
    ):
        raise field_error("cursor", "cursor is not valid")
    return Cursor(int(at), ident)


def cursor_of(record: Mapping[str, Any], id_key: str = "id") -> str:
    return f"{record['created_at']}_{record[id_key]}"


def page(
    rows: Sequence[Any], has_more: bool, render: Callable[[Any], Any], id_key: str = "id"
) -> dict[str, Any]:
    """The list body every list route answers: ``{data, pagination: {cursor, has_more}}``."""
    return {
        "data": [render(r) for r in rows],
        "pagination": {
            "cursor": cursor_of(rows[-1], id_key) if has_more and rows else None,
            "has_more": has_more,
        },
    }

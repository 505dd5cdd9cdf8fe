"""Plain-text formatting shared by the widgets: ages, durations, times, one-line action summaries."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from grantd.core.display import escape_text, non_ascii, summarize_argv
from grantd.tui.models import Grant

_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw]?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def age(now_ms: int, then_ms: int | None) -> str:
    if not then_ms:
        return "-"
    seconds = max(0, (now_ms - then_ms) // 1000)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def duration(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    if seconds or not parts:
        parts.append(f"{seconds}s")
    return " ".join(parts)


def parse_duration(text: str) -> int | None:
    """'90', '90s', '15m', '2h', '1d', '1w' -> seconds; None when it is not one of those."""
    match = _DURATION.match(text)
    if not match:
        return None
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def timestamp(ms: int | None) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def action_summary(grant: Grant) -> str:
    """The command (escaped) or the permissions, on one line."""
    if grant.request.command is not None:
        return summarize_argv(grant.request.command)
    return "perm: " + ", ".join(escape_text(p) for p in grant.request.permissions or ())


def one_line(value: str | None) -> str:
    return escape_text(value) if value else ""


def texts_of(grant: Grant) -> list[str]:
    """Every string of a grant an approver reads: who, where, as whom, the command or permissions, why."""
    request = grant.request
    return [
        grant.requester,
        request.target_host,
        request.audience,
        request.run_as or "",
        request.reason or "",
        request.binding_message or "",
        *(request.command or request.permissions or ()),
    ]


def has_non_ascii(grant: Grant) -> bool:
    return any(non_ascii(text) for text in texts_of(grant))


def code_points(value: str | None) -> str:
    """``U+0435 CYRILLIC SMALL LETTER IE, ...`` for a value with non-ASCII characters, else ""."""
    return ", ".join(non_ascii(value))

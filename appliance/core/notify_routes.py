"""`[[notify.routes]]` (D15): which channels carry a notice, by the grant's policies and the
escalation level, and how many pending notices one approver gets per window before the rest is
held for one digest. Pure: grantd.config checks the tables with it, grantd.services.notify picks.

A route::

    [[notify.routes]]
    match.policies = ["prod-root"]    # any of these pinned policies; "default" is the default policy
    match.levels = [0, 1]             # escalation levels (0: the first request); absent: every level
    channels = ["push", "mail"]       # [[notify.channels]] ids
    per_approver_limit = "6/min"      # at most 6 pending notices per approver and channel a minute;
                                      # "N/s", "N/min", "N/h" or "N/d"; absent or 0: no limit

The first route that matches wins. Without routes, or when none matches, every configured channel
carries every notice, without a limit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_POLICY = "default"
ROUTE_KEYS = ("match", "channels", "per_approver_limit")
MATCH_KEYS = ("policies", "levels")
_LIMIT = re.compile(r"^\s*(\d{1,6})\s*/\s*(s|sec|min|h|hour|d|day)\s*$")
_UNITS = {"s": 1, "sec": 1, "min": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}


@dataclass(frozen=True)
class Route:
    channels: tuple[str, ...]
    policies: tuple[str, ...] | None = None  # None: any
    levels: tuple[int, ...] | None = None  # None: any
    limit: int = 0  # pending notices per approver and channel per window; 0: no limit
    window: int = 0  # seconds

    def matches(self, policies: Sequence[str], level: int) -> bool:
        names = tuple(policies) or (DEFAULT_POLICY,)
        if self.policies is not None and not set(self.policies) & set(names):
            return False
        return self.levels is None or level in self.levels


def parse_limit(value: Any) -> tuple[int, int] | None:
    """``"6/min"`` -> (6, 60); 0 -> (0, 0); None for anything else."""
    if value == 0 and not isinstance(value, bool):
        return 0, 0
    if not isinstance(value, str):
        return None
    found = _LIMIT.match(value)
    if not found:
        return None
    return int(found.group(1)), _UNITS[found.group(2)]


def _strings(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        return None
    return tuple(value)


def parse_routes(tables: Any, channel_ids: Sequence[str]) -> tuple[tuple[Route, ...], list[str]]:
    """The routes of ``[[notify.routes]]`` and every problem, each at ``notify.routes[N].key``."""
    problems: list[str] = []
    routes: list[Route] = []
    if not isinstance(tables, list):
        return (), ["notify.routes: must be a list of tables ([[notify.routes]])"]
    for index, table in enumerate(tables):
        at = f"notify.routes[{index}]"
        if not isinstance(table, Mapping):
            problems.append(f"{at}: must be a table")
            continue
        count = len(problems)
        for key in table:
            if key not in ROUTE_KEYS:
                problems.append(f"{at}.{key}: unknown key (a route has {', '.join(ROUTE_KEYS)})")
        channels = _strings(table.get("channels"))
        if channels is None:
            problems.append(f"{at}.channels: must be a non-empty list of [[notify.channels]] ids")
        else:
            for channel in channels:
                if channel not in channel_ids:
                    problems.append(f"{at}.channels: no [[notify.channels]] with id {channel!r}")
        match = table.get("match", {})
        policies: tuple[str, ...] | None = None
        levels: tuple[int, ...] | None = None
        if not isinstance(match, Mapping):
            problems.append(f"{at}.match: must be a table (match.policies, match.levels)")
        else:
            for key in match:
                if key not in MATCH_KEYS:
                    problems.append(f"{at}.match.{key}: unknown key (match has policies, levels)")
            if "policies" in match:
                policies = _strings(match["policies"])
                if policies is None:
                    problems.append(f"{at}.match.policies: must be a non-empty list of policy ids")
            if "levels" in match:
                raw = match["levels"]
                if (
                    not isinstance(raw, list)
                    or not raw
                    or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 100 for v in raw)
                ):
                    problems.append(f"{at}.match.levels: must be a non-empty list of levels (0 to 100)")
                else:
                    levels = tuple(raw)
        limit = parse_limit(table.get("per_approver_limit", 0))
        if limit is None:
            problems.append(
                f'{at}.per_approver_limit: must be like "6/min" (N/s, N/min, N/h or N/d) or 0 (no limit)'
            )
        if len(problems) == count and channels is not None and limit is not None:
            routes.append(Route(channels, policies, levels, limit[0], limit[1]))
    return tuple(routes), problems


def pick(routes: Sequence[Route], policies: Sequence[str], level: int, every: Sequence[str]) -> Route:
    """The first route that matches, else every channel (``every``) without a limit."""
    for route in routes:
        if route.matches(policies, level):
            return route
    return Route(tuple(every))


__all__ = ["DEFAULT_POLICY", "Route", "parse_limit", "parse_routes", "pick"]

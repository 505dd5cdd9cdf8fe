"""Example site plugin for `grantd elevate`: grants only run during office hours.

Load it from /etc/grantd/elevate.toml:

    plugins = ["elevate_office_hours"]
    plugin_dirs = ["/etc/grantd/plugins"]   # root-owned, not group/world-writable

    [office_hours]
    start = "08:00"          # inclusive, 24 h clock
    end = "18:00"            # exclusive
    utc_offset_minutes = 60  # the site's clock (default 0 = UTC)
    grant_types = ["once", "timed", "always"]   # which grants the rule applies to (default: all)

The hook gets the claims (already signature-checked), the argv and a context with the
elevation config (`context["config"]` is the whole TOML document, so a plugin reads its own
table) and the current time (`context["now"]`, epoch seconds).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from grantd.hookspecs import hookimpl


def _minutes(text: str) -> int:
    hours, _, minutes = text.partition(":")
    return int(hours) * 60 + int(minutes or 0)


@hookimpl
def elevate_verify(claims, argv, context):
    settings = context.get("config", {}).get("office_hours", {})
    if not settings:
        return []
    if claims.get("grant_type") not in settings.get("grant_types", ["once", "timed", "always"]):
        return []
    zone = timezone(timedelta(minutes=int(settings.get("utc_offset_minutes", 0))))
    now = datetime.fromtimestamp(context["now"], UTC).astimezone(zone)
    minute = now.hour * 60 + now.minute
    start, end = _minutes(settings.get("start", "08:00")), _minutes(settings.get("end", "18:00"))
    inside = start <= minute < end if start <= end else (minute >= start or minute < end)
    if inside:
        return []
    return [
        f"outside office hours ({settings.get('start', '08:00')}-{settings.get('end', '18:00')}, now {now:%H:%M})"
    ]

"""A plugin that declares its own config section (hook `config_sections`, issue 21.3): `[alerts]`
is then a known key, checked with the rest of the file (key paths, the config's own wording), and
its value is `config.extra["alerts"]`. (It was `[notify]` until grantd's own `[notify]`, D15.)"""

from __future__ import annotations

from sanic.response import json

from grantd.config import ConfigSection
from grantd.core.config_keys import Key, check_value
from grantd.hookspecs import hookimpl

KEYS = {
    "channel": Key(str, "mail", "Where notices go.", choices=("mail", "matrix")),
    "retries": Key(int, 3, "Attempts per notice.", minimum=0, maximum=10),
}


def parse(raw):
    table = raw.get("alerts", {})
    if not isinstance(table, dict):
        return None, ["alerts: must be a table ([alerts])"]
    problems = [f"alerts.{name}: unknown key" for name in table if name not in KEYS]
    for name, key in KEYS.items():
        if name in table:
            check_value(f"alerts.{name}", key, table[name], problems)
    return (
        None if problems else {name: table.get(name, key.default) for name, key in KEYS.items()}
    ), problems


@hookimpl
def config_sections():
    return [ConfigSection("alerts", ("alerts",), parse, "Notifications (a plugin's own section)")]


@hookimpl
def register_routes(app, config):
    @app.get("/notify-plugin/config")
    async def show(request):
        return json(config.extra["alerts"])

"""A plugin that declares its own config section (hook `config_sections`, issue 21.3), as the
notification channels of the next issues will: `[notify]` is then a known key, checked with the
rest of the file (key paths, the config's own wording), and its value is `config.extra["notify"]`."""

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
    table = raw.get("notify", {})
    if not isinstance(table, dict):
        return None, ["notify: must be a table ([notify])"]
    problems = [f"notify.{name}: unknown key" for name in table if name not in KEYS]
    for name, key in KEYS.items():
        if name in table:
            check_value(f"notify.{name}", key, table[name], problems)
    return (
        None if problems else {name: table.get(name, key.default) for name, key in KEYS.items()}
    ), problems


@hookimpl
def config_sections():
    return [ConfigSection("notify", ("notify",), parse, "Notifications (a plugin's own section)")]


@hookimpl
def register_routes(app, config):
    @app.get("/notify-plugin/config")
    async def show(request):
        return json(config.extra["notify"])

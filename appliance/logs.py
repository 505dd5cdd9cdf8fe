"""Logging: text or JSON lines, one access line per request with its request id.

Secrets never reach a log: the access line carries method, path (never the query string, which
may hold codes or tokens), status, duration, peer address and request id - no headers, no bodies.

Nothing a client sends reaches the log unescaped (D12): the text format writes every character
that is not printable (ESC, NUL, CR, LF, RTL overrides, lone surrogates, ...) as a Python-style
escape (``\x1b``, ``\u202e``), so a request cannot forge log lines or drive the terminal that
reads them; the JSON format escapes them with json.dumps (``ensure_ascii``).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

ACCESS_LOGGER = "grantd.access"
LOGGER = "grantd"

_EXTRA_FIELDS = ("request_id", "method", "path", "status", "duration_ms", "remote")


def escape(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every non-printable character written as a backslash escape (repr-style).
    ``keep_newlines`` keeps the line breaks of a traceback, escaping everything else."""
    if text.isprintable():
        return text
    if keep_newlines:
        return "\n".join(escape(line) for line in text.split("\n"))
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _EXTRA_FIELDS:
            if hasattr(record, name):
                entry[name] = getattr(record, name)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        if hasattr(record, "request_id"):
            line += f" rid={escape(str(record.request_id))}"
        return line

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        record.message = escape(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
        return escape(super().formatException(ei), keep_newlines=True)

    def formatStack(self, stack_info: str) -> str:  # noqa: N802 - logging's name
        return escape(super().formatStack(stack_info), keep_newlines=True)


class DropUnreadEmptyBodies(logging.Filter):
    """Sanic logs an ERROR for every GET that carries `Content-Length: 0` ("body not consumed"),
    which some HTTP clients always send. Nothing is wrong with such a request; the line would only
    flood the log (and cost a formatted record per request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "sanic.error" and str(record.msg).endswith("body not consumed."))


def log_config(level: str, fmt: str) -> dict[str, Any]:
    """A logging.config dict for grantd and Sanic's own loggers (Sanic applies it per process)."""
    formatter = {"()": f"grantd.logs.{'JsonFormatter' if fmt == 'json' else 'TextFormatter'}"}
    handler = {
        "class": "logging.StreamHandler",
        "formatter": "grantd",
        "stream": "ext://sys.stderr",
        "filters": ["unread_bodies"],
    }
    lvl = level.upper()
    loggers = {
        name: {"level": lvl, "handlers": ["console"], "propagate": False}
        for name in ("grantd", "sanic.root", "sanic.error", "sanic.server", "sanic.websockets")
    }
    loggers["sanic.access"] = {"level": "WARNING", "handlers": ["console"], "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"grantd": formatter},
        "filters": {"unread_bodies": {"()": "grantd.logs.DropUnreadEmptyBodies"}},
        "handlers": {"console": handler},
        "loggers": loggers,
    }

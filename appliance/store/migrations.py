"""Numbered migrations as ``.sql`` files, shared by the SQL backends.

A backend keeps its migrations in a folder of its package, one file per number:
``0001_some_words.sql``. The file's first line is ``-- <number>: <name>`` (the name recorded in
``schema_migrations``); the rest is statements, each ending with ``;`` at the end of a line, and
``--`` comments. Never edit a released file: add the next number.

A value SQL cannot spell the same way in every dialect is a named parameter the backend binds
when it runs the statement (SQLite's ``:now``, the current time in milliseconds); no migration
runs Python of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable

_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_HEAD = re.compile(r"^-- (\d+): (.+)$")
_END = re.compile(r";[ \t]*$", re.MULTILINE)


@dataclass(frozen=True)
class SqlMigration:
    version: int
    name: str
    statements: tuple[str, ...]


def statements(text: str) -> list[str]:
    """The statements of one migration file, in order, without their ``;`` (comment-only parts dropped)."""
    found = []
    for part in _END.split(text):
        code = "\n".join(line for line in part.splitlines() if not line.lstrip().startswith("--")).strip()
        if code:
            found.append(code)
    return found


def parse(file_name: str, text: str) -> SqlMigration:
    number = _FILE.match(file_name)
    head = _HEAD.match(text.partition("\n")[0])
    if number is None or head is None or int(head.group(1)) != int(number.group(1)):
        raise ValueError(f"{file_name}: a migration file is NNNN_words.sql and starts with '-- N: name'")
    return SqlMigration(int(number.group(1)), head.group(2).strip(), tuple(statements(text)))


def load(package: str, folder: str) -> list[SqlMigration]:
    """The migrations in ``folder`` of ``package`` (package data), by number; numbers run 1, 2, 3... without gaps."""
    directory: Traversable = files(package).joinpath(folder)
    found = sorted(
        (
            parse(entry.name, entry.read_text(encoding="utf-8"))
            for entry in directory.iterdir()
            if entry.name.endswith(".sql")
        ),
        key=lambda m: m.version,
    )
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise ValueError(f"{package}/{folder}: migrations must be numbered 1, 2, 3... without gaps")
    return found

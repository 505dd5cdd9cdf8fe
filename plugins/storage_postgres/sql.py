"""SQL text helpers of the PostgreSQL backend: column lists, placeholders, the paging condition."""

from __future__ import annotations

from collections.abc import Sequence

from grantd.store.records import (
    PERSON_COLUMNS,
)

# Column allow-lists (grantd.store.records): the only names that ever reach SQL text.
PERSON_SELECT = f"SELECT {', '.join(PERSON_COLUMNS)} FROM people"  # noqa: S608 - fixed columns (not the fold columns)
PG = "pyformat"  # psycopg's placeholders: %(name)s


def _cols(columns: Sequence[str]) -> str:
    return ", ".join(columns)


def _marks(columns: Sequence[str]) -> str:
    return ", ".join(f"%({c})s" for c in columns)


def _insert(table: str, columns: Sequence[str]) -> str:
    return f"INSERT INTO {table} ({_cols(columns)}) VALUES ({_marks(columns)})"  # noqa: S608 - fixed column lists

"""Helpers for SQL backends: a :class:`~grantd.core.lifecycle.Lapse` as a WHERE clause.

The lapse rule is data (``{stored_status: (column, cutoff)}``); these functions translate that
mapping mechanically, so no backend writes the rule down a second time. Column names are checked
against the allow-list the caller passes (the record's columns) and never come from a request;
statuses and cutoffs are bound as parameters.

Each function returns ``(sql, params)`` with named parameters (``:lapse_status_0``...); combine
them with other named parameters in one statement. ``paramstyle="pyformat"`` writes them as
``%(lapse_status_0)s`` instead (psycopg, PostgreSQL) and a rule-less clause as ``FALSE``.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from grantd.core.lifecycle import EXPIRED, Lapse
from grantd.core.paging import PageRequest

Clause = tuple[str, dict[str, Any]]


def _mark(name: str, paramstyle: str) -> str:
    """The placeholder of parameter ``name`` in ``paramstyle`` (``named`` or ``pyformat``)."""
    if paramstyle == "named":
        return f":{name}"
    if paramstyle == "pyformat":
        return f"%({name})s"
    raise ValueError(f"unknown paramstyle {paramstyle!r}")


def lapsed_sql(
    lapse: Lapse, columns: Collection[str], *, only: str | None = None, paramstyle: str = "named"
) -> Clause:
    """True for a row that has lapsed (``status = S AND column IS NOT NULL AND column <= cutoff``
    for each rule, OR-ed; each term is an index range on ``(status, column)``). ``only`` limits it
    to the rule of one stored status. Never NULL, so ``NOT (...)`` is safe. ``0`` if no rule applies."""
    terms: list[str] = []
    params: dict[str, Any] = {}
    for i, (status, (column, cutoff)) in enumerate(sorted(lapse.cutoffs.items())):
        if only is not None and status != only:
            continue
        if column not in columns or not column.isidentifier():
            raise ValueError(f"lapse column {column!r} is not a column of this record")
        status_mark, cutoff_mark = (
            _mark(f"lapse_status_{i}", paramstyle),
            _mark(f"lapse_cutoff_{i}", paramstyle),
        )
        terms.append(f"(status = {status_mark} AND {column} IS NOT NULL AND {column} <= {cutoff_mark})")
        params[f"lapse_status_{i}"] = status
        params[f"lapse_cutoff_{i}"] = int(cutoff)
    nothing = "0" if paramstyle == "named" else "FALSE"
    return ("(" + " OR ".join(terms) + ")" if terms else nothing), params


def not_lapsed_sql(lapse: Lapse, columns: Collection[str], *, paramstyle: str = "named") -> Clause:
    """True for a row that has not lapsed."""
    sql, params = lapsed_sql(lapse, columns, paramstyle=paramstyle)
    return f"NOT {sql}", params


def status_sql(lapse: Lapse, status: str, columns: Collection[str], *, paramstyle: str = "named") -> Clause:
    """The rows whose status *as read under* ``lapse`` is ``status``: ``expired`` is the stored
    ``expired`` or any lapsed row; a status with a lapse rule is that stored status minus its
    lapsed rows; any other status is the stored one."""
    params: dict[str, Any] = {"read_status": status}
    mark = _mark("read_status", paramstyle)
    if status == EXPIRED:
        lapsed, extra = lapsed_sql(lapse, columns, paramstyle=paramstyle)
        return f"(status = {mark} OR {lapsed})", {**params, **extra}
    if status in lapse.cutoffs:
        lapsed, extra = lapsed_sql(lapse, columns, only=status, paramstyle=paramstyle)
        return f"(status = {mark} AND NOT {lapsed})", {**params, **extra}
    return f"status = {mark}", params


def after_sql(
    page: PageRequest, id_column: str, where: list[str], params: dict[str, Any], *, paramstyle: str = "named"
) -> None:
    """Lists run newest first by (created_at, id): ask for ``page.limit + 1`` rows (``limit``) and,
    after a cursor, add the condition for the rows after the last one of the previous page.
    ``id_column`` is one of the caller's fixed column names, never from a request."""
    if not id_column.isidentifier():
        raise ValueError(f"id column {id_column!r} is not a column name")
    params["limit"] = page.limit + 1
    if page.after is not None:
        at, last = _mark("after_at", paramstyle), _mark("after_id", paramstyle)
        where.append(f"(created_at < {at} OR (created_at = {at} AND {id_column} < {last}))")
        params["after_at"], params["after_id"] = page.after.created_at, page.after.id


__all__ = ["Clause", "after_sql", "lapsed_sql", "not_lapsed_sql", "status_sql"]

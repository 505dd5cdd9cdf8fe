"""Fixtures of the slow tier's own PostgreSQL tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support import postgres as pg


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[pg.Postgres]:
    """A private PostgreSQL server for the module (tests/support/postgres.py)."""
    pg.require()
    started = pg.Postgres().start()
    yield started
    started.stop()


@pytest.fixture
def pg_dsn(own_postgres: pg.Postgres) -> Iterator[str]:
    """A fresh schema on it, dropped after the test."""
    made = own_postgres.create_schema()
    yield made
    own_postgres.drop_schema(made)

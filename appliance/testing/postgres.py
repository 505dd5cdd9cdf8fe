"""Empty PostgreSQL schemas for the contract suite, one per test.

From an installed copy the suite uses the database ``GRANTD_CONTRACT_POSTGRES_DSN`` names (a libpq
connection string; its user needs CREATE on the database): each test gets a new schema there,
dropped after it. A test harness that runs a server of its own registers it with :func:`use`
(grantd's own suite starts one, tests/contract/conftest.py). With neither, the PostgreSQL tests are
skipped, saying how to run them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Protocol

import pytest

ENV = "GRANTD_CONTRACT_POSTGRES_DSN"


class Schemas(Protocol):
    def create_schema(self) -> str:
        """A DSN whose ``search_path`` is a new, empty schema alone."""

    def drop_schema(self, dsn: str) -> None:
        """Drop the schema a DSN from ``create_schema`` names, and everything in it."""


class DsnSchemas:
    """Schemas in the database one DSN names."""

    def __init__(self, dsn: str):
        self.dsn = dsn

    def create_schema(self) -> str:
        import psycopg
        from psycopg.conninfo import make_conninfo

        name = "grantd_contract_" + uuid.uuid4().hex[:16]
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}".encode())
        return make_conninfo(self.dsn, options=f"-csearch_path={name}")

    def drop_schema(self, dsn: str) -> None:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict

        name = str(conninfo_to_dict(dsn)["options"]).rpartition("search_path=")[2]
        if not name.isidentifier():
            raise ValueError(f"not a schema of the contract suite: {name!r}")
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE".encode())


_PROVIDER: list[Callable[[], Schemas]] = []


def use(provider: Callable[[], Schemas]) -> None:
    """Take schemas from ``provider()`` (called when a test first needs one) instead of the DSN."""
    _PROVIDER[:] = [provider]


def configured() -> bool:
    return bool(_PROVIDER) or bool(os.environ.get(ENV))


def schemas() -> Schemas:
    if _PROVIDER:
        return _PROVIDER[0]()
    dsn = os.environ.get(ENV)
    if not dsn:
        pytest.skip(f"PostgreSQL: set {ENV} to a database the suite may create schemas in")
    return DsnSchemas(dsn)

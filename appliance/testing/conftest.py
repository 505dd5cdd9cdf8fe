"""The storage contract suite: every test runs against every backend in ``BACKENDS``.

From an installed grantd, in any directory::

    python -m pytest --pyargs grantd.testing

runs it against the built-in SQLite backend and the in-memory example (``grantd.testing.memory_store``),
and against PostgreSQL when ``GRANTD_CONTRACT_POSTGRES_DSN`` names a database the suite may create
schemas in (``grantd.testing.postgres``; each test gets an empty schema of its own).

A plugin author runs it against their backend without editing it (docs/plugins.md)::

    GRANTD_CONTRACT_STORE=my_package.store:open_for_contract python -m pytest --pyargs grantd.testing

``open_for_contract(tmp_path)`` returns a fresh, empty ``grantd.store.Store`` (it may use
``tmp_path`` for files); the suite migrates it. Or override the ``store`` fixture in a conftest.
test_processes.py races several OS processes, each with its own store, on one SQLite file and on
one PostgreSQL database. grantd's own suite runs this one from tests/contract/ with a PostgreSQL
server it starts itself.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from grantd.plugins.storage_sqlite import SQLiteStore
from grantd.store import Store
from grantd.testing import postgres
from grantd.testing.memory_store import MemoryStore


def _plugin_factory() -> Callable[[Path], Any] | None:
    spec = os.environ.get("GRANTD_CONTRACT_STORE")
    if not spec:
        return None
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name or "open_for_contract")  # type: ignore[no-any-return]


_DATABASES: dict[int, str] = {}


def _open_postgres() -> Any:
    from grantd.plugins.storage_postgres import PostgresStore

    dsn = postgres.schemas().create_schema()
    opened = PostgresStore(dsn, pool_size=20)
    _DATABASES[id(opened)] = dsn
    return opened


def factories() -> dict[str, Callable[[Path], Any]]:
    if (plugin := _plugin_factory()) is not None:
        return {"plugin": plugin}
    found: dict[str, Callable[[Path], Any]] = {"sqlite": lambda tmp: SQLiteStore(tmp / "data" / "grantd.db")}
    if postgres.configured():
        found["postgres"] = lambda tmp: _open_postgres()
    found["example"] = lambda tmp: MemoryStore()
    return found


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", list(factories()))


@pytest.fixture
async def store(backend: str, tmp_path: Path) -> AsyncIterator[Store]:
    opened = factories()[backend](tmp_path)
    assert isinstance(opened, Store), "the backend must implement grantd.store.Store"
    await opened.migrate()
    try:
        yield opened
    finally:
        opened.close()
        dsn = _DATABASES.pop(id(opened), None)
        if dsn is not None:
            postgres.schemas().drop_schema(dsn)

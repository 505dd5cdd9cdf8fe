"""The storage contract suite: every test runs against every backend in ``BACKENDS``.

A plugin author runs it against their backend without editing it (docs/plugins.md):

    GRANTD_CONTRACT_STORE=my_package.store:open_for_contract .venv/bin/python -m pytest tests/contract

``open_for_contract(tmp_path)`` returns a fresh, empty ``grantd.store.Store`` (it may use
``tmp_path`` for files); the suite migrates it. Or override the ``store`` fixture in a conftest.
Tests that need several OS processes on one database file are SQLite's own (test_processes.py).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from support.memory_store import MemoryStore

from grantd.plugins.storage_sqlite import SQLiteStore
from grantd.store import Store


def _plugin_factory() -> Callable[[Path], Any] | None:
    spec = os.environ.get("GRANTD_CONTRACT_STORE")
    if not spec:
        return None
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name or "open_for_contract")  # type: ignore[no-any-return]


FACTORIES: dict[str, Callable[[Path], Any]] = {
    "sqlite": lambda tmp: SQLiteStore(tmp / "data" / "grantd.db"),
    "example": lambda tmp: MemoryStore(),
}
if (plugin := _plugin_factory()) is not None:
    FACTORIES = {"plugin": plugin}
BACKENDS = list(FACTORIES)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def store(backend: str, tmp_path: Path) -> AsyncIterator[Store]:
    opened = FACTORIES[backend](tmp_path)
    assert isinstance(opened, Store), "the backend must implement grantd.store.Store"
    await opened.migrate()
    try:
        yield opened
    finally:
        opened.close()

"""Embedded SQLite storage (the default), on sqlite-utils: ``grantd.store.Store`` on one file.

One connection per server process for reads and one for writes, used from the event loop: with WAL
and synchronous=NORMAL a commit costs tens of microseconds, less than a hop to a thread pool (see
docs/performance.md). Several processes share the file; every write runs in ``BEGIN IMMEDIATE`` so
writers queue on SQLite's write lock instead of failing, and everything single-use is decided by a
conditional DELETE/UPDATE and its row count (``RETURNING``), never in process memory.

The file holds the signing keys: the database, its -wal and -shm files, backups and the directories
this module creates are private to the service account (D12).

The package is shaped like the contract (``grantd.store``): one module per record kind (keys, agents,
grants, delegations, rates, people, oauth), the connection machinery (``connection``), the private
files (``files``), the numbered migrations (``migrations``) and the store that puts them together
(``store``, which also holds the ``storage_backends`` hook).
"""

from .migrations import MIGRATIONS
from .store import SQLiteStore, storage_backends

__all__ = ["MIGRATIONS", "SQLiteStore", "storage_backends"]

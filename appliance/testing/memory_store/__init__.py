"""A worked example of a storage backend: everything in memory, in one process.

Written from docs/plugins.md as a plugin author would, to show two things a backend must get right:

- **Reading a Lapse.** The rules come in as data, ``{stored_status: (column, cutoff)}``; a record
  whose status is a key and whose column is not None and ``<= cutoff`` has lapsed and reads as
  ``expired``. ``Lapse.lapsed(record)`` does exactly that for Python records; a SQL backend writes
  the same test as a WHERE clause (``grantd.store.sql``).
- **Deciding single winners.** Every conditional change checks its condition and applies the change
  inside one critical section (here ``self._tx``, one ``asyncio.Lock`` standing in for "the
  transaction"), so of N concurrent callers exactly one sees the condition hold. A real database
  does the same with a conditional ``UPDATE``/``DELETE`` and its row count, which also holds across
  processes — this backend only serves one process, so it is for tests and examples, not production.

It ships with grantd as ``grantd.testing.memory_store`` and registers like any plugin (a
``storage_backends`` hookimpl): ``[plugins] modules = ["grantd.testing.memory_store"]`` and
``[storage] plugin = "memory"``. The contract suite (``grantd.testing``) runs against it as the
``example`` backend.

The package: ``data`` (the dicts and the lock), ``parts`` (keys, agents, challenges, grants,
delegations, rates), ``people``, ``oauth``, and ``store`` (``MemoryStore`` and the hook).
"""

from .store import MemoryStore, storage_backends

__all__ = ["MemoryStore", "storage_backends"]

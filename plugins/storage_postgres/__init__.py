"""PostgreSQL storage: ``grantd.store.Store`` on one database shared by any number of grantd nodes.

``[storage] plugin = "postgres"`` with ``dsn`` (a libpq connection string or URI; a secret, so
``file:PATH`` or ``env:NAME``) and ``pool_size``. Needs the ``postgres`` extras (psycopg 3;
its connections are pooled here, ``_Pool``), imported only when this backend is opened: a SQLite-only install does without them.

How it keeps the contract (``grantd.store``):

- **One call, one transaction**: every method takes a pooled connection and runs in one
  transaction (READ COMMITTED), committed when the method returns, rolled back when it raises: a
  single statement in autocommit, several between BEGIN and COMMIT (``_Database.tx``).
- **Exactly one winner**: conditional writes are single statements whose row locks decide between
  callers on every node: ``UPDATE ... WHERE status IN (...) RETURNING``, ``DELETE ... RETURNING``,
  ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING``. Checks that span rows (the first signing key,
  e-mail uniqueness across agents, persons and delegators) take a transaction-scoped advisory lock
  first, as SQLite's single writer does for everything.
- **Events in commit order**: ``grant_events.seq`` comes from a sequence, and a sequence alone
  hands out numbers in *start* order, not commit order (a reader could see 6 before 5 commits and
  skip 5 for ever). So every transaction that records events takes one advisory lock just before
  it inserts them and holds it until it commits: numbers are taken in commit order. The same
  transaction sends ``NOTIFY grantd_events``; ``grants.wait_for_events`` LISTENs on a connection
  of its own, so the event hub of every node wakes as soon as a change commits (polling stays as
  a safety net, and takes over while the listening connection is down).
- **Migrations** are numbered and recorded in ``schema_migrations``; ``migrate`` holds a session
  advisory lock, so nodes starting together migrate once.

Where the connections live: the store has an event loop of its own, in a thread, with a pool
that outlives the caller's loops (the CLI runs several ``asyncio.run``); a call from any loop is
one hop there and back. Once ``serving()`` is called on the loop a server serves requests on,
calls from that loop use a second pool on that loop itself, and its LISTEN connection is read by
that loop too: no hop, no thread wake-ups (issue 14). The pools are small and have no background
tasks, so ``close()`` — synchronous in the contract — closes every connection for real, also
when called on the serving loop itself (a server's after_server_stop).

Round trips: connections are in autocommit, so a method that is one statement is one round trip
(its own READ COMMITTED transaction); a method of several statements runs them between BEGIN and
COMMIT. The grant writes with events send theirs in batches (``_Batch``: ``BEGIN; UPDATE``, then
``lock; INSERT event; COMMIT``) as server-side prepared statements: the same statements in the
same order, in two round trips instead of five.

The package is shaped like the contract (``grantd.store``): one module per record kind (keys, agents,
grants, delegations, rates, people, oauth; ``principals`` holds what agents and persons share), the
connection machinery apart (``loop``: the store's own loop thread; ``pool``: the pool, the LISTEN
connection; ``connection``: transactions, batches, locks), the numbered migrations (``migrations``)
and the store that puts them together (``store``, which also holds the ``storage_backends`` hook).
"""

from .migrations import MIGRATIONS
from .store import PostgresStore, storage_backends

__all__ = ["MIGRATIONS", "PostgresStore", "storage_backends"]

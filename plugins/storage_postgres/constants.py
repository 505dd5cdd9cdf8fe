"""Names the PostgreSQL backend's modules share: the NOTIFY channel, advisory lock keys, timeouts."""

from __future__ import annotations

from typing import ParamSpec, TypeVar

CHANNEL = "grantd_events"
# Advisory lock keys (bigint), "grantd" in ASCII plus a number: one namespace for this application.
MIGRATE_LOCK = 0x6772616E7464_0001
EVENTS_LOCK = 0x6772616E7464_0002
KEYS_LOCK = 0x6772616E7464_0003
PRINCIPALS_LOCK = 0x6772616E7464_0004
# Per-person locks of refresh families: pg_advisory_xact_lock(REFRESH_LOCKS, hashtext(person_id)),
# the two-int4 key space (it never meets the bigint keys above).
REFRESH_LOCKS = 0x67726E74
# Per-owner locks of the pending-grant bound (pending_per_owner): (OWNER_LOCKS, hashtext(owner key)).
OWNER_LOCKS = 0x676F776E
CONNECT_TIMEOUT = 10.0  # seconds to wait for a pooled connection
PING_TIMEOUT = 2.0
CLOSE_TIMEOUT = 10.0
MAX_LIFETIME = 3600.0  # seconds a pooled connection lives (then it is replaced as it comes back)
_IDLE = 0  # psycopg.pq.TransactionStatus.IDLE: no transaction open, no query in flight
_TUPLES_OK = 2  # psycopg.pq.ExecStatus.TUPLES_OK: a result with rows
LISTEN_RETRY = 1.0  # seconds between attempts to re-open the LISTEN connection
RATE_SWEEP_LIMIT = 1000  # ended rate windows one hit deletes at most

P = ParamSpec("P")
R = TypeVar("R")
AUDIT_LOCK = 0x6772616E7464_0005  # audit_events: seq in commit order (as EVENTS_LOCK for grant events)
TLOG_KEYS_LOCK = 0x6772616E7464_0006

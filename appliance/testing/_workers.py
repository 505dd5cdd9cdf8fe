"""Work for the multi-process tests: each runs in a process of its own that opens its own store on
the shared database — a SQLite file, or a PostgreSQL DSN written ``postgres:DSN`` (imports nothing
of pytest, so a spawned process starts fast)."""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

from grantd.core.lifecycle import grant_lapse
from grantd.plugins.storage_sqlite import SQLiteStore
from grantd.store import Conflict
from grantd.store.records import Agent, Grant

TAKERS = 10


def open_store(target: str) -> Any:
    """A store on ``target``: ``postgres:DSN`` or a SQLite file's path."""
    if target.startswith("postgres:"):
        from grantd.plugins.storage_postgres import PostgresStore

        return PostgresStore(target.removeprefix("postgres:"))
    return SQLiteStore(target)


def _run(path: str, start_at: float, work: Any) -> Any:
    store = open_store(path)
    try:
        time.sleep(max(0.0, start_at - time.time()))  # start together, to make the race real
        return asyncio.run(work(store))
    finally:
        store.close()


def take(path: str, start_at: float) -> list[int | None]:
    async def work(store: SQLiteStore) -> list[int | None]:
        return list(await asyncio.gather(*(store.challenges.take("c1", "agt_a") for _ in range(TAKERS))))

    return _run(path, start_at, work)  # type: ignore[no-any-return]


def consume(path: str, start_at: float, now: int) -> list[int]:
    async def work(store: SQLiteStore) -> list[int]:
        results = await asyncio.gather(
            *(
                store.grants.update_if(
                    "g1",
                    expect=["approved"],
                    changes={"status": "consumed", "used_at": now},
                    event="grant.consumed",
                    lapse=grant_lapse(now, 3600),
                    now=now,
                )
                for _ in range(TAKERS)
            )
        )
        return [r["version"] for r in results if r is not None]

    return _run(path, start_at, work)  # type: ignore[no-any-return]


def add_first_key(path: str, start_at: float, kid: str, now: int) -> bool:
    async def work(store: SQLiteStore) -> bool:
        return await store.keys.add_first(
            {
                "kid": kid,
                "alg": "EdDSA",
                "private_pem": "p",
                "public_jwk": {},
                "created_at": now,
                "retired_at": None,
            }
        )

    return _run(path, start_at, work)  # type: ignore[no-any-return]


def migrate(path: str, start_at: float) -> list[int]:
    return _run(path, start_at, lambda store: store.migrate())  # type: ignore[no-any-return]


def hit(path: str, start_at: float, now: int) -> list[int]:
    async def work(store: SQLiteStore) -> list[int]:
        window = now - now % 60_000
        return list(
            await asyncio.gather(
                *(store.rates.hit("auth:10.0.0.1", window, 60_000, now) for _ in range(TAKERS))
            )
        )

    return _run(path, start_at, work)  # type: ignore[no-any-return]


def complete_registration(path: str, start_at: float, token_hash: str, tag: str, now: int) -> list[str]:
    """Redeem one registration URL TAKERS times at once; each result is the winner's credential id
    or the field of the Conflict."""

    async def redeem(store: SQLiteStore, i: int) -> str:
        person_id, credential_id = f"usr_{tag}{i}", f"cred-{tag}{i}"
        try:
            _, added = await store.registrations.complete(
                token_hash,
                {
                    "person_id": person_id,
                    "email": "alice@example.com",
                    "name": "Alice",
                    "admin": False,
                    "status": "active",
                    "created_at": now,
                    "updated_at": now,
                },
                {
                    "credential_id": credential_id,
                    "person_id": person_id,
                    "rp_id": "grantd.example.com",
                    "public_key": "pk",
                    "sign_count": 0,
                    "transports": [],
                    "aaguid": "",
                    "name": "Passkey 1",
                    "backed_up": False,
                    "created_at": now,
                    "last_used_at": None,
                },
                now,
            )
        except Conflict as exc:
            return f"conflict:{exc.field}"
        return added["credential_id"]

    async def work(store: SQLiteStore) -> list[str]:
        return list(await asyncio.gather(*(redeem(store, i) for i in range(TAKERS))))

    return _run(path, start_at, work)  # type: ignore[no-any-return]


def take_onetime(path: str, start_at: float, kind: str, key: str, now: int) -> list[dict[str, Any] | None]:
    async def work(store: SQLiteStore) -> list[dict[str, Any] | None]:
        return list(await asyncio.gather(*(store.onetime.take(kind, key, now) for _ in range(TAKERS))))

    return _run(path, start_at, work)  # type: ignore[no-any-return]


def put_onetime(path: str, start_at: float, kind: str, key: str, now: int) -> list[bool]:
    """TAKERS inserts of one (kind, key) at once: True for each that was stored (a DPoP jti seen
    for the first time), False for each Conflict (a replay)."""

    async def put(store: SQLiteStore) -> bool:
        try:
            await store.onetime.put(kind, key, {}, now + 70_000, now)
        except Conflict:
            return False
        return True

    async def work(store: SQLiteStore) -> list[bool]:
        return list(await asyncio.gather(*(put(store) for _ in range(TAKERS))))

    return _run(path, start_at, work)  # type: ignore[no-any-return]


def redeem_ciba(path: str, start_at: float, auth_req_hash: str, now: int) -> list[bool]:
    """TAKERS redemptions of one CIBA request at once: True for each that won."""

    async def work(store: SQLiteStore) -> list[bool]:
        results = await asyncio.gather(*(store.ciba.redeem(auth_req_hash, now) for _ in range(TAKERS)))
        return [r is not None for r in results]

    return _run(path, start_at, work)  # type: ignore[no-any-return]


def rotate_refresh(
    path: str, start_at: float, old: dict[str, Any], tag: str, now: int
) -> list[tuple[str, str]]:
    """Redeem one refresh token TAKERS times at once, each with a new token of its own; each result
    is (outcome, the new token's hash)."""

    async def rotate(store: SQLiteStore, i: int) -> tuple[str, str]:
        new_hash = hashlib.sha256(f"{tag}{i}".encode()).hexdigest()
        new = {**old, "token_hash": new_hash, "created_at": now, "used_at": None, "revoked_at": None}
        outcome, _ = await store.refresh_tokens.rotate(old["token_hash"], new, now)  # type: ignore[arg-type]
        return outcome, new_hash

    async def work(store: SQLiteStore) -> list[tuple[str, str]]:
        return list(await asyncio.gather(*(rotate(store, i) for i in range(TAKERS))))

    return _run(path, start_at, work)  # type: ignore[no-any-return]


def take_device(path: str, start_at: float, device_code_hash: str, now: int) -> list[str | None]:
    async def work(store: SQLiteStore) -> list[str | None]:
        taken = await asyncio.gather(*(store.device_codes.take(device_code_hash, now) for _ in range(TAKERS)))
        return [t["person_id"] if t is not None else None for t in taken]

    return _run(path, start_at, work)  # type: ignore[no-any-return]


def decide_device(path: str, start_at: float, user_code: str, tag: str, now: int) -> list[str | None]:
    """Decide one device request TAKERS times at once, each as another person; each result is the
    deciding person's id as the winner's record names it, None for the losers."""

    async def work(store: SQLiteStore) -> list[str | None]:
        decided = await asyncio.gather(
            *(store.device_codes.decide(user_code, f"usr_{tag}{i}", i % 2 == 0, now) for i in range(TAKERS))
        )
        return [d["person_id"] if d is not None else None for d in decided]

    return _run(path, start_at, work)  # type: ignore[no-any-return]


def request_bounded(path: str, start_at: float, tag: str, now: int, limit: int) -> list[str]:
    """TAKERS pending grants of agt_a and agt_b (one owner) at once under ``pending_per_owner`` =
    ``limit``: each result is "created" or the limit that refused it."""
    from grantd.store import LimitReached, PendingBound

    bound = PendingBound(limit, grant_lapse(now, 3600))

    async def one(store: SQLiteStore, i: int) -> str:
        record: Grant = {
            "id": f"{tag}{i}",
            "type": "command",
            "requester": "a@agents.example.com",
            "requester_id": "agt_a" if i % 2 else "agt_b",
            "request": {"command": ["ls"]},
            "grant_type": "once",
            "status": "pending",
            "created_at": now,
            "decided_by": None,
            "decided_at": None,
            "expires_at": None,
            "used_at": None,
            "decision_reason": None,
            "delegation_id": None,
            "revoked_by": None,
            "revoked_at": None,
            "reuse_key": None,
            "version": 1,
        }
        try:
            await store.grants.create(record, ["grant.created"], bound=bound)
        except LimitReached as exc:
            return exc.limit
        return "created"

    async def work(store: SQLiteStore) -> list[str]:
        return list(await asyncio.gather(*(one(store, i) for i in range(TAKERS))))

    return _run(path, start_at, work)  # type: ignore[no-any-return]


def enrol_bounded(path: str, start_at: float, tag: str, now: int, limit: int) -> list[str]:
    """TAKERS agents of olivia at once under ``agents_per_person`` = ``limit``."""
    from grantd.store import LimitReached

    async def one(store: SQLiteStore, i: int) -> str:
        name = f"{tag}{i}"
        record: Agent = {
            "agent_id": f"agt_{name}",
            "email": f"{name}@agents.example.com",
            "name": name,
            "public_key": f"ssh-ed25519 K{name}",
            "key_id": "SHA256:" + hashlib.sha256(name.encode()).hexdigest(),
            "key_generation": 1,
            "owner": "olivia@example.com",
            "approver": "olivia@example.com",
            "status": "active",
            "created_at": now,
            "updated_at": now,
            "owner_id": None,
            "approver_id": None,
        }
        try:
            await store.agents.create(record, frozenset(), max_per_owner=limit)
        except LimitReached as exc:
            return exc.limit
        return "created"

    async def work(store: SQLiteStore) -> list[str]:
        return list(await asyncio.gather(*(one(store, i) for i in range(TAKERS))))

    return _run(path, start_at, work)  # type: ignore[no-any-return]


def vote(path: str, start_at: float, who: list[str], now: int) -> list[tuple[str, str]]:
    """Approval-policy votes (D13) of ``who`` on grant g1, all at once; after each recorded vote,
    the voter finalises if two votes are in (the grants service's rule): (email, outcome) where
    outcome is the add_vote answer, or "won" for the one finalisation that changed the grant."""

    async def one(store: Any, email: str) -> tuple[str, str]:
        outcome = await store.grants.add_vote(
            {
                "grant_id": "g1",
                "email": email,
                "voter_id": email,
                "decision": "approve",
                "via": "api",
                "at": now,
                "reason": None,
                "grant_type": None,
                "duration": None,
                "management": False,
            }
        )
        if outcome != "recorded":
            return email, outcome
        votes = await store.grants.votes("g1")
        mine = next(i for i, v in enumerate(votes) if v["email"] == email)
        if mine + 1 < 2:
            return email, "recorded"
        won = await store.grants.update_if(
            "g1",
            expect=["pending"],
            changes={"status": "approved", "decided_by": email, "decided_at": now},
            event="grant.approved",
            lapse=grant_lapse(now, 3600),
            now=now,
        )
        return email, "won" if won is not None else "recorded"

    async def work(store: Any) -> list[tuple[str, str]]:
        return list(await asyncio.gather(*(one(store, email) for email in who)))

    return _run(path, start_at, work)  # type: ignore[no-any-return]


def escalate(path: str, start_at: float, now: int) -> list[bool]:
    """TAKERS concurrent raises of grant g1's escalation level from 0 to 1 (D13)."""

    async def work(store: Any) -> list[bool]:
        return list(await asyncio.gather(*(store.grants.escalate_if("g1", 0, 1, now) for _ in range(TAKERS))))

    return _run(path, start_at, work)  # type: ignore[no-any-return]


def claim(path: str, start_at: float, now: int) -> list[str]:
    """Claim outbox rows in small bites until none is left; the ids this process got."""

    async def work(store: SQLiteStore) -> list[str]:
        got: list[str] = []
        worker = f"w{id(store)}"

        async def one() -> None:
            while rows := await store.notify.claim(worker, now, 60_000, 3):
                got.extend(r["id"] for r in rows)

        await asyncio.gather(*(one() for _ in range(TAKERS)))
        return got

    return _run(path, start_at, work)  # type: ignore[no-any-return]

"""In-process services for the benches that time service calls without a server (bench/lean.py,
bench/levers.py, bench/notify_people.py, bench/pending_bound.py, bench/review_lists.py,
bench/review_sweep.py): the test suite's own
configuration (tests/conftest.py) on a fresh SQLite file.
grantd is imported when called, so a bench that chose which copy of the package to run
(``bench/lean.py --baseline``) gets that one."""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent.parent / "tests"


async def temp_services(directory: Path, management_token: str = "m" * 32, extra: str = "") -> Any:
    """grantd's services on ``directory``/g.db (``extra``: more TOML tables); the caller closes
    ``services.store``."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    from grantd.config import load
    from grantd.plugin_manager import build_plugin_manager
    from grantd.services.context import open_services

    from conftest import free_port, toml_config  # type: ignore[import-not-found]

    path = directory / "grantd.toml"
    path.write_text(
        toml_config(free_port(), storage=f'plugin = "sqlite"\npath = "{directory}/g.db"', extra=extra)
    )
    (directory / "management-token").write_text(management_token + "\n")
    config = load(path)
    return await open_services(config, build_plugin_manager(config))


@asynccontextmanager
async def pending_under_policies(pending: int, storage: str | None = None) -> AsyncIterator[Any]:
    """Services on a fresh SQLite file (``storage``: another [storage] table's keys) with
    bench/policies.py's 50 policies and 10 rules, and ``pending`` pending grants that three of them
    match: one policy set, so one pinned review, which escalates after 15 minutes and times out
    after 2 hours."""
    from policies import config_text  # bench/policies.py
    from policies_request import write_config

    from grantd.config import load
    from grantd.core.principals import agent
    from grantd.plugin_manager import build_plugin_manager
    from grantd.services import grants
    from grantd.services.context import open_services

    with tempfile.TemporaryDirectory() as tmp:
        config = load(write_config(Path(tmp), config_text(), storage))
        services = await open_services(config, build_plugin_manager(config))
        try:
            requester = agent("agt_bench", "agent+bench@example.com")
            body = {"target_host": "prod-db-3", "audience": "escapes", "run_as": "root", "grant_type": "once"}
            for i in range(pending):
                await grants.create(
                    services, requester, {**body, "command": ["systemctl", "restart", f"app{i}"]}
                )
            yield services
        finally:
            services.store.close()


async def enrolled_agent(services: Any, email: str, **fields: str) -> tuple[Any, Any]:
    """A new agent enrolled by the management token (a fresh Ed25519 key; ``fields``: owner,
    approver): its record, and the principal its identity token would give."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from grantd.core import principals
    from grantd.services import agents

    admin = principals.management(services.config.admin.management_identity)
    public = (
        Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    agent = await agents.enroll(
        services, admin, {"email": email, "name": "bench", "publicKey": public, **fields}
    )
    return agent, principals.agent(agent["agent_id"], agent["email"])


async def best_cpu_per_call(call: Callable[[int, int], Awaitable[Any]], calls: int, rounds: int) -> float:
    """CPU seconds (``time.process_time``, this process) per ``call(round, i)``: the best of
    ``rounds`` rounds of ``calls`` calls."""
    best = float("inf")
    for r in range(rounds):
        started = time.process_time()
        for i in range(calls):
            await call(r, i)
        best = min(best, (time.process_time() - started) / calls)
    return best


def report_storage(
    heading: str, argv: list[str], counts: list[int], measure: Callable[[int, str | None], Awaitable[float]]
) -> int:
    """``report`` of ``measure(count, storage)`` for the counts in ``argv`` (default ``counts``): on
    SQLite (``storage`` None), or with ``--postgres`` in ``argv`` on a private PostgreSQL
    (tests/support/postgres.py), a database per count. There the figure is this process's CPU
    (the store's event loop runs in a thread of it), not PostgreSQL's."""
    postgres = "--postgres" in argv
    counts = [int(a) for a in argv if a != "--postgres"] or counts
    if not postgres:
        return report(heading, counts, lambda count: measure(count, None))
    from server import postgres_module  # bench/server.py: the tests' private PostgreSQL

    pg = postgres_module()
    why = pg.available()
    if why is not None:
        raise SystemExit(f"--postgres: {why}")
    server = pg.Postgres().start()
    try:
        storage = lambda: f'plugin = "postgres"\ndsn = "{server.create_database()}"'  # noqa: E731
        return report(heading + ", PostgreSQL", counts, lambda count: measure(count, storage()))
    finally:
        server.stop()


def report(heading: str, counts: list[int], measure: Callable[[int], Awaitable[float]]) -> int:
    """One line per count: the count, and ``measure(count)`` (seconds) in milliseconds."""
    label = heading.split("   ")[0]  # the count column is as wide as its name
    print(heading)
    for count in counts:
        print(f"{count:>{len(label)},}   {asyncio.run(measure(count)) * 1000:.2f}")
    return 0

"""CPU of a person's grant list while many pending grants are pinned to approval policies (issue
27, item 5): the lists look through the pending reviews (at most 1,000) for those that name the
person through a group (D13), so their cost grows with the pending grants; it must stay small.
In this process, on SQLite:

    .venv/bin/python bench/review_lists.py            # 100 and 500 pending pinned grants
    .venv/bin/python bench/review_lists.py 1000
    .venv/bin/python bench/review_lists.py --postgres 100 1000   # a private PostgreSQL instead

Per count: a fresh database with bench/policies.py's 50 policies and 10 rules, that many pending
grants that three policies match (one policy set: the same pinned review), and a person no group
names; then the grants service's list for that person (GET /api/grants), N times per round, best
of 3 rounds, CPU per call by `time.process_time()`.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from in_process import best_cpu_per_call, pending_under_policies, report_storage  # noqa: E402

N = 30
ROUNDS = 3


async def measure(pending: int, storage: str | None = None) -> float:
    from grantd.core.principals import for_person
    from grantd.services import grant_lists
    from grantd.services import people as people_service

    async with pending_under_policies(pending, storage) as services:
        person = for_person(
            await people_service.create_person(services, "bob@example.com"), services.admin_emails
        )

        async def listing(r: int, i: int) -> None:
            await grant_lists.list_grants(services, person, {})

        return await best_cpu_per_call(listing, N, ROUNDS)


def main(argv: list[str]) -> int:
    return report_storage("pending pinned grants   CPU per list of a person (ms)", argv, [100, 500], measure)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

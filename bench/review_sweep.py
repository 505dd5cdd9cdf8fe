"""CPU of one approval-policy sweep while many pending grants wait under policies with a timeout and
an escalation that are not due yet (issue 27, item 5): every server process sweeps every
`[grants] expiry_sweep_interval` (5 s), so what a sweep costs with nothing to do must not grow
with the grants that wait. In this process, on SQLite:

    .venv/bin/python bench/review_sweep.py            # 100, 500 and 1000 pending pinned grants
    .venv/bin/python bench/review_sweep.py 2000
    .venv/bin/python bench/review_sweep.py --postgres 100 1000   # a private PostgreSQL instead

On PostgreSQL the figure is this process's CPU (the store's own event loop runs in a thread of
it); PostgreSQL's own work for the sweep's statements is not in it.

Per count: a fresh database with bench/policies.py's 50 policies and 10 rules (the matched ones
escalate after 15 minutes and time out after 2 hours), that many pending grants that three
policies match; then `grant_sweeps.sweep_reviews` right after they were made, N times per round,
best of 3 rounds, CPU per sweep by `time.process_time()`.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from in_process import best_cpu_per_call, pending_under_policies, report_storage  # noqa: E402

N = 20
ROUNDS = 3


async def measure(pending: int, storage: str | None = None) -> float:
    from grantd.services import grant_sweeps

    async with pending_under_policies(pending, storage) as services:

        async def sweep(r: int, i: int) -> None:
            if await grant_sweeps.sweep_reviews(services):
                raise AssertionError("the bench's grants are not due: the sweep must change nothing")

        return await best_cpu_per_call(sweep, N, ROUNDS)


def main(argv: list[str]) -> int:
    return report_storage(
        "pending pinned grants   CPU per sweep with nothing due (ms)", argv, [100, 500, 1000], measure
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

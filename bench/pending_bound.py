"""CPU of one grant request as the requesting agent's pending grants grow (issue 27, item 5): the
bound on one agent's pending grants (`[limits] pending_per_agent`, default 100) must cost the same
whether the agent has no pending grant or 99. In this process, on SQLite:

    .venv/bin/python bench/pending_bound.py              # 0, 50 and 95 pending grants
    .venv/bin/python bench/pending_bound.py 0 99

Per count: a fresh database (bench/in_process.py), one agent with that many pending grants (the
default bounds: 100 per agent, 200 per owner; no rate); then, N times per round, what
`POST /api/grants` asks of the services (the agent's rate and bound, `grantd.services.limits`,
then `grantd.services.grants.create`), each new grant denied again untimed so the count stays;
best of 3 rounds, CPU per request by `time.process_time()`.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from in_process import enrolled_agent, report, temp_services  # bench/, beside this file

N = 200
ROUNDS = 3
NO_RATE = "[limits]\ngrants_per_agent = 0\n"


def body(*tag: object) -> dict[str, object]:
    command = ["true", *map(str, tag)]
    return {"target_host": "web-1", "audience": "escapes", "command": command, "grant_type": "once"}


async def measure(pending: int) -> float:
    from grantd.core import principals
    from grantd.services import grants

    with tempfile.TemporaryDirectory() as tmp:
        services = await temp_services(Path(tmp), extra=NO_RATE)
        try:
            admin = principals.management(services.config.admin.management_identity)
            _, requester = await enrolled_agent(services, "bench@example.com")
            for i in range(pending):
                await grants.create(services, requester, body("pending", i))
            best = float("inf")
            for r in range(ROUNDS):
                spent = 0.0
                for i in range(N):
                    started = time.process_time()
                    await services.limits.grant_request(requester)
                    answer, _ = await grants.create(services, requester, body(r, i))
                    spent += time.process_time() - started
                    await grants.deny(services, admin, answer["id"], {})
                best = min(best, spent / N)
            return best
        finally:
            services.store.close()


def main(argv: list[str]) -> int:
    counts = [int(a) for a in argv] or [0, 50, 95]
    return report("pending grants of the agent   CPU per grant request (ms)", counts, measure)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

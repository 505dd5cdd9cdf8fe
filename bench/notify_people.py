"""CPU of one grant request with a notification channel configured, as the number of people
stored grows (issue 27, item 5): who is told a grant waits includes every administrator
(`@admins`, which the default policy names), so finding them must not read everyone stored.
In this process, on SQLite:

    .venv/bin/python bench/notify_people.py                 # 2, 2,000 and 10,000 people
    .venv/bin/python bench/notify_people.py 2 50000

Per count (at least 2): a fresh database (bench/in_process.py) with that many people (the owner
and one administrator among them), one mail channel (its server is never reached: delivery runs
in a server's worker, not here), an agent whose owner is a person; then the grants service's
`create` N times per round, best of 3 rounds, CPU per call by `time.process_time()`.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from in_process import enrolled_agent, temp_services  # bench/, beside this file

N = 300
ROUNDS = 3
EXTRA = """
[limits]
pending_per_owner = 0
pending_per_agent = 0

[[notify.channels]]
id = "mail"
type = "smtp"
host = "127.0.0.1"
port = 9
starttls = false
from = "grantd@example.com"
"""


async def measure(people: int) -> float:
    from grantd.services import grants
    from grantd.services import people as people_service

    with tempfile.TemporaryDirectory() as tmp:
        services = await temp_services(Path(tmp), extra=EXTRA)
        try:
            await people_service.create_person(services, "owner@example.com")
            for i in range(people - 1):
                await people_service.create_person(services, f"p{i}@example.com", admin=i == 0)
            _, requester = await enrolled_agent(services, "bench@example.com", owner="owner@example.com")
            best = float("inf")
            for r in range(ROUNDS):
                started = time.process_time()
                for i in range(N):
                    body = {
                        "target_host": "web-1",
                        "audience": "escapes",
                        "command": ["true", str(r), str(i)],
                    }
                    await grants.create(services, requester, {**body, "grant_type": "once"})
                best = min(best, (time.process_time() - started) / N)
            return best
        finally:
            services.store.close()


def main(argv: list[str]) -> int:
    counts = [int(a) for a in argv] or [2, 2_000, 10_000]
    print("people stored   CPU per grant request (ms)")
    for count in counts:
        print(f"{count:>13,}   {asyncio.run(measure(max(2, count))) * 1000:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

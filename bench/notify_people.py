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

import sys
import tempfile
from pathlib import Path

from in_process import best_cpu_per_call, enrolled_agent, report, temp_services  # bench/, beside this file

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

            async def request(r: int, i: int) -> None:
                command = ["true", str(r), str(i)]
                body = {
                    "target_host": "web-1",
                    "audience": "escapes",
                    "command": command,
                    "grant_type": "once",
                }
                await grants.create(services, requester, body)

            return await best_cpu_per_call(request, N, ROUNDS)
        finally:
            services.store.close()


def main(argv: list[str]) -> int:
    counts = [max(2, int(a)) for a in argv] or [2, 2_000, 10_000]
    return report("people stored   CPU per grant request (ms)", counts, measure)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

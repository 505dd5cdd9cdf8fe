"""CPU a grant request pays for the approval policies (issue 22: at most 0.1 ms with 50 policies):
the grants service's `create` (validation, evaluation, the SQLite insert with its events, the
answer) called in this process, with no policies configured and with 50 policies and 10 rules
(bench/policies.py's configuration), best of 5 rounds of N requests; CPU per request by
`time.process_time()` (this process only: no HTTP, no other process).

    .venv/bin/python bench/policies_request.py

Cases: no policies (today's path: nothing is evaluated); 50 policies and a request that matches
none of them (the default policy, evaluated); 50 policies and a request that three policies match
(pinned review stored with the grant).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from policies import config_text  # noqa: E402  (bench/policies.py: the same 50 policies and 10 rules)

from grantd.config import load  # noqa: E402
from grantd.core.principals import agent as agent_principal  # noqa: E402
from grantd.plugin_manager import build_plugin_manager  # noqa: E402
from grantd.services import grants  # noqa: E402
from grantd.services.context import open_services  # noqa: E402

N, ROUNDS = 400, 5
BUDGET_MS = 0.1


def write_config(directory: Path, policies: str, storage: str | None = None) -> Path:
    """``storage``: the [storage] table's keys (default: SQLite in ``directory``)."""
    token = directory / "token"
    token.write_text("t" * 32 + "\n")
    token.chmod(0o600)
    path = directory / "grantd.toml"
    storage = storage or f'plugin = "sqlite"\npath = "{directory / "grantd.db"}"'
    path.write_text(f"""version = 1
[server]
issuer = "http://127.0.0.1:1"
[admin]
management_token = "file:{token}"
[storage]
{storage}
[limits]
pending_per_owner = 0
{policies}
""")
    return path


async def measure(path: Path, body: dict[str, Any]) -> float:
    config = load(path)
    services = await open_services(config, build_plugin_manager(config))
    principal = agent_principal("agt_bench", "agent+bench@example.com")
    try:
        best = float("inf")
        for _ in range(ROUNDS):
            started = time.process_time()
            for _ in range(N):
                await grants.create(services, principal, body)
            best = min(best, (time.process_time() - started) / N)
        return best * 1000
    finally:
        services.store.close()


def main() -> None:
    policies = config_text()
    nothing = {"target_host": "web-7", "audience": "escapes", "command": ["uptime"], "grant_type": "once"}
    matched = {
        **nothing,
        "target_host": "prod-db-3",
        "run_as": "root",
        "command": ["systemctl", "restart", "nginx"],
    }
    results = {}
    import tomllib

    from grantd.core.review import RequestFacts, evaluate, parse_review_config

    check = parse_review_config(tomllib.loads(policies)).config
    assert check is not None
    facts = RequestFacts(
        "prod-db-3",
        "escapes",
        "agent+bench@example.com",
        "agt_bench",
        "once",
        ("systemctl", "restart", "nginx"),
        "root",
    )
    assert len(evaluate(check, facts).policies_matched) == 3  # the matched case really matches
    with tempfile.TemporaryDirectory() as tmp:
        for name, text, body in (
            ("no policies", "", nothing),
            ("50 policies, none matches", policies, nothing),
            ("50 policies, a matched set", policies, matched),
        ):
            directory = Path(tmp) / name.replace(" ", "_").replace(",", "")
            directory.mkdir()
            results[name] = asyncio.run(measure(write_config(directory, text), body))
    base = results["no policies"]
    for name, ms in results.items():
        added = ms - base
        print(
            f"{name:30} {ms * 1000:8.1f} µs CPU per request"
            + (f"  (+{added * 1000:.1f} µs)" if ms is not base else "")
        )
    worst = max(results.values()) - base
    print(
        f"added: {worst * 1000:.1f} µs (budget {BUDGET_MS * 1000:.0f} µs): {'ok' if worst <= BUDGET_MS else 'OVER'}"
    )


if __name__ == "__main__":
    main()

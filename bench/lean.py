"""Issue 27 item 2, in-process: CPU per call of the authentication chain (an agent's remembered
identity token as a bearer, as every authenticated request of the bench presents it, the agent read
included: D11) and of an approval by the management token (the default policy: read, tally, one
write transaction with the vote, the decision and their events, the AuthZ-JWT signed), with the
code of this tree or of an earlier copy of the package (``--baseline DIR``: DIR/grantd). The
server-level effect is ``bench/run.py --baseline DIR --ops ...``; this shows what those routes' own
Python costs, without Sanic, the load generator or the other processes of a shared machine.

    .venv/bin/python bench/lean.py                       # this tree
    .venv/bin/python bench/lean.py --baseline /tmp/before/pkg
    .venv/bin/python bench/lean.py --interleave /tmp/before/pkg --rounds 3   # both, alternately

Each figure is the best of ``--repeats`` batches of CPU time (``time.process_time``) per call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


async def measure(chain_calls: int, approvals: int, repeats: int) -> dict[str, float]:
    from in_process import enrolled_agent, temp_services  # bench/, beside this file

    from grantd.core import principals
    from grantd.services import grants
    from grantd.services.authn import Credentials

    with tempfile.TemporaryDirectory() as tmp:
        # the grants are made by the service directly, many at once: no bound on one agent's pending grants
        services = await temp_services(Path(tmp), "m" * 32, extra="[limits]\npending_per_agent = 0\n")
        admin = principals.management(services.config.admin.management_identity)
        agent, requester = await enrolled_agent(services, "bench-lean@example.com")
        token, _ = await services.tokens.mint_identity(agent)
        found: dict[str, float] = {}

        async def chain() -> None:
            credentials = Credentials(bearer=token, client="127.0.0.1", scheme="bearer")
            await services.authn.principal(services, credentials)

        await chain()  # verified once: remembered from then on, as in the bench
        best = 1e9
        for _ in range(repeats):
            start = time.process_time()
            for _ in range(chain_calls):
                await chain()
            best = min(best, (time.process_time() - start) / chain_calls)
        found["authn chain (µs)"] = best * 1e6

        body = {"target_host": "web-1", "audience": "escapes", "command": ["true"], "grant_type": "once"}
        best = 1e9
        for _ in range(repeats):
            ids = [(await grants.create(services, requester, dict(body)))[0]["id"] for _ in range(approvals)]
            start = time.process_time()
            for grant_id in ids:
                await grants.approve(services, admin, grant_id, {})
            best = min(best, (time.process_time() - start) / approvals)
        found["approve (µs)"] = best * 1e6
        services.store.close()
        return found


def run_one(baseline: str | None, args: argparse.Namespace) -> dict[str, float]:
    command = [sys.executable, __file__, "--json", "--chain-calls", str(args.chain_calls)]
    command += ["--approvals", str(args.approvals), "--repeats", str(args.repeats)]
    if baseline:
        command += ["--baseline", baseline]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", help="a directory holding an earlier copy of the package as grantd/")
    parser.add_argument("--interleave", metavar="DIR", help="run DIR's copy and this tree alternately")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chain-calls", type=int, default=5000)
    parser.add_argument("--approvals", type=int, default=150)  # an owner may have 200 pending
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.interleave:
        rows: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
        for number in range(args.rounds):
            for label, base in (("before", args.interleave), ("after", None)):
                for name, value in run_one(base, args).items():
                    rows[label].setdefault(name, []).append(value)
            print(f"round {number + 1}: load average {os.getloadavg()[0]:.2f}", flush=True)
        for name in rows["after"]:
            before, after = sorted(rows["before"][name]), sorted(rows["after"][name])
            b, a = before[len(before) // 2], after[len(after) // 2]
            print(
                f"{name:<18} before {b:7.1f} {[round(v, 1) for v in rows['before'][name]]}"
                f"  after {a:7.1f} {[round(v, 1) for v in rows['after'][name]]}  {100 * (a - b) / b:+.0f} %"
            )
        return
    if args.baseline:
        sys.path.insert(0, str(Path(args.baseline).resolve()))
    found = asyncio.run(measure(args.chain_calls, args.approvals, args.repeats))
    print(json.dumps(found) if args.json else "\n".join(f"{k}: {v:.1f}" for k, v in found.items()))


if __name__ == "__main__":
    main()

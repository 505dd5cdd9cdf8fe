"""CPU cost of the approval-policy evaluation a grant request would add (issue 22: at most 0.1 ms
with 50 policies configured): `grantd.core.review.evaluate` against 50 policies and 10 rules,
best of 5 repeats of thousands of calls, per call, in this process (no I/O is involved).

    .venv/bin/python bench/policies.py

Cases: a request no rule or policy matches (the default policy), one that three policies match
(their blocks combine and the policy hash is computed, once per
matched set: `ReviewConfig.pinned` remembers it), one a deny rule decides, one an approve
rule decides; and for scale, parsing the whole configuration and tallying a vote on a three-block
review.
"""

from __future__ import annotations

import time
import timeit
import tomllib

from grantd.core.review import (
    Ballot,
    GrantFacts,
    People,
    RequestFacts,
    Voter,
    cast_vote,
    evaluate,
    parse_review_config,
)
from grantd.core.review.evaluate import pin

POLICIES, RULES = 50, 10
BUDGET_MS = 0.1


def config_text() -> str:
    parts = [
        '[[groups]]\nid = "sre"\nmembers = [' + ", ".join(f'"sre{i}@example.com"' for i in range(20)) + "]\n",
        '[[groups]]\nid = "security"\nmembers = ["sec1@example.com", "sec2@example.com"]\n',
    ]
    for i in range(RULES):
        effect = "deny" if i % 2 else "approve"
        parts.append(
            f'[[rules]]\nid = "rule-{i}"\neffect = "{effect}"\nreason = "rule {i}"\n'
            f'match.target_host = ["rule{i}-*", "r{i}-db-?"]\n'
            f'match.argv = [["tool{i}", "status|show", "**"], ["re:cmd{i}-[a-z]+", "*"]]\n'
        )
    for i in range(POLICIES):
        # a realistic mix: host globs, run_as, agents, argv patterns with alternatives, "**" and re:
        hosts = '["prod-*", "db-?"]' if i % 17 == 0 else f'["site{i}-*", "edge{i}-??"]'
        parts.append(
            f'[[policies]]\nid = "policy-{i}"\ndescription = "policy number {i}"\n'
            f'match.target_host = {hosts}\nmatch.run_as = ["root", "postgres"]\n'
            f'match.agents = ["agent+*@example.com"]\nmatch.grant_types = ["once", "timed", "always"]\n'
            f'match.argv = [["systemctl", "restart|reload|stop", "*"], ["journalctl", "**"], '
            f'["re:/usr/(s)?bin/[a-z]+", "**"], ["app{i}", "--mode", "a|b|c"]]\n'
            f'forbid = ["owner"]\nmax_duration = "4h"\npending_ttl = "2h"\n'
            f'[[policies.require]]\nid = "sre"\ngroups = ["sre"]\napprove = 2\n'
            f'[[policies.require]]\nid = "security"\ngroups = ["security", "@admins"]\napprove = 1\n'
            f'[[policies.escalate]]\nafter = "15m"\nnotify = ["@owner", "sre"]\n'
        )
    return "".join(parts)


def per_call_us(fn, number: int = 2000) -> float:
    """Best of 5 repeats, CPU time (process_time), microseconds per call."""
    return min(timeit.repeat(fn, timer=time.process_time, number=number, repeat=5)) / number * 1e6


def main() -> None:
    text = config_text()
    raw = tomllib.loads(text)
    parsed = parse_review_config(raw)
    assert not parsed.problems, parsed.problems
    config = parsed.config
    assert config is not None and len(config.policies) == POLICIES and len(config.rules) == RULES

    def req(host: str, argv: tuple[str, ...]) -> RequestFacts:
        return RequestFacts(host, "escapes", "agent+ci@example.com", "agt_1", "once", argv, "root")

    cases = {
        "no match (default policy)": req("dev-1", ("systemctl", "restart", "nginx")),
        "3 policies match": req("prod-1", ("systemctl", "restart", "nginx")),
        "a deny rule decides": req("rule1-a", ("tool1", "status", "x")),
        "an approve rule decides": req("rule0-a", ("tool0", "show")),
        "long argv, no match": req("site3-x", ("app3", "--mode", "d", *["arg"] * 60)),
    }
    print(
        f"approval policies: {POLICIES} policies, {RULES} rules; CPU per evaluation (best of 5), aim <= {BUDGET_MS} ms"
    )
    worst = 0.0
    for name, request in cases.items():
        result = evaluate(config, request)
        us = per_call_us(lambda request=request: evaluate(config, request))
        worst = max(worst, us)
        print(
            f"  {name:36} {us:7.1f} us  ({result.outcome}, {len(result.policies_matched)} policies matched)"
        )
    # the pathological case: every policy matches (100 blocks combined; hashed once, then remembered)
    everything = parse_review_config(
        tomllib.loads(
            text.replace('match.target_host = ["site', 'match.target_host = ["*", "site').replace(
                'match.target_host = ["prod-*"', 'match.target_host = ["*"'
            )
        )
    )
    assert everything.config is not None
    request = req("any-host", ("systemctl", "restart", "nginx"))
    result = evaluate(everything.config, request)
    us = per_call_us(lambda: evaluate(everything.config, request))
    print(
        f"  {'all 50 policies match (not realistic)':36} {us:7.1f} us  ({result.outcome}, "
        f"{len(result.policies_matched)} policies matched)"
    )
    print(
        f"  worst realistic case: {worst / 1000:.4f} ms per grant request -> {'within' if worst / 1000 <= BUDGET_MS else 'OVER'} "
        f"the {BUDGET_MS} ms budget"
    )

    matched = tuple(
        p for p in config.policies if p.id in evaluate(config, cases["3 policies match"]).policies_matched
    )
    pin_us = per_call_us(lambda: pin(matched))
    print(
        f"  once per configuration and matched set: combining and hashing 3 policies (pin): {pin_us:.1f} us"
    )
    parse_us = per_call_us(lambda: parse_review_config(raw), number=20)
    print(f"  parsing and compiling the whole configuration (at start and reload): {parse_us / 1000:.2f} ms")
    review = evaluate(config, cases["3 policies match"]).review
    people = People(config.members, frozenset({"admin@example.com"}))
    grant = GrantFacts("agt_1", "agent+ci@example.com", "owner@example.com", None, 0, "once")
    votes = [Ballot(Voter(f"p{i}", f"sre{i}@example.com"), "approve", "api", 1) for i in range(2)]
    new = Ballot(Voter("p9", "sec1@example.com"), "approve", "api", 2)
    vote_us = per_call_us(lambda: cast_vote(review, grant, people, votes, new, 2))
    print(
        f"  a vote on a {len(review.requirements)}-block review with 2 earlier votes (cast_vote): {vote_us:.1f} us"
    )


if __name__ == "__main__":
    main()

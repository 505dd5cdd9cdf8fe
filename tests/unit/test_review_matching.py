"""Matching and evaluation of approval policies (D13): argv-wise patterns, per-key globs, and the
order deny rules -> approve rules -> policies -> the default policy."""

from __future__ import annotations

import tomllib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grantd.core.review import (
    AUTO_APPROVE,
    AUTO_DENY,
    DEFAULT_POLICY_HASH,
    DEFAULT_REVIEW,
    NEEDS_REVIEW,
    ArgvPattern,
    Match,
    RequestFacts,
    ReviewConfig,
    evaluate,
    parse_review_config,
    review_from_dict,
)


def config(text: str) -> ReviewConfig:
    parsed = parse_review_config(tomllib.loads(text))
    assert parsed.problems == (), parsed.problems
    return parsed.config


def request(argv: tuple[str, ...] | None = ("ls",), **facts) -> RequestFacts:
    base = {
        "target_host": "prod-1",
        "audience": "escapes",
        "agent_email": "agent+ci@example.com",
        "agent_id": "agt_1",
        "grant_type": "once",
    }
    return RequestFacts(argv=argv, **{**base, **facts})


ARGV_CASES = [
    # pattern, argv, matches?
    (["systemctl", "restart", "*"], ["systemctl", "restart", "nginx"], True),
    (
        ["systemctl", "restart", "*"],
        ["systemctl", "restart", "nginx; reboot"],
        True,
    ),  # one argument, as exec'd
    (["systemctl", "restart", "*"], ["systemctl", "restart", "nginx", "reboot"], False),  # an extra argument
    (["systemctl", "restart", "*"], ["systemctl", "restart"], False),  # a missing one
    (["systemctl", "restart", "*"], ["systemctl restart nginx"], False),  # a joined string is never matched
    (["systemctl", "restart|reload", "*"], ["systemctl", "reload", "nginx"], True),
    (["systemctl", "restart|reload", "*"], ["systemctl", "stop", "nginx"], False),
    (
        ["systemctl", "restart|reload", "*"],
        ["systemctl", "restart|reload", "nginx"],
        False,
    ),  # | is an alternative
    (["journalctl", "**"], ["journalctl"], True),  # "**" also matches no further argument
    (["journalctl", "**"], ["journalctl", "-u", "nginx", "--since", "1h"], True),
    (["journalctl", "**"], ["journalctl2"], False),
    (["journalctl", "**"], ["/usr/bin/journalctl"], False),  # the program as written, no path lookup
    (["/usr/bin/journalctl|journalctl", "**"], ["/usr/bin/journalctl", "-f"], True),
    (["cat", "/var/log/*"], ["cat", "/var/log/syslog"], True),
    (
        ["cat", "/var/log/*"],
        ["cat", "/var/log/../../etc/shadow"],
        True,
    ),  # a glob's * crosses "/": use re: to pin it
    (["cat", "re:/var/log/[a-z]+"], ["cat", "/var/log/../../etc/shadow"], False),
    (["cat", "re:/var/log/[a-z]+"], ["cat", "/var/log/syslog"], True),
    (["cat", "re:/var/log/[a-z]+"], ["cat", "/var/log/syslogX/"], False),  # fullmatch, not search
    (["re:ls|cat", "**"], ["cat"], True),
    (["re:ls|cat", "**"], ["lsblk"], False),  # fullmatch covers both alternatives
    (["Ls"], ["ls"], False),  # arguments compare case-sensitively
    (["ls", "-[la]"], ["ls", "-l"], True),
    (["ls", "-?"], ["ls", "--"], True),
    (["ls", "-?"], ["ls", "-la"], False),
    (["*"], ["anything"], True),
    (["*"], ["anything", "more"], False),
    (["echo", "*"], ["echo", ""], True),  # * matches an empty argument
]


@pytest.mark.parametrize(("pattern", "argv", "expected"), ARGV_CASES)
def test_argv_patterns_match_argument_by_argument(pattern, argv, expected):
    assert ArgvPattern.build(pattern).matches(tuple(argv)) is expected


KEY_CASES = [
    # match table, request facts, matches?
    ({"target_host": ("prod-*",)}, {"target_host": "prod-1"}, True),
    ({"target_host": ("prod-*",)}, {"target_host": "PROD-1"}, True),  # host names compare case-insensitively
    ({"target_host": ("prod-*",)}, {"target_host": "staging-1"}, False),
    ({"target_host": ("prod-*",)}, {"target_host": "xprod-1"}, False),  # anchored
    ({"target_host": ("db-?", "prod-*")}, {"target_host": "db-1"}, True),
    ({"target_host": ("db-?",)}, {"target_host": "db-12"}, False),
    ({"run_as": ("root",)}, {}, True),  # no run_as: root, as grantd elevate runs it
    ({"run_as": ("root",)}, {"run_as": "postgres"}, False),
    ({"run_as": ("root",)}, {"run_as": "ROOT"}, False),  # user names are case-sensitive
    ({"audience": ("escapes",)}, {"audience": "escapes"}, True),
    ({"audience": ("escapes",)}, {"audience": "other"}, False),
    ({"agents": ("agent+ci@*",)}, {}, True),
    ({"agents": ("AGENT+CI@example.com",)}, {}, True),  # e-mails compare case-insensitively
    ({"agents": ("agt_1",)}, {}, True),  # or by agent id
    ({"agents": ("agent+other@*",)}, {}, False),
    ({"grant_types": ("once", "timed")}, {"grant_type": "timed"}, True),
    ({"grant_types": ("once", "timed")}, {"grant_type": "always"}, False),
    ({"target_host": ("prod-*",), "run_as": ("root",)}, {"run_as": "www"}, False),  # every key must hold
]


@pytest.mark.parametrize(("keys", "facts", "expected"), KEY_CASES)
def test_match_keys(keys, facts, expected):
    keys = {
        k: tuple(v.lower() for v in vals) if k in ("target_host", "agents") else vals
        for k, vals in keys.items()
    }
    assert Match.build(**keys).matches(request(**facts)) is expected


def test_an_argv_policy_never_matches_a_permissions_grant_and_an_empty_match_matches_all():
    with_argv = Match.build(argv=(ArgvPattern.build(["*", "**"]),))
    assert not with_argv.matches(request(argv=None))
    assert Match.build().matches(request(argv=None)) and Match.build().is_empty


RULES_AND_POLICIES = """
[[groups]]
id = "sre"
members = ["alice@example.com", "bob@example.com"]

[[rules]]
id = "staging-journal"
effect = "approve"
reason = "read-only journalctl on staging is pre-approved (CHG-1234)"
match.target_host = ["staging-*"]
match.argv = [["journalctl", "**"]]
max_grant_type = "once"

[[rules]]
id = "any-journal"
effect = "approve"
reason = "journalctl anywhere"
match.argv = [["journalctl", "**"]]
match.target_host = ["prod-*", "staging-*"]

[[rules]]
id = "no-rm"
effect = "deny"
reason = "rm is never approved"
match.argv = [["rm", "**"], ["journalctl", "--vacuum-size", "*"]]

[[rules]]
id = "no-prod-7"
effect = "deny"
reason = "prod-7 is being decommissioned"
match.target_host = ["prod-7"]

[[policies]]
id = "prod-root"
match.target_host = ["prod-*"]
match.run_as = ["root"]
[[policies.require]]
id = "sre"
groups = ["sre"]
approve = 2

[[policies]]
id = "all-prod"
match.target_host = ["prod-*"]
forbid = ["owner"]
[[policies.require]]
id = "owner-ack"
groups = ["@approver"]
approve = 1
"""


def test_evaluation_order_and_answers():
    cfg = config(RULES_AND_POLICIES)
    ev = evaluate(cfg, request(("journalctl", "-u", "nginx"), target_host="staging-1"))
    assert (ev.outcome, ev.rules_matched, ev.reason) == (
        AUTO_APPROVE,
        ("staging-journal",),
        "read-only journalctl on staging is pre-approved (CHG-1234)",
    )
    assert ev.decided_by == "policy:staging-journal"
    # above the rule's max_grant_type: not pre-approved by it; the next approve rule in file order decides
    ev = evaluate(cfg, request(("journalctl",), target_host="staging-1", grant_type="always"))
    assert (ev.outcome, ev.rules_matched) == (AUTO_APPROVE, ("any-journal",))
    # a deny rule beats an approve rule, whatever the order in the file; every deny rule that matched is named
    ev = evaluate(cfg, request(("journalctl", "--vacuum-size", "1M"), target_host="prod-7"))
    assert (ev.outcome, ev.rules_matched, ev.reason, ev.decided_by) == (
        AUTO_DENY,
        ("no-rm", "no-prod-7"),
        "rm is never approved",
        "policy:no-rm",
    )
    # policies: every matching one contributes its blocks; ids are <policy>/<require>
    ev = evaluate(cfg, request(("systemctl", "restart", "nginx")))
    assert ev.outcome == NEEDS_REVIEW and ev.rules_matched == () and ev.reason is None
    assert ev.policies_matched == ("prod-root", "all-prod")
    assert [r.id for r in ev.requirements] == ["prod-root/sre", "all-prod/owner-ack"]
    assert ev.review.forbid == frozenset({"owner"})
    ev = evaluate(cfg, request(("ls",), run_as="www"))
    assert ev.policies_matched == ("all-prod",)
    # a dry run of an auto-decision still shows what the policies would have asked
    assert evaluate(cfg, request(("rm", "-rf", "/"))).policies_matched == ("prod-root", "all-prod")
    # nothing matches: the default policy, today's behaviour
    ev = evaluate(cfg, request(("ls",), target_host="dev-1"))
    assert (
        ev.outcome == NEEDS_REVIEW and ev.review == DEFAULT_REVIEW and ev.policy_hash == DEFAULT_POLICY_HASH
    )


def test_combined_settings_are_the_most_restrictive():
    cfg = config("""
[[policies]]
id = "a"
match.target_host = ["prod-*"]
allow_self_approval = true
allow_management_token = true
allow_delegation = true
max_duration = "4h"
pending_ttl = "2h"
[[policies.require]]
id = "r"
groups = ["@admins"]
approve = 1
[[policies.escalate]]
after = "30m"
notify = ["@owner"]
[[policies]]
id = "b"
match.target_host = ["prod-1"]
allow_self_approval = true
allow_management_token = false
require_reason = true
max_duration = "1h"
pending_ttl = "3h"
on_timeout = "deny"
forbid = ["approver"]
[[policies.require]]
id = "r"
groups = ["@owner"]
approve = 1
[[policies.escalate]]
after = "10m"
notify = ["@admins"]
""")
    review = evaluate(cfg, request()).review
    assert review.allow_self_approval and not review.allow_management_token and not review.allow_delegation
    assert review.require_reason and review.max_duration == 3600 and review.pending_ttl == 7200
    assert review.on_timeout == "deny" and review.forbid == frozenset({"approver"})
    assert [(e.level, e.after, e.policy) for e in review.escalations] == [(1, 600, "b"), (2, 1800, "a")]
    assert review_from_dict(review.as_dict()) == review  # what the store keeps reads back the same


def test_no_config_is_the_default_policy_for_every_request():
    ev = evaluate(ReviewConfig(), request())
    assert ev.outcome == NEEDS_REVIEW and ev.review is DEFAULT_REVIEW
    assert DEFAULT_REVIEW.requirements[0].groups == ("@owner", "@approver", "@admins")
    assert DEFAULT_REVIEW.requirements[0].approve == 1
    assert (
        DEFAULT_REVIEW.allow_management_token
        and DEFAULT_REVIEW.allow_delegation
        and DEFAULT_REVIEW.allow_self_approval
    )
    assert DEFAULT_REVIEW.forbid == frozenset() and DEFAULT_REVIEW.pending_ttl is None


# -- properties -----------------------------------------------------------------------------------

WORDS = st.sampled_from(
    ["ls", "rm", "journalctl", "systemctl", "restart", "-u", "nginx", "/etc/shadow", "*", "a|b"]
)
ARGVS = st.lists(WORDS, min_size=1, max_size=5).map(tuple)
HOSTS = st.sampled_from(["prod-1", "PROD-2", "staging-1", "db-1", "dev"])
GLOBS = st.sampled_from(["prod-*", "staging-*", "*", "db-?", "dev"])
REQUESTS = st.builds(
    lambda argv, host, gt, run_as: request(argv, target_host=host, grant_type=gt, run_as=run_as),
    ARGVS,
    HOSTS,
    st.sampled_from(["once", "timed", "always"]),
    st.sampled_from(["root", "www"]),
)


def _rule(i: int, effect: str, host: str, argv0: str) -> str:
    return (
        f'[[rules]]\nid = "r{i}"\neffect = "{effect}"\nreason = "because {i}"\n'
        f'match.target_host = ["{host}"]\nmatch.argv = [["{argv0}", "**"]]\n'
    )


RULE_SETS = st.lists(
    st.tuples(st.sampled_from(["approve", "deny"]), GLOBS, WORDS.filter(lambda w: w not in ("*", "a|b"))),
    max_size=6,
)


@given(RULE_SETS, REQUESTS)
def test_a_matching_deny_rule_always_wins(rules, req):
    text = (
        "".join(_rule(i, *r) for i, r in enumerate(rules))
        + """
[[policies]]
id = "p"
match.target_host = ["*"]
[[policies.require]]
id = "r"
groups = ["@admins"]
approve = 1
"""
    )
    ev = evaluate(config(text), req)
    denying = [
        f"r{i}"
        for i, (effect, host, argv0) in enumerate(rules)
        if effect == "deny"
        and Match.build(target_host=(host,), argv=(ArgvPattern.build([argv0, "**"]),)).matches(req)
    ]
    if denying:
        assert (
            ev.outcome == AUTO_DENY
            and ev.rules_matched == tuple(denying)
            and ev.reason == f"because {denying[0][1:]}"
        )
    else:
        assert ev.outcome != AUTO_DENY


@given(REQUESTS, st.lists(st.sampled_from(["sre", "ops"]), max_size=3))
def test_without_policies_every_request_gets_the_default_policy(req, group_ids):
    """Groups alone change nothing: no rule and no policy -> today's behaviour for every request."""
    text = "".join(
        f'[[groups]]\nid = "{g}{i}"\nmembers = ["x{i}@example.com"]\n' for i, g in enumerate(group_ids)
    )
    ev = evaluate(config(text), req)
    assert ev.outcome == NEEDS_REVIEW and ev.review == DEFAULT_REVIEW and ev.policies_matched == ()


@given(
    st.lists(WORDS, max_size=6).map(tuple),
    st.lists(st.sampled_from(["ls", "*", "rm|ls", "**", "re:[a-z]+"]), min_size=1, max_size=4),
)
def test_argv_matching_never_joins_arguments(argv, pattern):
    """A pattern without "**" matches only argv of exactly its length; with it, at least the rest."""
    if "**" in pattern[:-1]:
        return
    built = ArgvPattern.build(pattern)
    if built.matches(argv):
        assert len(argv) == len(built.elements) or (built.any_rest and len(argv) >= len(built.elements))


def test_each_matched_set_is_pinned_once_per_configuration_and_stays_right():
    """`evaluate` remembers the combined review per matched set; the remembered one is the one a
    fresh combination gives, and another matched set never gets it."""
    from grantd.core.review.evaluate import pin

    cfg = config(RULES_AND_POLICIES)
    both = evaluate(cfg, request(("ls",)))
    one = evaluate(cfg, request(("ls",), run_as="www"))
    assert evaluate(cfg, request(("cat",))).review is both.review  # remembered
    assert both.review == pin(tuple(cfg.policies)) and one.review == pin((cfg.policies[1],))
    assert both.review != one.review and both.policy_hash != one.policy_hash
    assert config(RULES_AND_POLICIES).pinned == {}  # per configuration: a reload starts afresh


def test_the_examples_in_docs_policies_md_parse_and_do_what_the_page_says(tmp_path, monkeypatch, capsys):
    import re as regex

    from conftest import ROOT

    page = (ROOT / "docs" / "policies.md").read_text()
    blocks = regex.findall(r"```toml\n(.*?)```", page, flags=regex.S)
    assert len(blocks) >= 5
    defined = 'members = ["alice@example.com", "bob@example.com", "carol@example.com", "sec@example.com"]\n'
    for block in blocks:
        groups = "".join(
            f'[[groups]]\nid = "{g}"\n{defined}'
            for g in ("sre", "dba", "security", "sre-leads", "managers")
            if f'id = "{g}"\nmembers' not in block
        )
        parsed = parse_review_config(tomllib.loads(groups + block))
        assert parsed.problems == (), (block, parsed.problems)
    rules = config(blocks[3])
    staging = request(("journalctl", "-u", "nginx"), target_host="staging-3")
    assert evaluate(rules, staging).rules_matched == ("staging-journal",)
    vacuum = evaluate(rules, request(("journalctl", "--vacuum-size=1M"), target_host="staging-3"))
    assert (vacuum.outcome, vacuum.rules_matched) == (AUTO_DENY, ("journal-vacuum",))
    assert (
        evaluate(rules, request(("journalctl",), target_host="staging-3", grant_type="always")).outcome
        == NEEDS_REVIEW
    )
    assert evaluate(rules, request(("/bin/journalctl",), target_host="staging-3")).outcome == NEEDS_REVIEW
    # the office-hours key beyond.md sketches is refused, not ignored
    assert parse_review_config(
        tomllib.loads(
            blocks[3].replace(
                'max_grant_type = "once"', 'max_grant_type = "once"\nschedule = {days = "mon-fri"}'
            )
        )
    ).problems == ("rules[0].schedule: unknown key",)
    # the page's dry-run snippet runs as printed, on the page's first example
    snippet = regex.search(r"```python\n(.*?)```", page, flags=regex.S).group(1)
    (tmp_path / "grantd.toml").write_text(blocks[0])
    monkeypatch.chdir(tmp_path)
    exec(compile(snippet, "docs/policies.md", "exec"), {})  # noqa: S102 (the page's own example)
    assert capsys.readouterr().out == "ok\nneeds_review () ('prod-root',) None ['prod-root/sre']\n"

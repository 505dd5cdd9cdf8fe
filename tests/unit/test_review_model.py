"""The approval-policy configuration (D13): every mistake is reported at once with its key path.

Each test feeds real TOML through `tomllib` (as `grantd config validate` will) to
`grantd.core.review.parse_review_config` and checks the exact problem lines.
"""

from __future__ import annotations

import textwrap
import tomllib

import pytest

from grantd.config import SCHEMA, Key, check_value
from grantd.core.review import (
    DEFAULT_POLICY_HASH,
    ArgvPattern,
    Escalation,
    Policy,
    Requirement,
    parse_duration,
    parse_review_config,
    policy_hash,
)
from grantd.core.review.matching import MAX_REGEX, nested_quantifier

GROUPS = """
[[groups]]
id = "sre"
members = ["alice@example.com", "Bob@Example.com", "carol@example.com"]
[[groups]]
id = "security"
members = ["sec@example.com"]
"""

POLICY = """
[[policies]]
id = "prod-root"
description = "root on prod needs two SREs who do not own the agent"
match.target_host = ["prod-*", "db-?"]
match.run_as = ["root"]
match.audience = ["escapes", "grantd"]
match.agents = ["*"]
match.argv = [["systemctl", "restart|reload", "*"], ["journalctl", "**"], ["re:ls|cat", "re:/var/log/[a-z]+"]]
match.grant_types = ["once", "timed"]
forbid = ["owner", "approver"]
allow_self_approval = false
allow_management_token = false
allow_delegation = false
require_reason = true
max_duration = "4h"
pending_ttl = "2h"
on_timeout = "deny"
[[policies.require]]
id = "sre"
groups = ["sre"]
approve = 2
deny = 1
[[policies.require]]
id = "security"
groups = ["security", "@admins"]
approve = 1
[[policies.escalate]]
after = "45m"
notify = ["@owner", "sre"]
add_approvers = ["security"]
[[policies.escalate]]
after = "15m"
notify = ["@approver"]
"""

RULES = """
[[rules]]
id = "staging-journal"
effect = "approve"
reason = "read-only journalctl on staging is pre-approved (CHG-1234)"
match.target_host = ["staging-*"]
match.argv = [["journalctl", "**"]]
max_grant_type = "once"
[[rules]]
id = "no-rm"
effect = "deny"
reason = "rm on prod is never approved"
match.argv = [["rm", "**"]]
"""


def parse(text: str):
    return parse_review_config(tomllib.loads(textwrap.dedent(text)))


def problems(text: str) -> list[str]:
    parsed = parse(text)
    assert parsed.config is None, "expected problems, the config parsed"
    return list(parsed.problems)


def test_the_full_example_parses_into_frozen_typed_data():
    parsed = parse(GROUPS + POLICY + RULES)
    assert parsed.problems == ()
    config = parsed.config
    assert [g.id for g in config.groups] == ["sre", "security"]
    assert config.groups[0].members == (
        "alice@example.com",
        "bob@example.com",
        "carol@example.com",
    )  # lowercased
    policy = config.policies[0]
    assert policy.id == "prod-root" and policy.forbid == ("owner", "approver")
    assert policy.max_duration == 4 * 3600 and policy.pending_ttl == 2 * 3600 and policy.on_timeout == "deny"
    assert policy.require == (
        Requirement("sre", ("sre",), 2, 1),
        Requirement("security", ("security", "@admins"), 1, 1),
    )
    # escalation levels come out in the order they fire
    assert policy.escalate == (
        Escalation(900, ("@approver",), ()),
        Escalation(2700, ("@owner", "sre"), ("security",)),
    )
    assert policy.match.target_host == ("prod-*", "db-?")
    assert policy.match.argv[0] == ArgvPattern.build(["systemctl", "restart|reload", "*"])
    assert policy.match.argv[1].any_rest and policy.match.argv[1].elements == ("journalctl",)
    assert [r.id for r in config.deny_rules] == ["no-rm"] and [r.id for r in config.approve_rules] == [
        "staging-journal"
    ]
    with pytest.raises(AttributeError):
        policy.id = "other"  # frozen


def test_nothing_configured_is_an_empty_config():
    parsed = parse_review_config({"version": 1, "server": {"port": 1}})
    assert parsed.problems == () and parsed.config.policies == () and parsed.config.rules == ()


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (90, 90),
        ("90s", 90),
        ("15m", 900),
        ("4h", 14400),
        ("2d", 172800),
        ("1s", 1),
        ("366d", 366 * 86400),
    ],
)
def test_durations(value, seconds):
    assert parse_duration(value) == (seconds, None)


@pytest.mark.parametrize(
    "value", [0, -5, "0s", "15", "15 m", "1h30m", "4H", "2w", "", True, 1.5, None, "367d", ["1m"]]
)
def test_bad_durations(value):
    seconds, problem = parse_duration(value)
    assert seconds is None and problem


# Each case: a config and exactly the problems it must produce (key path first).
BAD = {
    "approve = 0": (
        GROUPS + POLICY.replace("approve = 2", "approve = 0"),
        ["policies[0].require[0].approve: must be at least 1, got 0"],
    ),
    "deny = 0 and approve not an integer": (
        GROUPS + POLICY.replace("deny = 1", "deny = 0").replace("approve = 1", 'approve = "1"'),
        [
            "policies[0].require[0].deny: must be at least 1, got 0",
            "policies[0].require[1].approve: must be an integer, got '1'",
        ],
    ),
    "unknown keys everywhere, with did-you-mean": (
        GROUPS.replace('id = "sre"', 'id = "sre"\nmembrs = []')
        + POLICY.replace("description =", "descripton =")
        .replace("match.run_as", "match.runas")
        .replace("approve = 2", "approve = 2\napprovals = 2")
        .replace('after = "15m"', 'aftr = "1m"\nafter = "15m"')
        + RULES.replace("max_grant_type", "max_granttype"),
        [
            'groups[0].membrs: unknown key (did you mean "groups[0].members"?)',
            'rules[0].max_granttype: unknown key (did you mean "rules[0].max_grant_type"?)',
            'policies[0].descripton: unknown key (did you mean "policies[0].description"?)',
            'policies[0].match.runas: unknown key (did you mean "policies[0].match.run_as"?)',
            'policies[0].require[0].approvals: unknown key (did you mean "policies[0].require[0].approve"?)',
            'policies[0].escalate[1].aftr: unknown key (did you mean "policies[0].escalate[1].after"?)',
        ],
    ),
    "an unknown top-level key of a policy without a near name": (
        GROUPS + POLICY.replace("on_timeout", 'schedule = {days = "mon-fri"}\non_timeout'),
        ["policies[0].schedule: unknown key"],
    ),
    "unknown group and pseudo-group": (
        GROUPS
        + POLICY.replace('groups = ["sre"]', 'groups = ["sre", "sre-lead", "@owners", "@root"]')
        .replace('notify = ["@owner", "sre"]', 'notify = ["@owner", "oncall"]')
        .replace('add_approvers = ["security"]', 'add_approvers = ["securty"]'),
        [
            "policies[0].require[0].groups[1]: unknown group 'sre-lead': define it in a [[groups]] table",
            "policies[0].require[0].groups[2]: unknown pseudo-group '@owners': use @owner, @approver or @admins "
            '(did you mean "@owner"?)',
            "policies[0].require[0].groups[3]: unknown pseudo-group '@root': use @owner, @approver or @admins",
            "policies[0].escalate[0].notify[1]: unknown group 'oncall': define it in a [[groups]] table",
            "policies[0].escalate[0].add_approvers[0]: unknown group 'securty': define it in a [[groups]] table "
            '(did you mean "security"?)',
        ],
    ),
    "a re: pattern that does not compile": (
        GROUPS + POLICY.replace('"re:ls|cat"', '"re:(ls|cat"'),
        [
            "policies[0].match.argv[2][0]: the regular expression does not compile: "
            "missing ), unterminated subpattern at position 0"
        ],
    ),
    "a re: pattern longer than 200 characters": (
        GROUPS + POLICY.replace('"re:ls|cat"', '"re:' + "a" * (MAX_REGEX + 1) + '"'),
        [
            f"policies[0].match.argv[2][0]: the regular expression is longer than 200 characters ({MAX_REGEX + 1})"
        ],
    ),
    "a re: pattern that can backtrack for ever": (
        GROUPS + POLICY.replace('"re:ls|cat"', '"re:(a+)+b"'),
        [
            "policies[0].match.argv[2][0]: the regular expression repeats a repeated part (like (a+)+), "
            "which can backtrack for ever; rewrite it"
        ],
    ),
    "argv shapes": (
        GROUPS
        + POLICY.replace(
            'match.argv = [["systemctl", "restart|reload", "*"], ["journalctl", "**"], ["re:ls|cat", "re:/var/log/[a-z]+"]]',
            'match.argv = ["systemctl restart *", ["**"], [], ["a", "**", "b"], ["a", "b|"], ["", "x"], [1]]',
        ),
        [
            "policies[0].match.argv[0]: must be a list of strings, one per argument, like "
            '["systemctl", "restart", "*"], got \'systemctl restart *\'',
            'policies[0].match.argv[1]: must name at least the program (a pattern of only "**" would match every command)',
            'policies[0].match.argv[2]: must name at least the program (a pattern of only "**" would match every command)',
            'policies[0].match.argv[3][1]: "**" (any further arguments) may only be the last element',
            "policies[0].match.argv[4][1]: an empty glob or alternative matches only an empty argument; got 'b|'",
            "policies[0].match.argv[5][0]: an empty glob or alternative matches only an empty argument; got ''",
            "policies[0].match.argv[6]: must be a list of strings, one per argument, like "
            '["systemctl", "restart", "*"], got [1]',
        ],
    ),
    "match values": (
        GROUPS
        + POLICY.replace(
            'match.run_as = ["root"]',
            'match.run_as = []\nmatch.target_host = "prod-1"'.replace("match.target_host", "match.audience"),
        )
        .replace('match.audience = ["escapes", "grantd"]\n', "")
        .replace('match.grant_types = ["once", "timed"]', 'match.grant_types = ["once", "timd"]')
        .replace('match.agents = ["*"]', 'match.agents = [""]'),
        [
            "policies[0].match.audience: must be a list, got 'prod-1'",
            "policies[0].match.run_as: must not be empty (leave the key out to match anything)",
            "policies[0].match.agents: a pattern must not be empty",
            "policies[0].match.grant_types: must hold only once, timed, always, got 'timd' (did you mean \"timed\"?)",
        ],
    ),
    "policy scalars": (
        GROUPS
        + POLICY.replace('forbid = ["owner", "approver"]', 'forbid = ["onwer", "requester"]')
        .replace("allow_delegation = false", 'allow_delegation = "no"')
        .replace('on_timeout = "deny"', 'on_timeout = "expired"')
        .replace('max_duration = "4h"', 'max_duration = "4 hours"')
        .replace('pending_ttl = "2h"', "pending_ttl = 0"),
        [
            "policies[0].allow_delegation: must be true or false, got 'no'",
            "policies[0].on_timeout: must be one of expire, deny, got 'expired' (did you mean \"expire\"?)",
            "policies[0].forbid[0]: must be owner or approver, got 'onwer' (did you mean \"owner\"?)",
            "policies[0].forbid[1]: must be owner or approver, got 'requester'",
            'policies[0].max_duration: must be seconds or a duration like "90s", "15m", "4h", "2d", got \'4 hours\'',
            "policies[0].pending_ttl: must be at least 1 second, got 0",
        ],
    ),
    "missing keys and empty blocks": (
        GROUPS + '[[policies]]\ndescription = "x"\n[[policies]]\nid = "b"\nrequire = []\n'
        '[[policies]]\nid = "c"\n[[policies.require]]\ngroups = []\n[[policies.escalate]]\nnotify = []\n',
        [
            "policies[0].id: missing",
            "policies[0].require: missing",
            "policies[1].require: needs at least one [[policies.require]] block (who must approve)",
            "policies[2].require[0].id: missing",
            "policies[2].require[0].approve: missing",
            "policies[2].require[0].groups: must name at least one group (a [[groups]] id, @owner, @approver or @admins)",
            "policies[2].escalate[0].after: missing",
            "policies[2].escalate[0]: does nothing: give notify, add_approvers or both",
        ],
    ),
    "a quorum the group can never meet": (
        GROUPS + POLICY.replace("approve = 2", "approve = 4"),
        ["policies[0].require[0].approve: can never be met: 4 approvals from sre, which have 3 member(s)"],
    ),
    "an escalation after the pending timeout": (
        GROUPS + POLICY.replace('after = "45m"', 'after = "2h"'),
        [
            "policies[0].escalate[0].after: 7200 s is not before the policy's pending_ttl (7200 s): it would never happen"
        ],
    ),
    "ids: shape and duplicates, across rules and policies": (
        GROUPS
        + GROUPS.replace('"security"', '"sec urity"')
        + POLICY
        + POLICY.replace('id = "security"', 'id = "sre"')
        + RULES.replace('"no-rm"', '"prod-root"'),
        [
            "groups[2].id: 'sre' is already the id of groups[0]",
            "groups[3].id: must be 1-64 letters, digits, '.', '_' or '-' (starting with a letter or digit), got 'sec urity'",
            "policies[0].id: 'prod-root' is already the id of rules[1]",
            "policies[1].id: 'prod-root' is already the id of rules[1]",
            "policies[1].require[1].id: 'sre' is already the id of policies[1].require[0]",
        ],
    ),
    "group members": (
        '[[groups]]\nid = "sre"\nmembers = ["alice", " bob@example.com", "@admins", 7]\n',
        [
            "groups[0].members: every item must be a string, got 7",
            "groups[0].members[0]: must be a person's e-mail, got 'alice'",
            "groups[0].members[1]: must be a person's e-mail, got ' bob@example.com'",
            "groups[0].members[2]: must be a person's e-mail, got '@admins'",
        ],
    ),
    "rules": (
        GROUPS
        + '[[rules]]\nid = "a"\neffect = "allow"\n[[rules]]\nid = "b"\neffect = "approve"\nreason = " "\nmatch = {}\n'
        '[[rules]]\nid = "c"\neffect = "deny"\nreason = "no"\nmax_grant_type = "once"\nmatch.run_as = ["root"]\n',
        [
            "rules[0].reason: missing",
            "rules[0].match: missing",
            "rules[0].effect: must be one of approve, deny, got 'allow'",
            "rules[1].reason: must not be empty (it is what the requester and the log are told)",
            "rules[1].match: must hold at least one key (a rule that matches everything is a mistake)",
            "rules[2].max_grant_type: only an approve rule takes max_grant_type",
        ],
    ),
    "tables that are not arrays of tables": (
        '[policies]\nid = "x"\n[rules]\nid = "y"\n',
        ["rules: must be a list of tables ([[rules]])", "policies: must be a list of tables ([[policies]])"],
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_every_mistake_is_reported_with_its_key_path(case):
    text, expected = BAD[case]
    assert problems(text) == expected


def test_every_problem_at_once():
    """All the mistakes of all the cases above in one file come back together."""
    text = (
        GROUPS
        + POLICY.replace("approve = 2", "approve = 0").replace('"re:ls|cat"', '"re:(ls"')
        + RULES.replace('effect = "deny"', 'effect = "block"')
    )
    found = problems(text)
    assert "policies[0].require[0].approve: must be at least 1, got 0" in found
    assert any(
        p.startswith("policies[0].match.argv[2][0]: the regular expression does not compile") for p in found
    )
    assert any(p.startswith("rules[1].effect: must be one of approve, deny") for p in found)


def test_the_scalar_checks_are_the_main_configs_own():
    """One wording for every config error: the policy parser reports a bad scalar exactly as the
    main config does (it calls `grantd.core.config_keys.check_value`)."""
    ours = problems(GROUPS + POLICY.replace('on_timeout = "deny"', 'on_timeout = "dny"'))
    theirs: list[str] = []
    check_value("policies[0].on_timeout", Key(str, "expire", "", choices=("expire", "deny")), "dny", theirs)
    assert ours == theirs
    assert SCHEMA  # the module whose helpers these are


@pytest.mark.parametrize(
    ("pattern", "nested"),
    [
        ("(a+)+b", True),
        ("(a*)*", True),
        (r"(\w*,)*x", True),
        ("((a+))+", True),
        ("(a{1,3}){2}", True),
        ("(x|y+)+", True),
        ("a+b+", False),
        ("(ab)+", False),
        ("x{2,5}", False),
        ("(a|b)*c", False),
        ("(?>a+)+", False),
        ("(a++)+", False),
        ("[a-z]+", False),
        ("/var/log/.*", False),
    ],
)
def test_nested_quantifiers_are_recognised(pattern, nested):
    assert nested_quantifier(pattern) is nested


def test_policy_hash_is_canonical_and_changes_with_meaning():
    base = parse(GROUPS + POLICY).config.policies
    same_meaning = parse(
        GROUPS
        + POLICY.replace('max_duration = "4h"', "max_duration = 14400").replace(
            "allow_delegation = false\n", ""
        )
    ).config.policies
    assert policy_hash(base) == policy_hash(same_meaning)
    assert policy_hash(base).startswith("sha256:") and len(policy_hash(base)) == 7 + 64
    for change in (
        ("approve = 2", "approve = 3"),
        ('"prod-*"', '"prod-?"'),
        ('forbid = ["owner", "approver"]', 'forbid = ["owner"]'),
        ('pending_ttl = "2h"', 'pending_ttl = "3h"'),
    ):
        assert policy_hash(parse(GROUPS + POLICY.replace(*change)).config.policies) != policy_hash(base), (
            change
        )
    assert DEFAULT_POLICY_HASH == policy_hash(())
    # independent of the order the policies are listed in
    two = parse(GROUPS + POLICY + POLICY.replace('id = "prod-root"', 'id = "db-root"')).config.policies
    assert policy_hash(two) == policy_hash(tuple(reversed(two)))


def test_the_policy_hash_is_sha256_of_rfc8785_json():
    """Recompute it independently: RFC 8785 sorts keys and uses no whitespace; for these values
    (ASCII keys, strings, integers, booleans, null) that is json.dumps with sorted keys."""
    import hashlib
    import json

    policy = Policy(
        id="p",
        match=parse(GROUPS + POLICY).config.policies[0].match,
        require=(Requirement("r", ("sre",), 1),),
        description="Zürich ✓",
    )
    text = json.dumps([policy.canonical()], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert policy_hash([policy]) == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    assert '"description":"Zürich ✓"' in text  # UTF-8, not \u escapes (RFC 8785)

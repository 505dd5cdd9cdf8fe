"""`grantd elevate` on the target host demands approvals (D13's last paragraph, issue 22).

`min_approvals` (distinct `approvals[].sub`), `approvers_mode = "any"|"all"` against
`allowed_approvers`, and the opt-in for rule-approved grants (`policy:<rule id>` or `policy:*`).
Real `grantd elevate` processes, run as root, against a hand-made issuer (tests/elevate_support.py
FakeIssuer) whose consume endpoint answers 200, so an allowed token really runs `id -u`; every
refusal is exit 5 with one JSON line and nothing run. The same claims through the real server's
key are in tests/system/test_jwt_attacks.py (`test_forged_approvals_do_not_help_at_elevate`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from elevate_support import APPROVER, FakeIssuer, Target, attempts, elevate, error_line

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="grantd elevate runs as root")

ARGV = ["id", "-u"]
ALICE, BOB, CAROL = "alice@example.com", "bob@example.com", "carol@example.com"
RULE = "staging-journal"


def vote(sub: Any, req: str = "prod-root/sre", **extra: Any) -> dict[str, Any]:
    return {"sub": sub, "at": 1764140000, "via": "web", "req": req, **extra}


def rule_entry(rule: Any = RULE) -> dict[str, Any]:
    return {"kind": "rule", "rule": rule, "reason": "read-only journalctl on staging is pre-approved"}


@pytest.fixture
def issuer() -> Iterator[FakeIssuer]:
    fake = FakeIssuer().serve()
    yield fake
    fake.close()


def host(issuer: FakeIssuer, tmp_path: Path, **keys: Any) -> Target:
    return issuer.target(tmp_path / "t", **keys)


def ran(target: Target, token: str) -> None:
    result = elevate(target, ARGV, token=token)
    assert result.returncode == 0, (result.returncode, result.stderr)
    assert result.stdout.strip() == "0"


def refused(target: Target, token: str, argv: list[str] = ARGV) -> dict[str, Any]:
    result = elevate(target, argv, token=token)
    assert result.returncode == 5, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""  # nothing ran
    assert attempts(target)[-1]["result"] == "refused"
    return error_line(result)


# -- the config keys ----------------------------------------------------------------------------------------


def check_config(target: Target) -> Any:
    return elevate(target, [], extra_args=["--check-config"])


def test_the_defaults_are_one_approval_any_mode_and_no_rules(issuer, tmp_path):
    result = check_config(host(issuer, tmp_path))
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["min_approvals"] == 1 and shown["approvers_mode"] == "any"
    assert "rule-approved grants are refused" in shown["approvals"]


def test_check_config_names_the_quorum_the_mode_and_the_rules_opted_in(issuer, tmp_path):
    target = host(
        issuer,
        tmp_path,
        min_approvals=2,
        approvers_mode="all",
        allowed_approvers=[ALICE, BOB, f"policy:{RULE}", "policy:db-read"],
    )
    shown = json.loads(check_config(target).stdout)
    assert shown["min_approvals"] == 2 and shown["approvers_mode"] == "all"
    assert "at least 2 distinct people" in shown["approvals"] and "every approver" in shown["approvals"]
    assert f"only for rules {RULE}, db-read" in shown["approvals"]
    every = json.loads(check_config(host(issuer, tmp_path / "b", allowed_approvers=["policy:*"])).stdout)
    assert "rule-approved grants run (policy:*)" in every["approvals"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("min_approvals = 0", "min_approvals: must be an integer from 1 to 100"),
        ("min_approvals = -1", "min_approvals: must be an integer from 1 to 100"),
        ("min_approvals = 101", "min_approvals: must be an integer from 1 to 100"),
        ("min_approvals = true", "min_approvals: must be an integer from 1 to 100"),
        ('min_approvals = "2"', "min_approvals: must be an integer from 1 to 100"),
        ("min_approvals = 1.5", "min_approvals: must be an integer from 1 to 100"),
        ('approvers_mode = "some"', 'approvers_mode: must be "any" or "all"'),
        ('approvers_mode = "ALL"', 'approvers_mode: must be "any" or "all"'),
        ("approvers_mode = 1", 'approvers_mode: must be "any" or "all"'),
        ("min_approval = 2", "did you mean 'min_approvals'?"),
        ('approver_mode = "all"', "did you mean 'approvers_mode'?"),
    ],
)
def test_bad_values_are_config_errors_that_name_the_key(issuer, tmp_path, line, message):
    target = host(issuer, tmp_path, extra=line + "\n")
    for result in (check_config(target), elevate(target, ARGV, token=issuer.token(ARGV))):
        assert result.returncode == 1, result.stderr
        assert message in error_line(result)["reason"] and error_line(result)["error"] == "config"
        assert result.stdout == ""


@pytest.mark.parametrize(
    "entry",
    ["policy:", "policy:bad id", "policy:-x", "policy:" + "x" * 65, "policy:a/b", " alice@example.com"],
)
def test_a_malformed_policy_opt_in_is_a_config_error(issuer, tmp_path, entry):
    result = check_config(host(issuer, tmp_path, allowed_approvers=[APPROVER, entry]))
    assert result.returncode == 1, result.stderr
    assert (
        'allowed_approvers: must be a list of e-mails, "*", "policy:<rule id>"'
        in error_line(result)["reason"]
    )


def test_the_elevate_rule_id_is_the_servers():
    """One rule in one place: the opt-in accepts exactly the ids the server's policy checker gives rules."""
    from grantd.core.review.model import ID_RE
    from grantd.elevate.approvals import RULE_ID

    assert RULE_ID.pattern == ID_RE.pattern


# -- the defaults keep today's rule ------------------------------------------------------------------------


def test_defaults_run_tokens_with_and_without_approvals(issuer, tmp_path):
    target = host(issuer, tmp_path)
    ran(target, issuer.token(ARGV))  # a token from before D13 (and the peer's): decided_by only
    ran(
        target,
        issuer.token(ARGV, approvals=[vote(APPROVER)], quorum="1/1", policy={"ids": [], "hash": "sha256:x"}),
    )
    ran(target, issuer.token(ARGV, approvals=[]))  # no votes listed: decided_by counts as one


def test_defaults_still_refuse_an_approver_not_allowed(issuer, tmp_path):
    target = host(issuer, tmp_path)
    line = refused(
        target, issuer.token(ARGV, decided_by="mallory@example.com", approvals=[vote("mallory@example.com")])
    )
    assert line == {"error": "approver_not_allowed", "reason": "approver not allowed"}


def test_any_mode_accepts_one_allowed_approver_among_several(issuer, tmp_path):
    """ "any" = at least one approver (decided_by or an approvals[].sub) is allowed."""
    target = host(issuer, tmp_path, allowed_approvers=[ALICE])
    ran(target, issuer.token(ARGV, decided_by=BOB, approvals=[vote(ALICE), vote(BOB)]))
    line = refused(target, issuer.token(ARGV, decided_by=BOB, approvals=[vote(CAROL), vote(BOB)]))
    assert line["error"] == "approver_not_allowed"


# -- min_approvals -----------------------------------------------------------------------------------------


def test_min_approvals_refuses_one_vote_and_runs_two(issuer, tmp_path):
    target = host(issuer, tmp_path, allowed_approvers=[ALICE, BOB], min_approvals=2)
    line = refused(target, issuer.token(ARGV, decided_by=ALICE, approvals=[vote(ALICE)], quorum="1/1"))
    assert line == {
        "error": "not_enough_approvals",
        "reason": "not enough approvals: 1 distinct approver, this host requires 2 (min_approvals)",
    }
    ran(target, issuer.token(ARGV, decided_by=BOB, approvals=[vote(ALICE), vote(BOB)], quorum="2/2"))


def test_a_token_without_approvals_counts_decided_by_as_one(issuer, tmp_path):
    target = host(issuer, tmp_path, allowed_approvers=[APPROVER], min_approvals=2)
    assert refused(target, issuer.token(ARGV))["error"] == "not_enough_approvals"
    assert refused(target, issuer.token(ARGV, approvals=[]))["error"] == "not_enough_approvals"


@pytest.mark.parametrize(
    "subs",
    [
        [ALICE, ALICE],  # the same person twice
        [ALICE, "Alice@Example.COM"],  # e-mails compare without regard to case
        [ALICE, f" {ALICE} "],  # nor surrounding blanks
        [ALICE, ALICE, ALICE, ALICE],
    ],
    ids=["twice", "case", "blanks", "four-times"],
)
def test_a_person_counts_once_however_often_the_token_names_them(issuer, tmp_path, subs):
    target = host(issuer, tmp_path, allowed_approvers=[ALICE, BOB], min_approvals=2)
    line = refused(
        target, issuer.token(ARGV, decided_by=ALICE, approvals=[vote(s) for s in subs], quorum="2/2")
    )
    assert line["error"] == "not_enough_approvals" and "1 distinct approver," in line["reason"]


def test_decided_by_does_not_add_a_vote_the_approvals_do_not_list(issuer, tmp_path):
    """With votes listed, only they count: a decided_by outside them is not a second person."""
    target = host(issuer, tmp_path, allowed_approvers=["*"], min_approvals=2)
    assert (
        refused(target, issuer.token(ARGV, decided_by=BOB, approvals=[vote(ALICE)]))["error"]
        == "not_enough_approvals"
    )


def test_a_rule_is_never_two_people(issuer, tmp_path):
    target = host(issuer, tmp_path, allowed_approvers=["policy:*"], min_approvals=2)
    line = refused(target, issuer.token(ARGV, decided_by=f"policy:{RULE}", approvals=[rule_entry()]))
    assert line["error"] == "not_enough_approvals" and "1 distinct approver," in line["reason"]


# -- approvers_mode = "all" --------------------------------------------------------------------------------


def test_all_mode_needs_every_approver_allowed(issuer, tmp_path):
    target = host(issuer, tmp_path, allowed_approvers=[ALICE, BOB], approvers_mode="all")
    ran(target, issuer.token(ARGV, decided_by=BOB, approvals=[vote(ALICE), vote(BOB)]))
    line = refused(target, issuer.token(ARGV, decided_by=BOB, approvals=[vote(CAROL), vote(BOB)]))
    assert line == {
        "error": "approver_not_allowed",
        "reason": f'approver not allowed: {CAROL} (approvers_mode = "all")',
    }


def test_all_mode_checks_decided_by_too(issuer, tmp_path):
    target = host(issuer, tmp_path, allowed_approvers=[ALICE, BOB], approvers_mode="all")
    line = refused(target, issuer.token(ARGV, decided_by=CAROL, approvals=[vote(ALICE), vote(BOB)]))
    assert line["error"] == "approver_not_allowed" and CAROL in line["reason"]
    assert refused(target, issuer.token(ARGV, decided_by=CAROL))["error"] == "approver_not_allowed"


def test_all_mode_with_a_wildcard_and_a_quorum(issuer, tmp_path):
    target = host(issuer, tmp_path, allowed_approvers=["*"], approvers_mode="all", min_approvals=3)
    ran(target, issuer.token(ARGV, decided_by=CAROL, approvals=[vote(ALICE), vote(BOB), vote(CAROL)]))
    assert (
        refused(target, issuer.token(ARGV, decided_by=BOB, approvals=[vote(ALICE), vote(BOB)]))["error"]
        == "not_enough_approvals"
    )


# -- rule-approved grants ----------------------------------------------------------------------------------


def rule_token(issuer: FakeIssuer, rule: str = RULE, **extra: Any) -> str:
    return issuer.token(ARGV, decided_by=f"policy:{rule}", approvals=[rule_entry(rule)], **extra)


@pytest.mark.parametrize(
    "allowed",
    [[APPROVER], ["*"], ["policy:other-rule"], [f"policy:{RULE.upper()}"], [f"{RULE}"]],
    ids=["people-only", "star", "another-rule", "case", "bare-id"],
)
def test_a_rule_approved_grant_is_refused_without_the_opt_in(issuer, tmp_path, allowed):
    target = host(issuer, tmp_path, allowed_approvers=allowed)
    line = refused(target, rule_token(issuer))
    assert line == {
        "error": "policy_not_allowed",
        "reason": "rule-approved grant not allowed on this host: allowed_approvers holds neither "
        f"policy:{RULE} nor policy:*",
    }


@pytest.mark.parametrize(
    "allowed", [[f"policy:{RULE}"], ["policy:*"], [APPROVER, "policy:other", f"policy:{RULE}"]]
)
def test_a_rule_approved_grant_runs_where_the_host_opted_in(issuer, tmp_path, allowed):
    target = host(issuer, tmp_path, allowed_approvers=allowed)
    ran(target, rule_token(issuer))
    assert attempts(target)[-1]["approvers"] == [f"policy:{RULE}"]


def test_a_rule_approved_grant_without_the_approvals_claim_needs_the_opt_in_too(issuer, tmp_path):
    target = host(issuer, tmp_path, allowed_approvers=["*"])
    assert refused(target, issuer.token(ARGV, decided_by=f"policy:{RULE}"))["error"] == "policy_not_allowed"
    ran(
        host(issuer, tmp_path / "b", allowed_approvers=[f"policy:{RULE}"]),
        issuer.token(ARGV, decided_by=f"policy:{RULE}"),
    )


def test_a_rule_written_as_a_policy_sub_is_a_rule_not_a_person(issuer, tmp_path):
    """Tokens of grantd before stop 17 wrote a rule's approval as {sub: "policy:<id>", via: "rule"}
    without kind: still a rule (the opt-in runs it; "*" alone refuses), never a person no list allows."""
    entry = {"sub": f"policy:{RULE}", "at": 1, "via": "rule", "req": None, "reason": "pre-approved"}
    token = issuer.token(ARGV, decided_by=f"policy:{RULE}", approvals=[entry])
    ran(host(issuer, tmp_path, allowed_approvers=[f"policy:{RULE}"]), token)
    ran(host(issuer, tmp_path / "b", allowed_approvers=["policy:*"]), token)
    assert (
        refused(host(issuer, tmp_path / "c", allowed_approvers=["*"]), token)["error"] == "policy_not_allowed"
    )


def test_a_rule_entry_beside_a_persons_decision_needs_the_opt_in(issuer, tmp_path):
    target = host(issuer, tmp_path, allowed_approvers=[ALICE])
    line = refused(target, issuer.token(ARGV, decided_by=ALICE, approvals=[rule_entry(), vote(ALICE)]))
    assert line["error"] == "policy_not_allowed"


def test_all_mode_does_not_let_a_rule_stand_in_for_people(issuer, tmp_path):
    """An opted-in rule passes the approver check in both modes; a person in the token must still be allowed."""
    target = host(issuer, tmp_path, allowed_approvers=[f"policy:{RULE}", ALICE], approvers_mode="all")
    ran(target, rule_token(issuer))
    line = refused(
        target, issuer.token(ARGV, decided_by=f"policy:{RULE}", approvals=[rule_entry(), vote(CAROL)])
    )
    assert line["error"] == "approver_not_allowed" and CAROL in line["reason"]


# -- forged or malformed approvals claims (signed, but never guessed at) ------------------------------------


@pytest.mark.parametrize(
    "approvals",
    [
        ALICE,
        {"sub": ALICE},
        None,
        2,
        True,  # not a list
        [ALICE],
        [[ALICE]],
        [None],  # entries that are not objects
        [vote(None)],
        [vote(7)],
        [vote([ALICE])],
        [vote({"email": ALICE})],
        [vote("")],
        [vote("  ")],
        [{"at": 1}],
        [vote(ALICE, kind="robot")],
        [vote(ALICE, kind=None)],
        [rule_entry(None)],
        [rule_entry(5)],
        [rule_entry("")],
        [rule_entry("bad id")],
        [{"kind": "rule"}],
    ],
    ids=[
        "string",
        "object",
        "null",
        "int",
        "bool",
        "list-of-strings",
        "nested-list",
        "null-entry",
        "sub-null",
        "sub-int",
        "sub-list",
        "sub-object",
        "sub-empty",
        "sub-blank",
        "no-sub",
        "unknown-kind",
        "kind-null",
        "rule-null",
        "rule-int",
        "rule-empty",
        "rule-with-space",
        "rule-missing",
    ],
)
def test_a_malformed_approvals_claim_is_refused(issuer, tmp_path, approvals):
    target = host(issuer, tmp_path, allowed_approvers=["*", "policy:*"])
    line = refused(target, issuer.token(ARGV, approvals=approvals))
    assert line["error"] == "malformed_token" and "approvals" in line["reason"], line
    assert issuer.consumed == []  # refused before the issuer is asked


def test_approvals_are_checked_before_the_command(issuer, tmp_path):
    """D10 order: the approver step comes before the exact command."""
    target = host(issuer, tmp_path, min_approvals=2)
    assert refused(target, issuer.token(["id", "-g"]), argv=ARGV)["error"] == "not_enough_approvals"


def test_the_audit_line_names_every_approver(issuer, tmp_path):
    target = host(issuer, tmp_path, allowed_approvers=[ALICE, BOB], min_approvals=2)
    ran(target, issuer.token(ARGV, decided_by=BOB, approvals=[vote("ALICE@example.com"), vote(BOB)]))
    refused(target, issuer.token(ARGV, decided_by=ALICE, approvals=[vote(ALICE), vote(ALICE)]))
    allowed, denied = attempts(target)[-2:]
    assert allowed["approvers"] == [ALICE, BOB] and allowed["result"] == "allowed"
    assert denied["approvers"] == [ALICE] and denied["reason"].startswith("not enough approvals")

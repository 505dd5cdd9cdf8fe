"""Who approved a grant, as its AuthZ-JWT says, and whether that is enough for this host (D13).

A token names its approvers in `decided_by` (the vote that completed the decision, or
`policy:<rule id>` for a rule) and, from issue 22 on, in `approvals`: one entry per person's vote
(`{sub, at, via, req}`) or one rule entry (`{kind: "rule", rule, reason}`). This host's settings
(`allowed_approvers`, `approvers_mode`, `min_approvals`; grantd.elevate.config) decide:

- a rule-approved grant runs only where `allowed_approvers` holds `policy:<rule id>` or `policy:*`
  (`"*"` alone never opts a host in to rules);
- `approvers_mode = "any"` (default): at least one approving person is allowed (today's rule);
  `"all"`: every approving person is;
- `min_approvals` (default 1): distinct approving persons (e-mails compared lowercased); a token
  without person entries counts its `decided_by` as one.

`check_shape` refuses a malformed `approvals` claim before any of this (exit 5, malformed_token):
the claims are signed, but a verifier never guesses what a claim of the wrong type means.
Only the standard library: `grantd elevate` runs this as root.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# The form of a rule or policy id: the same pattern as grantd.core.review.model.ID_RE (a test holds
# them equal; the elevation tool may not import the server's core).
RULE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
POLICY_PREFIX = "policy:"
MODES = ("any", "all")
MAX_APPROVALS = 100  # the bound of min_approvals; far above any quorum a policy may ask for

# Reasons (the specification's style: a fixed text, details after a colon); codes in
# grantd.elevate.checks.REASON_CODES.
APPROVER_NOT_ALLOWED = "approver not allowed"
POLICY_NOT_ALLOWED = "rule-approved grant not allowed on this host"
NOT_ENOUGH_APPROVALS = "not enough approvals"


def approvals_problem(claims: dict[str, Any]) -> str | None:
    """Why the `approvals` claim is malformed, or None (absent is fine: tokens before D13, the peer)."""
    approvals = claims.get("approvals")
    if approvals is None and "approvals" not in claims:
        return None
    if not isinstance(approvals, list):
        return "approvals must be a list"
    for index, entry in enumerate(approvals):
        if not isinstance(entry, dict):
            return f"approvals[{index}] must be an object"
        kind = entry.get("kind", "person")
        if kind == "rule":
            if not isinstance(entry.get("rule"), str) or not RULE_ID.fullmatch(entry["rule"]):
                return f"approvals[{index}].rule must be a rule id"
        elif kind == "person":
            if not isinstance(entry.get("sub"), str) or not entry["sub"].strip():
                return f"approvals[{index}].sub must be a non-empty string"
        else:
            return f'approvals[{index}].kind must be "person" or "rule"'
    return None


@dataclass(frozen=True)
class Approvers:
    people: tuple[str, ...]  # distinct approving persons, lowercased, in token order (decided_by included)
    rules: tuple[str, ...]  # rule ids that approved (decided_by = policy:<id>, and rule entries)
    counted: int  # what min_approvals is compared with


def approvers_of(claims: dict[str, Any]) -> Approvers:
    """The approvers a shape-checked token names."""
    people: list[str] = []
    rules: list[str] = []
    for entry in claims.get("approvals") or []:
        if entry.get("kind", "person") == "rule":
            if entry["rule"] not in rules:
                rules.append(entry["rule"])
        elif entry["sub"].startswith(POLICY_PREFIX):  # a rule written as {sub: "policy:<id>"} (no kind)
            if (rule := entry["sub"][len(POLICY_PREFIX) :]) not in rules:
                rules.append(rule)
        elif (sub := entry["sub"].strip().lower()) not in people:
            people.append(sub)
    voters = len(people)
    decided_by = claims.get("decided_by")
    if isinstance(decided_by, str) and decided_by:
        if decided_by.startswith(POLICY_PREFIX):
            if decided_by[len(POLICY_PREFIX) :] not in rules:
                rules.append(decided_by[len(POLICY_PREFIX) :])
        elif decided_by.strip().lower() not in people:
            people.append(decided_by.strip().lower())
    # Distinct approvals[].sub; a token without a person's vote in `approvals` counts decided_by as one.
    counted = voters if voters else (1 if isinstance(decided_by, str) and decided_by else 0)
    return Approvers(tuple(people), tuple(rules), counted)


def approval_reasons(claims: dict[str, Any], context: dict[str, Any]) -> list[str]:
    """The refusal for this token's approvers on this host, or []: rules first, then people, then the count."""
    allowed = [str(a) for a in context.get("allowed_approvers", [])]
    people_allowed = {a.lower() for a in allowed if not a.startswith(POLICY_PREFIX)}
    rules_allowed = {a[len(POLICY_PREFIX) :] for a in allowed if a.startswith(POLICY_PREFIX)}
    mode = context.get("approvers_mode", "any")
    minimum = context.get("min_approvals", 1)
    found = approvers_of(claims)
    for rule in found.rules:
        if "*" not in rules_allowed and (not RULE_ID.fullmatch(rule) or rule not in rules_allowed):
            return [
                f"{POLICY_NOT_ALLOWED}: allowed_approvers holds neither {POLICY_PREFIX}{rule} nor {POLICY_PREFIX}*"
            ]
    if not found.people and not found.rules:
        return [APPROVER_NOT_ALLOWED]
    if "*" not in people_allowed:
        if mode == "all":
            for person in found.people:
                if person not in people_allowed:
                    return [f'{APPROVER_NOT_ALLOWED}: {person} (approvers_mode = "all")']
        elif found.people and not any(person in people_allowed for person in found.people):
            return [APPROVER_NOT_ALLOWED]
    if found.counted < minimum:
        return [
            f"{NOT_ENOUGH_APPROVALS}: {found.counted} distinct approver{'s' if found.counted != 1 else ''}, "
            f"this host requires {minimum} (min_approvals)"
        ]
    return []

"""What a grant request needs (D13): deny rules (final), then approve rules, then the `require`
blocks of every matching policy, all of which must be met; nothing matches -> the default policy
(one vote by the agent's owner or approver, an administrator or the management token: today's
behaviour). The answer is pinned to the grant (`Review`), so a config reload never changes what a
pending grant needs; `policy_hash` names the policy set it was pinned to.

policy_hash = "sha256:" + hex SHA-256 of the UTF-8 canonical JSON of the list of the matched
policies' canonical tables (`Policy.canonical()`: every key with its effective value), sorted by
id. Canonical JSON here is RFC 8785 (JCS): for these values (ASCII keys, strings, integers,
booleans, null, lists) that is `json.dumps(sort_keys=True, separators=(",", ":"),
ensure_ascii=False)`. The default policy is the empty list: `sha256:4f53cda1...` (DEFAULT_POLICY_HASH).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from grantd.core.review.matching import RequestFacts
from grantd.core.review.model import Escalation, Policy, ReviewConfig, Rule

GRANT_TYPE_RANK = {"once": 0, "timed": 1, "always": 2}
RULE_PREFIX = "policy:"  # a rule's decision is recorded as decided by "policy:<rule id>"
AUTO_APPROVE, AUTO_DENY, NEEDS_REVIEW = "auto_approve", "auto_deny", "needs_review"
DEFAULT_REQUIREMENT_ID = "default"
DEFAULT_GROUPS = ("@owner", "@approver", "@admins")
PIN_CACHE = 4096  # distinct matched policy sets remembered per configuration


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def policy_hash(policies: tuple[Policy, ...] | list[Policy]) -> str:
    # The canonical JSON of the list, joined from each policy's cached canonical JSON (the same bytes
    # `canonical_json([p.canonical() ...])` gives: the separators are "," and no spaces).
    text = "[" + ",".join(p.canonical_json for p in sorted(policies, key=lambda p: p.id)) + "]"
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


DEFAULT_POLICY_HASH = policy_hash(())


def loaded_policy_hash(config: ReviewConfig | None) -> tuple[str, list[str]]:
    """The hash of everything a server decides grants by (groups with their members, rules,
    policies; file order kept where it matters) and the policy ids: what a ``policy.loaded`` leaf
    records (D14). No configuration is the default policy, with its own hash."""
    if config is None:
        config = ReviewConfig()
    text = canonical_json(
        {
            "groups": [{"id": g.id, "members": sorted(g.members)} for g in config.groups],
            "rules": [r.canonical() for r in config.rules],
            "policies": [p.canonical() for p in sorted(config.policies, key=lambda p: p.id)],
        }
    )
    return "sha256:" + hashlib.sha256(text).hexdigest(), [p.id for p in config.policies]


@dataclass(frozen=True)
class PinnedRequirement:
    """One `require` block as pinned to a grant. ``id`` is `<policy id>/<require id>` (unique across
    the matched policies; the default policy's one block is `default`)."""

    id: str
    policy: str | None
    groups: tuple[str, ...]
    approve: int
    deny: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "policy": self.policy,
            "groups": list(self.groups),
            "approve": self.approve,
            "deny": self.deny,
        }


@dataclass(frozen=True)
class PinnedEscalation:
    """Escalation level ``level`` (1-based, all matched policies' levels in order of ``after``)."""

    level: int
    after: int
    policy: str
    notify: tuple[str, ...]
    add_approvers: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "after": self.after,
            "policy": self.policy,
            "notify": list(self.notify),
            "add_approvers": list(self.add_approvers),
        }


@dataclass(frozen=True)
class Review:
    """What a pending grant needs, pinned at creation. Where several policies match, their settings
    combine to the most restrictive: forbid is the union, an `allow_*` holds only if every matched
    policy allows it, `require_reason` if any requires it, the shortest `max_duration` and
    `pending_ttl`, and `on_timeout = "deny"` if any says so."""

    policy_ids: tuple[str, ...]
    policy_hash: str
    requirements: tuple[PinnedRequirement, ...]
    forbid: frozenset[str] = frozenset()
    allow_self_approval: bool = False
    allow_management_token: bool = False
    allow_delegation: bool = False
    require_reason: bool = False
    max_duration: int | None = None
    pending_ttl: int | None = None
    on_timeout: str = "expire"
    escalations: tuple[PinnedEscalation, ...] = ()

    @property
    def is_default(self) -> bool:
        return not self.policy_ids

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, to store with the grant; `review_from_dict` reads it back."""
        return {
            "policy_ids": list(self.policy_ids),
            "policy_hash": self.policy_hash,
            "requirements": [r.as_dict() for r in self.requirements],
            "forbid": sorted(self.forbid),
            "allow_self_approval": self.allow_self_approval,
            "allow_management_token": self.allow_management_token,
            "allow_delegation": self.allow_delegation,
            "require_reason": self.require_reason,
            "max_duration": self.max_duration,
            "pending_ttl": self.pending_ttl,
            "on_timeout": self.on_timeout,
            "escalations": [e.as_dict() for e in self.escalations],
        }


def review_from_dict(data: dict[str, Any]) -> Review:
    return Review(
        policy_ids=tuple(data["policy_ids"]),
        policy_hash=data["policy_hash"],
        requirements=tuple(
            PinnedRequirement(r["id"], r["policy"], tuple(r["groups"]), r["approve"], r["deny"])
            for r in data["requirements"]
        ),
        forbid=frozenset(data["forbid"]),
        allow_self_approval=data["allow_self_approval"],
        allow_management_token=data["allow_management_token"],
        allow_delegation=data["allow_delegation"],
        require_reason=data["require_reason"],
        max_duration=data["max_duration"],
        pending_ttl=data["pending_ttl"],
        on_timeout=data["on_timeout"],
        escalations=tuple(
            PinnedEscalation(
                e["level"], e["after"], e["policy"], tuple(e["notify"]), tuple(e["add_approvers"])
            )
            for e in data["escalations"]
        ),
    )


# Today's behaviour: one vote by the owner, the approver, an administrator or the management token
# (an administrator); a person may decide what they asked for themselves; delegations approve.
DEFAULT_REVIEW = Review(
    policy_ids=(),
    policy_hash=DEFAULT_POLICY_HASH,
    requirements=(PinnedRequirement(DEFAULT_REQUIREMENT_ID, None, DEFAULT_GROUPS, 1, 1),),
    allow_self_approval=True,
    allow_management_token=True,
    allow_delegation=True,
)


def pin(policies: tuple[Policy, ...]) -> Review:
    """The combined, pinned review of the matched policies (DEFAULT_REVIEW for none)."""
    if not policies:
        return DEFAULT_REVIEW
    durations = [p.max_duration for p in policies if p.max_duration is not None]
    ttls = [p.pending_ttl for p in policies if p.pending_ttl is not None]
    levels: list[tuple[Escalation, str]] = sorted(
        ((e, p.id) for p in policies for e in p.escalate), key=lambda pair: (pair[0].after, pair[1])
    )
    return Review(
        policy_ids=tuple(p.id for p in policies),
        policy_hash=policy_hash(policies),
        requirements=tuple(
            PinnedRequirement(f"{p.id}/{r.id}", p.id, r.groups, r.approve, r.deny)
            for p in policies
            for r in p.require
        ),
        forbid=frozenset(f for p in policies for f in p.forbid),
        allow_self_approval=all(p.allow_self_approval for p in policies),
        allow_management_token=all(p.allow_management_token for p in policies),
        allow_delegation=all(p.allow_delegation for p in policies),
        require_reason=any(p.require_reason for p in policies),
        max_duration=min(durations) if durations else None,
        pending_ttl=min(ttls) if ttls else None,
        on_timeout="deny" if any(p.on_timeout == "deny" for p in policies) else "expire",
        escalations=tuple(
            PinnedEscalation(i + 1, e.after, pid, e.notify, e.add_approvers)
            for i, (e, pid) in enumerate(levels)
        ),
    )


@dataclass(frozen=True)
class Evaluation:
    """The answer for one grant request. ``outcome``: auto_approve (a rule approved it; decided_by
    = ``decided_by``), auto_deny (a deny rule), needs_review (``review`` says what it needs).
    ``rules_matched`` lists the rules that decided (deny rules first); ``review`` is computed in
    every case, so a dry run also shows what the policies would have asked."""

    outcome: str
    rules_matched: tuple[str, ...]
    policies_matched: tuple[str, ...]
    reason: str | None
    review: Review

    @property
    def decided_by(self) -> str | None:
        return f"{RULE_PREFIX}{self.rules_matched[0]}" if self.outcome != NEEDS_REVIEW else None

    @property
    def policy_hash(self) -> str:
        return self.review.policy_hash

    @property
    def requirements(self) -> tuple[PinnedRequirement, ...]:
        return self.review.requirements


def _approve_rule_applies(rule: Rule, request: RequestFacts) -> bool:
    if (
        rule.max_grant_type is not None
        and GRANT_TYPE_RANK[request.grant_type] > GRANT_TYPE_RANK[rule.max_grant_type]
    ):
        return False  # above what it pre-approves: the request goes to review instead
    return rule.match.matches(request)


def evaluate(config: ReviewConfig, request: RequestFacts) -> Evaluation:
    """Deny rules (the first match is final; every matching deny rule is listed), then approve rules
    (the first match in file order decides), then the matched policies (or the default one)."""
    policies = tuple(p for p in config.policies if p.match.matches(request))
    key = tuple(p.id for p in policies)
    review = config.pinned.get(key)
    if review is None:
        review = pin(policies)
        if len(config.pinned) >= PIN_CACHE:
            config.pinned.clear()
        config.pinned[key] = review
    policy_ids = review.policy_ids
    denying = [r for r in config.deny_rules if r.match.matches(request)]
    if denying:
        return Evaluation(AUTO_DENY, tuple(r.id for r in denying), policy_ids, denying[0].reason, review)
    for rule in config.approve_rules:
        if _approve_rule_applies(rule, request):
            return Evaluation(AUTO_APPROVE, (rule.id,), policy_ids, rule.reason, review)
    return Evaluation(NEEDS_REVIEW, (), policy_ids, None, review)

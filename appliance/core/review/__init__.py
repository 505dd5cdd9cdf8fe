"""Approval policies (D13, beyond.md §1): the configuration model and its parser (`model`),
matching a request (`matching`), evaluating it to an outcome and a pinned review (`evaluate`), and
counting votes, the escalation schedule and timeouts (`votes`). Pure: no I/O, no clock, no config
loading; the store, routes, TUI, `grantd elevate` and `grantd policy test` call it (not wired yet:
docs/policies.md says what is built).
"""

from grantd.core.review.evaluate import (
    AUTO_APPROVE,
    AUTO_DENY,
    DEFAULT_POLICY_HASH,
    DEFAULT_REVIEW,
    NEEDS_REVIEW,
    Evaluation,
    PinnedEscalation,
    PinnedRequirement,
    Review,
    evaluate,
    policy_hash,
    review_from_dict,
)
from grantd.core.review.matching import ArgvPattern, Match, RequestFacts
from grantd.core.review.model import (
    Escalation,
    Group,
    Parsed,
    Policy,
    Requirement,
    ReviewConfig,
    Rule,
    parse_duration,
    parse_review_config,
)
from grantd.core.review.votes import (
    Ballot,
    GrantFacts,
    People,
    Refusal,
    Tally,
    Voter,
    VoteResult,
    cast_vote,
    eligible_people,
    escalation_level,
    escalations_due,
    next_escalation_at,
    tally,
    timeout_at,
    timeout_outcome,
)

__all__ = [
    "AUTO_APPROVE", "AUTO_DENY", "DEFAULT_POLICY_HASH", "DEFAULT_REVIEW", "NEEDS_REVIEW", "ArgvPattern", "Ballot",
    "Escalation", "Evaluation", "GrantFacts", "Group", "Match", "Parsed", "People", "PinnedEscalation",
    "PinnedRequirement", "Policy", "Refusal", "RequestFacts", "Requirement", "Review", "ReviewConfig", "Rule",
    "Tally", "VoteResult", "Voter", "cast_vote", "eligible_people", "escalation_level", "escalations_due",
    "evaluate", "next_escalation_at", "parse_duration", "parse_review_config", "policy_hash", "review_from_dict",
    "tally", "timeout_at", "timeout_outcome",
]

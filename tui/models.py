"""The grant as the console sees it: parsed once from the server's JSON (the shape in the team brief)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from grantd.core.display import escape_text

STATUSES = ("pending", "approved", "denied", "revoked", "consumed", "expired")
DECIDED_STATUSES = tuple(s for s in STATUSES if s != "pending")
GRANT_TYPES = ("once", "timed", "always")

# How far along its life a grant is. An update never moves a grant backwards, so a stale list
# response that races a newer event cannot undo what the event said.
_PROGRESS = {"pending": 0, "approved": 1, "denied": 2, "revoked": 2, "consumed": 2, "expired": 2}


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _opt_strings(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list):
        return None
    return tuple(item if isinstance(item, str) else str(item) for item in value)


@dataclass(frozen=True)
class GrantRequest:
    requester: str
    target_host: str
    audience: str
    grant_type: str
    command: tuple[str, ...] | None = None
    permissions: tuple[str, ...] | None = None
    duration: int | None = None
    reason: str | None = None
    run_as: str | None = None
    cmd_hash: str | None = None
    binding_message: str | None = None  # a CIBA agent's message to the approver (D16)

    @classmethod
    def from_json(cls, data: Any) -> GrantRequest:
        data = data if isinstance(data, dict) else {}
        return cls(
            requester=_opt_str(data.get("requester")) or "",
            target_host=_opt_str(data.get("target_host")) or "",
            audience=_opt_str(data.get("audience")) or "",
            grant_type=_word(data.get("grant_type")) or "once",
            command=_opt_strings(data.get("command")),
            permissions=_opt_strings(data.get("permissions")),
            duration=_opt_int(data.get("duration")),
            reason=_opt_str(data.get("reason")),
            run_as=_opt_str(data.get("run_as")),
            cmd_hash=_opt_str(data.get("cmd_hash")),
            binding_message=_opt_str(data.get("binding_message")),
        )


@dataclass(frozen=True)
class Grant:
    id: str
    type: str
    requester: str
    request: GrantRequest
    status: str
    created_at: int
    decided_by: str | None = None
    decided_at: int | None = None
    expires_at: int | None = None
    used_at: int | None = None
    decision_reason: str | None = None
    delegation_id: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, data: Any) -> Grant:
        """Parse a grant; raises ValueError when it has no id (nothing else is trusted to be present)."""
        if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not data["id"]:
            raise ValueError("a grant needs a string id")
        request = GrantRequest.from_json(data.get("request"))
        requester = _opt_str(data.get("requester")) or request.requester
        return cls(
            id=data["id"],
            type=_opt_str(data.get("type")) or ("command" if request.command is not None else "permissions"),
            requester=requester,
            request=request,
            status=_word(data.get("status")) or "pending",
            created_at=_opt_int(data.get("created_at")) or 0,
            decided_by=_opt_str(data.get("decided_by")),
            decided_at=_opt_int(data.get("decided_at")),
            expires_at=_opt_int(data.get("expires_at")),
            used_at=_opt_int(data.get("used_at")),
            decision_reason=_opt_str(data.get("decision_reason")),
            delegation_id=_opt_str(data.get("delegation_id")),
            raw=data,
        )

    def with_decision(self, partial: dict[str, Any]) -> Grant:
        """Apply the short `{id, status, decided_by, decided_at, expires_at}` of a decision response."""
        changes: dict[str, Any] = {}
        if isinstance(partial.get("status"), str):
            changes["status"] = _word(partial["status"])
        for name in ("decided_by", "decision_reason"):
            if name in partial:
                changes[name] = _opt_str(partial[name])
        for name in ("decided_at", "expires_at", "used_at"):
            if name in partial:
                changes[name] = _opt_int(partial[name])
        return replace(self, **changes)

    def supersedes(self, other: Grant) -> bool:
        """True when this version of the grant is at least as far along as `other`."""
        return _PROGRESS.get(self.status, 2) >= _PROGRESS.get(other.status, 2)

    @property
    def is_pending(self) -> bool:
        return self.status == "pending"

    @property
    def runs_as_root(self) -> bool:
        """A command with no run_as (elevate's default is root) or run_as "root"."""
        return self.request.command is not None and (self.request.run_as or "root") == "root"

    @property
    def review(self) -> Review | None:
        """The approval policy's review (D13) as the server sent it with the grant, or None: the
        default policy (no ``policy_ids``), or a server before issue 22."""
        return Review.from_json(self.raw.get("review"), self.raw.get("approvals"))

    @property
    def quorum(self) -> str | None:
        """``"1/2"`` for a pending grant under a policy: approvals counted of those required."""
        review = self.review
        if review is None or not self.is_pending or not review.requirements:
            return None
        got = sum(min(len(r.approvals), r.approve) for r in review.requirements)
        return f"{got}/{sum(r.approve for r in review.requirements)}"

    def keeping_review(self, older: Grant) -> Grant:
        """An event's grant carries no ``review``/``approvals``: keep those of the version we had
        while the status is the same (a decision changes them, and the next read brings them)."""
        if "review" in self.raw or "review" not in older.raw or self.status != older.status:
            return self
        raw = {**self.raw, "review": older.raw["review"], "approvals": older.raw.get("approvals")}
        return replace(self, raw=raw)

    @property
    def action_key(self) -> tuple[str, ...]:
        """What the grant would allow, for "earlier grants of the same agent and command"."""
        if self.request.command is not None:
            return ("command", self.request.cmd_hash or "\x00".join(self.request.command))
        return ("permissions", *sorted(self.request.permissions or ()))


@dataclass(frozen=True)
class AgentInfo:
    agent_id: str
    email: str
    name: str
    owner: str | None
    approver: str | None
    status: str

    @classmethod
    def from_json(cls, data: Any) -> AgentInfo:
        data = data if isinstance(data, dict) else {}
        return cls(
            agent_id=_opt_str(data.get("agent_id")) or "",
            email=_opt_str(data.get("email")) or "",
            name=_opt_str(data.get("name")) or "",
            owner=_opt_str(data.get("owner")),
            approver=_opt_str(data.get("approver")),
            status=_opt_str(data.get("status")) or "",
        )


def _word(value: Any) -> str | None:
    """A status or grant type: drawn as it is in many places, so escaped here once (D18). The
    server's values (STATUSES, GRANT_TYPES) are plain words and come through unchanged."""
    text = _opt_str(value)
    return escape_text(text) if text is not None else None


@dataclass(frozen=True)
class Requirement:
    """One requirement of a policy (D13): who approved and denied, and (from
    ``GET /api/grants/:id/reviewers``) how many are missing and who may still approve."""

    id: str
    approve: int
    deny: int
    approvals: tuple[str, ...] = ()
    denials: tuple[str, ...] = ()
    missing: int | None = None
    eligible: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: Any) -> Requirement | None:
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            return None
        eligible = data.get("eligible")
        people = (
            tuple(
                str(e["email"]) if isinstance(e, dict) and isinstance(e.get("email"), str) else str(e)
                for e in eligible
            )
            if isinstance(eligible, list)
            else ()
        )
        return cls(
            id=data["id"],
            approve=_opt_int(data.get("approve")) or 0,
            deny=_opt_int(data.get("deny")) or 0,
            approvals=_opt_strings(data.get("approvals")) or (),
            denials=_opt_strings(data.get("denials")) or (),
            missing=_opt_int(data.get("missing")),
            eligible=people,
        )


def requirements_of(value: Any) -> tuple[Requirement, ...]:
    found = (Requirement.from_json(r) for r in value) if isinstance(value, list) else ()
    return tuple(r for r in found if r is not None)


@dataclass(frozen=True)
class Vote:
    """An approving vote that counts (the grant JSON's ``approvals``): who, when, how."""

    sub: str
    at: int | None
    via: str


@dataclass(frozen=True)
class Review:
    policy_ids: tuple[str, ...]
    requirements: tuple[Requirement, ...]
    approvals: tuple[Vote, ...] = ()

    @classmethod
    def from_json(cls, review: Any, approvals: Any = None) -> Review | None:
        if not isinstance(review, dict):
            return None
        policy_ids = _opt_strings(review.get("policy_ids")) or ()
        if not policy_ids:
            return None
        votes = tuple(
            Vote(str(a.get("sub") or a.get("rule") or ""), _opt_int(a.get("at")), str(a.get("via") or ""))
            for a in (approvals if isinstance(approvals, list) else [])
            if isinstance(a, dict)
        )
        return cls(policy_ids, requirements_of(review.get("requirements")), votes)


@dataclass(frozen=True)
class Reviewers:
    """``GET /api/grants/:id/reviewers``: each requirement with who may still approve it."""

    requirements: tuple[Requirement, ...]

    @classmethod
    def from_json(cls, data: Any) -> Reviewers:
        return cls(requirements_of(data.get("requirements") if isinstance(data, dict) else None))

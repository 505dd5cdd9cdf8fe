"""The approval-policy configuration (D13) as frozen data, and its parser.

`parse_review_config(raw)` takes the parsed TOML document (it reads only `groups`, `rules` and
`policies`) and returns a `Parsed`: the typed `ReviewConfig`, or every problem at once, each with
its key path and, for a misspelt key, a "did you mean" (the messages and the scalar checks are the
config file's own: `Key` and `check_value` of `grantd.core.config_keys`). Nothing here reads files
or the clock.

Key paths look like `policies[2].require[0].approve` (0-based, in file order).

Layering: the core never imports `grantd.config`; the key and its check live in the leaf
`grantd.core.config_keys`, which `grantd.config` imports too (one wording of config errors).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from grantd.core.config_keys import Key, check_value
from grantd.core.lifecycle import GRANT_TYPES
from grantd.core.review.matching import (
    ANY_REST,
    MATCH_KEYS,
    REGEX_PREFIX,
    ArgvPattern,
    Match,
    regex_problem,
)

ID_RE = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
)  # fullmatch; ids appear in URLs, tokens and `policy:<id>`
PSEUDO_GROUPS = ("@owner", "@approver", "@admins")
FORBID_CHOICES = ("owner", "approver")
EFFECTS = ("approve", "deny")
ON_TIMEOUT = ("expire", "deny")
DURATION_RE = re.compile(r"([0-9]{1,9})([smhd])")
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION_SECONDS = 366 * 86400


# -- the model ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    id: str
    members: tuple[str, ...]  # lowercased e-mails, in file order


@dataclass(frozen=True)
class Rule:
    id: str
    effect: str  # approve | deny
    reason: str
    match: Match
    max_grant_type: str | None = None  # approve rules only: a request above it is not pre-approved

    def canonical(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "effect": self.effect,
            "reason": self.reason,
            "match": self.match.canonical(),
            "max_grant_type": self.max_grant_type,
        }


@dataclass(frozen=True)
class Requirement:
    """`[[policies.require]]`: ``approve`` distinct eligible people must approve; ``deny`` of them denies."""

    id: str
    groups: tuple[str, ...]  # group references: a [[groups]] id, @owner, @approver, @admins
    approve: int
    deny: int = 1

    def canonical(self) -> dict[str, Any]:
        return {"id": self.id, "groups": list(self.groups), "approve": self.approve, "deny": self.deny}


@dataclass(frozen=True)
class Escalation:
    """`[[policies.escalate]]`: ``after`` seconds pending, tell ``notify`` and widen eligibility by
    ``add_approvers`` (group references)."""

    after: int
    notify: tuple[str, ...] = ()
    add_approvers: tuple[str, ...] = ()

    def canonical(self) -> dict[str, Any]:
        return {"after": self.after, "notify": list(self.notify), "add_approvers": list(self.add_approvers)}


@dataclass(frozen=True)
class Policy:
    id: str
    match: Match
    require: tuple[Requirement, ...]
    description: str = ""
    forbid: tuple[str, ...] = ()  # subset of owner, approver
    allow_self_approval: bool = False
    allow_management_token: bool = False
    allow_delegation: bool = False
    require_reason: bool = False
    max_duration: int | None = None
    pending_ttl: int | None = None
    on_timeout: str = "expire"
    escalate: tuple[Escalation, ...] = ()

    def canonical(self) -> dict[str, Any]:
        """Every key with its effective value (defaults filled in, durations in seconds): two files
        that mean the same policy give the same data, and any change of meaning changes it."""
        return {
            "id": self.id,
            "description": self.description,
            "match": self.match.canonical(),
            "forbid": sorted(self.forbid),
            "allow_self_approval": self.allow_self_approval,
            "allow_management_token": self.allow_management_token,
            "allow_delegation": self.allow_delegation,
            "require_reason": self.require_reason,
            "max_duration": self.max_duration,
            "pending_ttl": self.pending_ttl,
            "on_timeout": self.on_timeout,
            "require": [r.canonical() for r in self.require],
            "escalate": [e.canonical() for e in self.escalate],
        }

    @cached_property
    def canonical_json(self) -> str:
        """`canonical()` as RFC 8785 JSON (see grantd.core.review.evaluate), computed once."""
        return json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class ReviewConfig:
    """Groups, rules and policies in file order. Empty: today's behaviour (the default policy)."""

    groups: tuple[Group, ...] = ()
    rules: tuple[Rule, ...] = ()
    policies: tuple[Policy, ...] = ()
    members: Mapping[str, frozenset[str]] = field(default_factory=dict, compare=False, repr=False)
    # matched policy ids -> their pinned review (grantd.core.review.evaluate.pin): requests fall into
    # few distinct matched sets, so each set is combined and hashed once per loaded configuration
    pinned: dict[tuple[str, ...], Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.members:
            object.__setattr__(self, "members", {g.id: frozenset(g.members) for g in self.groups})

    @property
    def deny_rules(self) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if r.effect == "deny")

    @property
    def approve_rules(self) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if r.effect == "approve")


@dataclass(frozen=True)
class Parsed:
    """The result of parsing: ``config`` when ``problems`` is empty, else None."""

    config: ReviewConfig | None
    problems: tuple[str, ...]


# -- the parser -----------------------------------------------------------------------------------

# Scalar keys, checked by the config file's own `check_value` (type, choices with "did you mean",
# minimum): the messages read exactly like every other config error.
GROUP_KEYS = {
    "id": Key(str, None, "Group id (referenced by policies)."),
    "members": Key(list, [], "People's e-mails.", item_kind=str),
}
RULE_KEYS = {
    "id": Key(str, None, "Rule id (decided_by = policy:<id>)."),
    "effect": Key(str, None, "approve or deny.", choices=EFFECTS),
    "reason": Key(str, None, "Why (shown to the requester and in the log)."),
    "match": Key(dict, {}, "What the rule matches."),
    "max_grant_type": Key(str, None, "An approve rule pre-approves up to this type.", choices=GRANT_TYPES),
}
POLICY_KEYS = {
    "id": Key(str, None, "Policy id."),
    "description": Key(str, "", "What the policy is for."),
    "match": Key(dict, {}, "What the policy matches."),
    "forbid": Key(list, [], "Who never votes: owner, approver.", item_kind=str),
    "allow_self_approval": Key(bool, False, "A person may vote on their own request (with a reason)."),
    "allow_management_token": Key(bool, False, "The management token may vote."),
    "allow_delegation": Key(bool, False, "A delegation counts as one vote by its delegator."),
    "require_reason": Key(bool, False, "Every vote needs a reason."),
    "max_duration": Key(object, None, "Longest approval."),
    "pending_ttl": Key(object, None, "How long a request waits for its quorum."),
    "on_timeout": Key(str, "expire", "What a timed-out request becomes.", choices=ON_TIMEOUT),
    "require": Key(list, [], "[[policies.require]] blocks, all must be met."),
    "escalate": Key(list, [], "[[policies.escalate]] levels."),
}
REQUIRE_KEYS = {
    "id": Key(str, None, "Requirement id."),
    "groups": Key(list, [], "Who may vote for it.", item_kind=str),
    "approve": Key(int, None, "Approvals needed.", minimum=1),
    "deny": Key(int, 1, "Denials that deny.", minimum=1),
}
ESCALATE_KEYS = {
    "after": Key(object, None, "Seconds or 90s/15m/4h/2d after the request."),
    "notify": Key(list, [], "Who is told.", item_kind=str),
    "add_approvers": Key(list, [], "Who may vote from this level on.", item_kind=str),
}
MATCH_KEY_SPECS = {name: Key(list, [], "", item_kind=None if name == "argv" else str) for name in MATCH_KEYS}


def parse_duration(value: Any) -> tuple[int | None, str | None]:
    """Seconds (a positive integer) or a string like "90s", "15m", "4h", "2d" -> (seconds, problem)."""
    if isinstance(value, bool):
        return None, f'must be seconds or a duration like "90s", "15m", "4h", "2d", got {value!r}'
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str) and (m := DURATION_RE.fullmatch(value)):
        seconds = int(m.group(1)) * DURATION_UNITS[m.group(2)]
    else:
        return None, f'must be seconds or a duration like "90s", "15m", "4h", "2d", got {value!r}'
    if seconds < 1:
        return None, f"must be at least 1 second, got {value!r}"
    if seconds > MAX_DURATION_SECONDS:
        return None, f"must be at most 366 days, got {value!r}"
    return seconds, None


class _Parser:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")

    def tables(self, raw: Mapping[str, Any], name: str) -> list[tuple[str, dict[str, Any]]]:
        value = raw.get(name, [])
        if not isinstance(value, list):
            self.add(name, f"must be a list of tables ([[{name}]])")
            return []
        out = []
        for index, table in enumerate(value):
            if isinstance(table, dict):
                out.append((f"{name}[{index}]", table))
            else:
                self.add(f"{name}[{index}]", f"must be a table ([[{name}]]), got {table!r}")
        return out

    def keys(
        self, path: str, table: Mapping[str, Any], spec: Mapping[str, Key], required: tuple[str, ...] = ()
    ) -> bool:
        """Unknown keys (with "did you mean"), missing required keys and scalar checks: True if clean."""
        before = len(self.problems)
        for name in table:
            if name not in spec:
                hint = difflib.get_close_matches(name, list(spec), n=1)
                extra = f' (did you mean "{path}.{hint[0]}"?)' if hint else ""
                self.add(f"{path}.{name}", f"unknown key{extra}")
        for name in required:
            if name not in table:
                self.add(f"{path}.{name}", "missing")
        for name, key in spec.items():
            if name in table and key.kind is not object:
                check_value(f"{path}.{name}", key, table[name], self.problems)
        return len(self.problems) == before

    def identifier(self, path: str, value: Any, seen: dict[str, str], what: str) -> str | None:
        if not isinstance(value, str):
            return None  # reported by the type check
        if not ID_RE.fullmatch(value):
            self.add(
                path,
                f"must be 1-64 letters, digits, '.', '_' or '-' (starting with a letter or digit), got {value!r}",
            )
            return None
        if value in seen:
            self.add(path, f"{value!r} is already the id of {seen[value]}")
            return None
        seen[value] = what
        return value

    def duration(self, path: str, table: Mapping[str, Any], name: str) -> int | None:
        if name not in table:
            return None
        seconds, problem = parse_duration(table[name])
        if problem:
            self.add(f"{path}.{name}", problem)
        return seconds

    def group_refs(self, path: str, refs: Any, groups: Mapping[str, Group]) -> tuple[str, ...]:
        if not isinstance(refs, list):
            return ()
        out = []
        for index, ref in enumerate(refs):
            if not isinstance(ref, str):
                continue  # reported by the type check
            if ref in groups or ref in PSEUDO_GROUPS:
                out.append(ref)
                continue
            hint = difflib.get_close_matches(ref, [*groups, *PSEUDO_GROUPS], n=1)
            extra = f' (did you mean "{hint[0]}"?)' if hint else ""
            if ref.startswith("@"):
                self.add(
                    f"{path}[{index}]",
                    f"unknown pseudo-group {ref!r}: use @owner, @approver or @admins{extra}",
                )
            else:
                self.add(f"{path}[{index}]", f"unknown group {ref!r}: define it in a [[groups]] table{extra}")
        return tuple(out)

    # -- match tables --

    def match(self, path: str, table: Any) -> Match:
        if not isinstance(table, dict):
            return Match()  # reported by the type check
        self.keys(path, table, MATCH_KEY_SPECS)
        built: dict[str, Any] = {}
        for name in MATCH_KEYS:
            if name not in table or not isinstance(table[name], list):
                continue
            where, value = f"{path}.{name}", table[name]
            if not value:
                self.add(where, "must not be empty (leave the key out to match anything)")
                continue
            if name == "argv":
                patterns = [
                    p for i, item in enumerate(value) if (p := self.argv_pattern(f"{where}[{i}]", item))
                ]
                if len(patterns) == len(value):
                    built[name] = tuple(patterns)
                continue
            if not all(isinstance(v, str) for v in value):
                continue  # reported by the type check
            if any(not v for v in value):
                self.add(where, "a pattern must not be empty")
                continue
            if name == "grant_types":
                bad = [v for v in value if v not in GRANT_TYPES]
                if bad:
                    hint = difflib.get_close_matches(bad[0], GRANT_TYPES, n=1)
                    extra = f' (did you mean "{hint[0]}"?)' if hint else ""
                    self.add(where, f"must hold only {', '.join(GRANT_TYPES)}, got {bad[0]!r}{extra}")
                    continue
            built[name] = tuple(v.lower() if name in ("target_host", "agents") else v for v in value)
        return Match.build(**built)

    def argv_pattern(self, path: str, item: Any) -> ArgvPattern | None:
        if not isinstance(item, list) or not all(isinstance(e, str) for e in item):
            self.add(
                path,
                f'must be a list of strings, one per argument, like ["systemctl", "restart", "*"], got {item!r}',
            )
            return None
        if not item or item == [ANY_REST]:
            self.add(
                path, 'must name at least the program (a pattern of only "**" would match every command)'
            )
            return None
        ok = True
        for index, element in enumerate(item):
            where = f"{path}[{index}]"
            if element == ANY_REST:
                if index != len(item) - 1:
                    self.add(where, '"**" (any further arguments) may only be the last element')
                    ok = False
            elif element.startswith(REGEX_PREFIX):
                problem = regex_problem(element[len(REGEX_PREFIX) :])
                if problem:
                    self.add(where, problem)
                    ok = False
            elif not element or any(not alt for alt in element.split("|")):
                self.add(
                    where, f"an empty glob or alternative matches only an empty argument; got {element!r}"
                )
                ok = False
        return ArgvPattern.build(item) if ok else None

    # -- the tables --

    def groups(self, raw: Mapping[str, Any]) -> dict[str, Group]:
        out: dict[str, Group] = {}
        seen: dict[str, str] = {}
        for path, table in self.tables(raw, "groups"):
            self.keys(path, table, GROUP_KEYS, required=("id",))
            group_id = self.identifier(f"{path}.id", table.get("id"), seen, path)
            members = table.get("members", [])
            good = []
            if isinstance(members, list):
                for index, member in enumerate(members):
                    if not isinstance(member, str):
                        continue
                    if (
                        "@" not in member
                        or member.strip() != member
                        or len(member) > 254
                        or member.startswith("@")
                    ):
                        self.add(f"{path}.members[{index}]", f"must be a person's e-mail, got {member!r}")
                    else:
                        good.append(member.lower())
            if group_id is not None:
                out[group_id] = Group(group_id, tuple(dict.fromkeys(good)))
        return out

    def rules(self, raw: Mapping[str, Any], seen: dict[str, str]) -> list[Rule]:
        out = []
        for path, table in self.tables(raw, "rules"):
            clean = self.keys(path, table, RULE_KEYS, required=("id", "effect", "reason", "match"))
            rule_id = self.identifier(f"{path}.id", table.get("id"), seen, path)
            reason = table.get("reason")
            if isinstance(reason, str) and not reason.strip():
                self.add(
                    f"{path}.reason", "must not be empty (it is what the requester and the log are told)"
                )
                clean = False
            match = self.match(f"{path}.match", table.get("match", {}))
            if "match" in table and isinstance(table["match"], dict) and not table["match"]:
                self.add(
                    f"{path}.match",
                    "must hold at least one key (a rule that matches everything is a mistake)",
                )
                clean = False
            if table.get("effect") == "deny" and "max_grant_type" in table:
                self.add(f"{path}.max_grant_type", "only an approve rule takes max_grant_type")
                clean = False
            if clean and rule_id is not None and not match.is_empty:
                out.append(Rule(rule_id, table["effect"], reason.strip(), match, table.get("max_grant_type")))  # type: ignore[union-attr]
        return out

    def policies(
        self, raw: Mapping[str, Any], groups: Mapping[str, Group], seen: dict[str, str]
    ) -> list[Policy]:
        out = []
        for path, table in self.tables(raw, "policies"):
            before = len(self.problems)
            self.keys(path, table, POLICY_KEYS, required=("id", "require"))
            policy_id = self.identifier(f"{path}.id", table.get("id"), seen, path)
            match = self.match(f"{path}.match", table.get("match", {}))
            forbid = table.get("forbid", [])
            if isinstance(forbid, list):
                for index, item in enumerate(forbid):
                    if isinstance(item, str) and item not in FORBID_CHOICES:
                        hint = difflib.get_close_matches(item, FORBID_CHOICES, n=1)
                        extra = f' (did you mean "{hint[0]}"?)' if hint else ""
                        self.add(f"{path}.forbid[{index}]", f"must be owner or approver, got {item!r}{extra}")
            max_duration = self.duration(path, table, "max_duration")
            pending_ttl = self.duration(path, table, "pending_ttl")
            require = self.requirements(path, table.get("require"), groups)
            escalate = self.escalations(path, table.get("escalate"), groups, pending_ttl)
            if len(self.problems) == before and policy_id is not None:
                out.append(
                    Policy(
                        id=policy_id,
                        match=match,
                        require=require,
                        description=table.get("description", ""),
                        forbid=tuple(dict.fromkeys(forbid)),
                        allow_self_approval=table.get("allow_self_approval", False),
                        allow_management_token=table.get("allow_management_token", False),
                        allow_delegation=table.get("allow_delegation", False),
                        require_reason=table.get("require_reason", False),
                        max_duration=max_duration,
                        pending_ttl=pending_ttl,
                        on_timeout=table.get("on_timeout", "expire"),
                        escalate=escalate,
                    )
                )
        return out

    def requirements(self, path: str, tables: Any, groups: Mapping[str, Group]) -> tuple[Requirement, ...]:
        if not isinstance(tables, list):
            return ()  # missing or not a list: reported already
        if not tables:
            self.add(f"{path}.require", "needs at least one [[policies.require]] block (who must approve)")
            return ()
        out = []
        seen: dict[str, str] = {}
        for index, table in enumerate(tables):
            where = f"{path}.require[{index}]"
            if not isinstance(table, dict):
                self.add(where, f"must be a table ([[policies.require]]), got {table!r}")
                continue
            clean = self.keys(where, table, REQUIRE_KEYS, required=("id", "groups", "approve"))
            req_id = self.identifier(f"{where}.id", table.get("id"), seen, where)
            refs = self.group_refs(f"{where}.groups", table.get("groups"), groups)
            if isinstance(table.get("groups"), list) and not table["groups"]:
                self.add(
                    f"{where}.groups",
                    "must name at least one group (a [[groups]] id, @owner, @approver or @admins)",
                )
                clean = False
            approve = table.get("approve")
            if (
                clean
                and refs
                and len(refs) == len(table["groups"])
                and not any(r in PSEUDO_GROUPS for r in refs)
            ):
                people = {m for r in refs for m in groups[r].members}
                if len(people) < approve:  # type: ignore[operator]
                    self.add(
                        f"{where}.approve",
                        f"can never be met: {approve} approvals from {', '.join(refs)}, "
                        f"which have {len(people)} member(s)",
                    )
                    clean = False
            if clean and req_id is not None and len(refs) == len(table["groups"]):
                out.append(Requirement(req_id, refs, approve, table.get("deny", 1)))  # type: ignore[arg-type]
        return tuple(out)

    def escalations(
        self, path: str, tables: Any, groups: Mapping[str, Group], pending_ttl: int | None
    ) -> tuple[Escalation, ...]:
        if not isinstance(tables, list):
            return ()
        out = []
        for index, table in enumerate(tables):
            where = f"{path}.escalate[{index}]"
            if not isinstance(table, dict):
                self.add(where, f"must be a table ([[policies.escalate]]), got {table!r}")
                continue
            clean = self.keys(where, table, ESCALATE_KEYS, required=("after",))
            after = self.duration(where, table, "after")
            notify = self.group_refs(f"{where}.notify", table.get("notify", []), groups)
            add = self.group_refs(f"{where}.add_approvers", table.get("add_approvers", []), groups)
            if not table.get("notify") and not table.get("add_approvers"):
                self.add(where, "does nothing: give notify, add_approvers or both")
                clean = False
            if after is not None and pending_ttl is not None and after >= pending_ttl:
                self.add(
                    f"{where}.after",
                    f"{after} s is not before the policy's pending_ttl ({pending_ttl} s): it would never happen",
                )
                clean = False
            if (
                clean
                and after is not None
                and len(notify) == len(table.get("notify", []))
                and len(add) == len(table.get("add_approvers", []))
            ):
                out.append(Escalation(after, notify, add))
        return tuple(sorted(out, key=lambda e: e.after))


def parse_review_config(raw: Mapping[str, Any]) -> Parsed:
    """The `[[groups]]`, `[[rules]]` and `[[policies]]` of a parsed config document, checked."""
    parser = _Parser()
    groups = parser.groups(raw)
    seen: dict[str, str] = {}  # rule and policy ids share one space: `policy:<id>` must name one thing
    rules = parser.rules(raw, seen)
    policies = parser.policies(raw, groups, seen)
    if parser.problems:
        return Parsed(None, tuple(parser.problems))
    return Parsed(ReviewConfig(tuple(groups.values()), tuple(rules), tuple(policies)), ())

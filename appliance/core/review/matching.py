"""Matching a grant request against a `match` table (D13): per-key globs, and argv patterns argument
by argument. Patterns are compiled once, at config load; matching is a handful of regex calls.

- `target_host`, `run_as`, `audience`, `agents`: fnmatch globs (`*`, `?`, `[...]`). Host names and
  agent e-mails compare case-insensitively (DNS and e-mail are), `run_as` and `audience` exactly.
  `agents` matches the agent's e-mail or its id.
- `grant_types`: a subset of once, timed, always.
- `argv`: a list of patterns; a pattern is a list with one element per argument: a glob, `a|b`
  alternatives (each a glob), `re:<regex>` (fullmatch, at most 200 characters), or as the last
  element `"**"`: any further arguments, none included. A joined command string is never matched,
  so `["systemctl", "restart", "*"]` cannot match `systemctl restart nginx; reboot` as two words
  would, nor an extra argument.
"""

from __future__ import annotations

import fnmatch
import re
import re._constants as constants  # the stdlib's parser of patterns (sre_parse's home since 3.11)
import re._parser as parser
from dataclasses import dataclass, field

REGEX_PREFIX = "re:"
MAX_REGEX = 200
ANY_REST = "**"


def glob_regex(globs: tuple[str, ...], *, fold_case: bool) -> re.Pattern[str]:
    """One compiled regex that fully matches any of ``globs`` (fnmatch semantics)."""
    flags = re.IGNORECASE if fold_case else 0
    return re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in globs), flags)


def _children(op: object, arg: object) -> list[object]:
    """The sub-patterns of one parsed item (groups, alternatives, repeats, atomic groups)."""
    if op in (constants.MAX_REPEAT, constants.MIN_REPEAT, constants.POSSESSIVE_REPEAT):
        return [arg[2]]  # type: ignore[index]
    if op is constants.SUBPATTERN:
        return [arg[-1]]  # type: ignore[index]
    if op is constants.BRANCH:
        return list(arg[1])  # type: ignore[index]
    if op is constants.ATOMIC_GROUP:
        return [arg]
    return []


def _repeats(items: object, *, inside: bool) -> bool:
    """Does a backtracking repeat (more than once) hold another one (or, ``inside``, any one)?"""
    for op, arg in items:  # type: ignore[attr-defined]
        if op in (constants.MAX_REPEAT, constants.MIN_REPEAT) and arg[1] > 1:
            if inside or _repeats(arg[2], inside=True):
                return True
        elif op in (constants.POSSESSIVE_REPEAT, constants.ATOMIC_GROUP):
            continue  # never backtracks
        if any(_repeats(child, inside=inside) for child in _children(op, arg)):
            return True
    return False


def nested_quantifier(pattern: str) -> bool:
    """True when a repeated part of ``pattern`` itself holds a repeat (`(a+)+`, `(\\w*,)*`...): the
    shape behind catastrophic backtracking. Python's `re` has no timeout, so such patterns are
    refused at load (beyond.md §1). Possessive repeats and atomic groups never backtrack: allowed."""
    return _repeats(parser.parse(pattern), inside=False)


def regex_problem(pattern: str) -> str | None:
    """Why a `re:` pattern (without its prefix) is refused, or None."""
    if len(pattern) > MAX_REGEX:
        return f"the regular expression is longer than {MAX_REGEX} characters ({len(pattern)})"
    if not pattern:
        return "the regular expression is empty"
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"the regular expression does not compile: {exc}"
    except RecursionError:
        return "the regular expression nests too deeply"
    if nested_quantifier(pattern):
        return "the regular expression repeats a repeated part (like (a+)+), which can backtrack for ever; rewrite it"
    return None


def element_regex(element: str) -> re.Pattern[str]:
    """One argv element as a compiled regex used with fullmatch: `re:` as written, else its `|`
    alternatives as globs."""
    if element.startswith(REGEX_PREFIX):
        return re.compile(element[len(REGEX_PREFIX) :])
    return glob_regex(tuple(element.split("|")), fold_case=False)


@dataclass(frozen=True)
class ArgvPattern:
    """One `match.argv` pattern: one element per argument, and whether `"**"` ends it."""

    elements: tuple[str, ...]  # as written, without the final "**"
    any_rest: bool
    compiled: tuple[re.Pattern[str], ...] = field(compare=False, repr=False, default=())

    @classmethod
    def build(cls, written: list[str] | tuple[str, ...]) -> ArgvPattern:
        any_rest = bool(written) and written[-1] == ANY_REST
        elements = tuple(written[:-1] if any_rest else written)
        return cls(elements, any_rest, tuple(element_regex(e) for e in elements))

    def written(self) -> list[str]:
        return [*self.elements, ANY_REST] if self.any_rest else list(self.elements)

    def matches(self, argv: tuple[str, ...]) -> bool:
        n = len(self.elements)
        if len(argv) < n or (len(argv) > n and not self.any_rest):
            return False
        for regex, arg in zip(self.compiled, argv, strict=False):
            if regex.fullmatch(arg) is None:
                return False
        return True


MATCH_KEYS = ("target_host", "run_as", "audience", "agents", "grant_types", "argv")
GLOB_KEYS = ("target_host", "run_as", "audience", "agents")
FOLDED_KEYS = frozenset({"target_host", "agents"})
DEFAULT_RUN_AS = "root"  # what `grantd elevate` runs a grant without run_as as


@dataclass(frozen=True)
class RequestFacts:
    """What matching looks at in a grant request. ``argv`` is None for a permissions grant (no
    command): then any pattern under `match.argv` fails to match. ``run_as`` absent is root, as
    `grantd elevate` runs it."""

    target_host: str
    audience: str
    agent_email: str
    agent_id: str
    grant_type: str
    argv: tuple[str, ...] | None = None
    run_as: str = DEFAULT_RUN_AS
    duration: int | None = None


@dataclass(frozen=True)
class Match:
    """A parsed `match` table; a key that is None matches anything."""

    target_host: tuple[str, ...] | None = None
    run_as: tuple[str, ...] | None = None
    audience: tuple[str, ...] | None = None
    agents: tuple[str, ...] | None = None
    grant_types: tuple[str, ...] | None = None
    argv: tuple[ArgvPattern, ...] | None = None
    _globs: tuple[tuple[str, re.Pattern[str]], ...] = field(compare=False, repr=False, default=())

    @classmethod
    def build(cls, **keys: tuple[str, ...] | tuple[ArgvPattern, ...] | None) -> Match:
        globs = tuple(
            (name, glob_regex(value, fold_case=name in FOLDED_KEYS))  # type: ignore[arg-type]
            for name in GLOB_KEYS
            if (value := keys.get(name)) is not None
        )
        return cls(**keys, _globs=globs)  # type: ignore[arg-type]

    @property
    def is_empty(self) -> bool:
        return all(getattr(self, name) is None for name in MATCH_KEYS)

    def matches(self, request: RequestFacts) -> bool:
        if self.grant_types is not None and request.grant_type not in self.grant_types:
            return False
        for name, regex in self._globs:
            if name == "agents":
                if regex.match(request.agent_email) is None and regex.match(request.agent_id) is None:
                    return False
            elif regex.match(getattr(request, name)) is None:
                return False
        if self.argv is not None:
            if request.argv is None:
                return False
            argv = request.argv
            return any(pattern.matches(argv) for pattern in self.argv)
        return True

    def canonical(self) -> dict[str, object]:
        """The table as data for the policy hash: every key present, null when absent."""
        out: dict[str, object] = {}
        for name in MATCH_KEYS:
            value = getattr(self, name)
            if value is None:
                out[name] = None
            elif name == "argv":
                out[name] = [p.written() for p in value]
            else:
                out[name] = list(value)
        return out

"""Parts of the config file declared outside the schema: by a plugin (the ``config_sections`` hook
of grantd.hookspecs) or by a built-in parser (the approval policies of grantd.core.review).

A `ConfigSection` owns some top-level keys (``notify``; or ``groups``, ``rules`` and ``policies``):
they are then no "unknown key", and its ``parse`` checks them. ``parse`` gets the whole parsed
document (a section may span several keys, e.g. policies naming groups) and returns its value and
its problems, each starting with the key path (``policies[2].require[0].approve: ...``; the key
check and its wording for scalars: grantd.core.config_keys). Every problem is reported with the
rest (`grantd config validate`, the start of `grantd serve`); the value of a section without
problems is ``Config.extra[name]``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grantd.core.review.model import parse_review_config


@dataclass(frozen=True)
class ConfigSection:
    name: str  # the key of its value in Config.extra
    keys: tuple[str, ...]  # the top-level keys of the file it owns
    parse: Callable[[Mapping[str, Any]], tuple[Any, Sequence[str]]]  # document -> (value, problems)
    help: str = ""


def _review(raw: Mapping[str, Any]) -> tuple[Any, Sequence[str]]:
    parsed = parse_review_config(raw)
    if parsed.problems:
        return None, parsed.problems
    # Enforced by the grants service (grantd.services.grants through grantd.services.review).
    return parsed.config, ()


# The approval policies (D13, docs/policies.md): the first user of this mechanism.
REVIEW = ConfigSection(
    "review",
    ("groups", "rules", "policies"),
    _review,
    "Approval policies: groups of approvers, rules and policies (docs/policies.md)",
)

BUILTIN_SECTIONS: tuple[ConfigSection, ...] = (REVIEW,)


def owners(
    sections: Sequence[ConfigSection], schema_keys: Sequence[str]
) -> tuple[dict[str, ConfigSection], list[str]]:
    """Which section owns each declared key, and the clashes (a key of the schema, or owned twice)."""
    owned: dict[str, ConfigSection] = {}
    problems = []
    for section in sections:
        for key in section.keys:
            if key in schema_keys:
                problems.append(
                    f"{key}: declared by the config section {section.name!r} but a key of grantd's own"
                )
            elif key in owned:
                problems.append(f"{key}: declared by both {owned[key].name!r} and {section.name!r}")
            else:
                owned[key] = section
    return owned, problems

"""One configuration key and its check: the words every config mistake is reported in.

A leaf (standard library only) so that both the config package (grantd.config, the server's
file) and the parsers of sections declared elsewhere (the approval policies of grantd.core.review,
a plugin's own section) report mistakes the same way, without the core importing grantd.config.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Key:
    """One configuration key: its type, default and meaning (the meaning is written into generated configs)."""

    kind: type
    default: Any
    help: str
    secret: bool = False
    choices: tuple[str, ...] | None = None
    item_kind: type | None = None  # for lists
    minimum: int | None = None
    maximum: int | None = None
    check: Callable[[Any], str | None] | None = None
    example: str | None = None  # written, commented out, below the key in generated configs


def type_name(kind: type) -> str:
    return {str: "a string", int: "an integer", bool: "true or false", list: "a list", dict: "a table"}[kind]


def check_value(path: str, key: Key, value: Any, problems: list[str]) -> None:
    if key.kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        problems.append(f"{path}: must be {type_name(int)}, got {value!r}")
        return
    if key.kind is not int and not isinstance(value, key.kind):
        problems.append(f"{path}: must be {type_name(key.kind)}, got {value!r}")
        return
    if key.kind is list and key.item_kind is not None:
        bad = [v for v in value if not isinstance(v, key.item_kind)]
        if bad:
            problems.append(f"{path}: every item must be {type_name(key.item_kind)}, got {bad[0]!r}")
            return
    if key.kind is str and not key.secret and value == "" and key.default not in ("", None):
        problems.append(f"{path}: must not be empty")
        return
    if key.choices and value not in key.choices:
        hint = difflib.get_close_matches(str(value), key.choices, n=1)
        extra = f' (did you mean "{hint[0]}"?)' if hint else ""
        problems.append(f"{path}: must be one of {', '.join(key.choices)}, got {value!r}{extra}")
        return
    if key.minimum is not None and value < key.minimum:
        problems.append(f"{path}: must be at least {key.minimum}, got {value}")
    if key.maximum is not None and value > key.maximum:
        problems.append(f"{path}: must be at most {key.maximum}, got {value}")
    if key.check and value is not None:
        msg = key.check(value)
        if msg:
            problems.append(f"{path}: {msg}")

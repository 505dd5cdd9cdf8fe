"""When a grant or a delegation has lapsed: the one place that says so (D6, D7).

A record lapses into ``expired`` without anybody writing it: an approved grant past its
``expires_at``, a pending grant older than ``grants.pending_ttl``, an active delegation past its
``expires_at``. Readers apply that before anything else (D6). The rule is data: a ``Lapse`` maps a
stored status to the column and the cutoff at or below which a record in that status has lapsed.
Python readers use ``Lapse.status_of``; storage backends translate the same mapping into their
query language (see appliance/store/), so no backend writes the rule down a second time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

EXPIRED = "expired"
GRANT_TYPES = ("once", "timed", "always")


@dataclass(frozen=True)
class Lapse:
    """``{stored_status: (column, cutoff)}``: a record whose status is the key and whose column is
    not null and at or below the cutoff has lapsed and reads as ``expired``."""

    cutoffs: Mapping[str, tuple[str, int]]

    def lapsed(self, record: Mapping[str, Any]) -> bool:
        rule = self.cutoffs.get(str(record["status"]))
        if rule is None:
            return False
        value = record.get(rule[0])
        return value is not None and value <= rule[1]

    def status_of(self, record: Mapping[str, Any]) -> str:
        """The status as anyone reading the record at this instant must see it."""
        return EXPIRED if self.lapsed(record) else str(record["status"])


def grant_lapse(now_ms: int, pending_ttl_s: int) -> Lapse:
    return Lapse(
        {"approved": ("expires_at", now_ms), "pending": ("created_at", now_ms - pending_ttl_s * 1000)}
    )


def delegation_lapse(now_ms: int) -> Lapse:
    return Lapse({"active": ("expires_at", now_ms)})

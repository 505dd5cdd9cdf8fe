"""Rows and records, shared by the backends: JSON columns, flags, case folding, pages of rows.

A backend reads a row as a dict of column -> value; these turn it into the record the contract
returns (``grantd.store.records``), the same way in every backend.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar, cast

from grantd.core import json_codec
from grantd.store.records import (
    PERSON_COLUMNS,
    VOTE_COLUMNS,
    Delegation,
    Grant,
    GrantEvent,
    GrantEventRow,
    GrantReview,
    GrantView,
    PasskeyCredential,
    Person,
    RegistrationUrl,
    ReviewGroup,
    SigningKey,
    Vote,
)

Row = TypeVar("Row")


def from_json(text: str) -> Any:
    """The value of JSON a backend stored (``grantd.core.json_codec.loads``: orjson, with
    ``json.loads``' answers and errors for anything orjson refuses)."""
    return json_codec.loads(text)


def grant_event(row: GrantEventRow) -> GrantEvent:
    """The event of a stored row ``(seq, event, grant_id, requester, created_at, grant_json)``, its
    snapshot decoded (every backend's ``events_after``, and the decision log's sequencer when a
    snapshot's values must be made safe: ``grantd.services.audit_leaves``)."""
    seq, event, grant_id, requester, created_at, text = row
    grant = snapshot_of(text)
    return {
        "seq": seq,
        "event": event,
        "grant_id": grant_id,
        "requester": requester,
        "created_at": created_at,
        "grant": grant,
    }


def snapshot_of(text: str, *, scanned: bool = True) -> Any:
    """A grant event's stored snapshot decoded (``grant_event``'s; the decision log's sequencer's
    straight from the row, ``grantd.services.audit_leaves.row_leaves``). ``scanned=False``: by
    ``json_codec.loads_unscanned`` (an integer beyond 64 bits as a float), for the sequencer's first
    attempt only."""
    grant = from_json(text) if scanned else json_codec.loads_unscanned(text)
    # SQLite's events recorded before its migration 3 lack these two
    if "reuse_key" not in grant or "requester_id" not in grant:
        grant.setdefault("requester_id", grant["requester"])
        grant.setdefault("reuse_key", None)
    return grant


def to_json(value: Any) -> str:
    """The JSON text a backend stores (compact: the same bytes in every backend)."""
    return json_codec.dumps(value)


def event_json(row: dict[str, Any], columns: Any) -> str:
    """A grant event's snapshot as stored JSON: the grant's columns, and what the event announces
    (``escalation_level``, ``vote``, ``pinned_review``). A request still in its stored JSON text is
    spliced in as it is, not parsed and written again (the grant write path pays for every event:
    issue 23); readers parse the whole either way."""
    snapshot = {k: row[k] for k in columns}
    for extra in ("escalation_level", "vote", "pinned_review"):
        if extra in row:
            snapshot[extra] = row[extra]
    request = snapshot.pop("request")
    if isinstance(request, str):
        return to_json(snapshot)[:-1] + ',"request":' + request + "}"
    snapshot["request"] = request
    return to_json(snapshot)


def fold(value: Any) -> Any:
    """Case folding for search, the same in SQL as in Python (SQLite's lower() is ASCII-only)."""
    return value.casefold() if isinstance(value, str) else value


def page_rows(rows: list[Row], limit: int) -> tuple[list[Row], bool]:
    """A page from ``limit + 1`` rows read newest first: the first ``limit``, and whether there are more."""
    return rows[:limit], len(rows) > limit


def key_row(row: dict[str, Any]) -> SigningKey:
    row["public_jwk"] = from_json(row["public_jwk"])
    return cast(SigningKey, row)


def grant_row(row: dict[str, Any]) -> Grant:
    row["request"] = from_json(row["request"]) if isinstance(row["request"], str) else row["request"]
    return cast(Grant, row)


def pinned_event_row(row: Any, event: str, review: dict[str, Any] | None) -> Any:
    """The row a create's event records: ``grant.created`` also carries the pinned review (D13), so
    the decision log's leaf holds what the grant's approval must meet (D14)."""
    if review is None or event != "grant.created":
        return row
    return {**row, "pinned_review": review}


def vote_row(row: Any) -> Vote:
    vote = {c: row.get(c) for c in VOTE_COLUMNS}
    vote["management"] = bool(vote["management"])
    if isinstance(vote["evidence"], str):
        vote["evidence"] = from_json(vote["evidence"])
    if vote["evidence"] is None:
        del vote["evidence"]  # only a vote from a review link has evidence (D15)
    return cast(Vote, vote)


def review_rows(rows: Iterable[Any]) -> list[GrantReview]:
    """``review_row`` of many rows, each distinct review text parsed once: grants pinned to the same
    policy set carry the same review, and a sweep may read hundreds of them (issue 27). The
    records then share that parsed review, which nobody changes (``GrantStore.due_reviews``)."""
    parsed: dict[str, Any] = {}
    return [review_row(row, _parsed_once(parsed, row["review_json"])) for row in rows]


def review_group_rows(rows: Iterable[Any]) -> list[ReviewGroup]:
    """``GrantStore.pending_review_groups``' records from rows of ``review_json``,
    ``escalation_level`` and ``grant_ids`` (a JSON array as text, or a list), each distinct review
    text parsed once (it may come at several levels)."""
    parsed: dict[str, Any] = {}
    groups: list[ReviewGroup] = []
    for row in rows:
        ids = row["grant_ids"]
        groups.append(
            {
                "review": _parsed_once(parsed, row["review_json"]),
                "escalation_level": int(row["escalation_level"]),
                "grant_ids": from_json(ids) if isinstance(ids, str) else list(ids),
            }
        )
    return groups


def _parsed_once(parsed: dict[str, Any], text: str) -> Any:
    """``text`` parsed, or what ``parsed`` (text -> its parse) already holds for it."""
    found = parsed.get(text)
    if found is None:
        found = parsed[text] = from_json(text)
    return found


def review_row(row: Any, review: dict[str, Any] | None = None) -> GrantReview:
    """``review``: the row's review parsed already (``review_rows``)."""
    return cast(
        GrantReview,
        {
            "grant_id": row["grant_id"],
            "review": from_json(row["review_json"]) if review is None else review,
            "escalation_level": int(row["escalation_level"]),
        },
    )


def view_row(row: dict[str, Any]) -> GrantView:
    """``Grants.view``'s answer from its row: the grant's columns and ``_review_json``,
    ``_review_level`` (NULL: no pinned review) and ``_votes`` (a JSON array of vote rows with
    their ``seq``, as text or parsed; put in recorded order here) and ``_agent`` (the requesting
    agent's row as a JSON object, NULL: none), as each backend's one statement reads them."""
    review_json, level, votes = row.pop("_review_json"), row.pop("_review_level"), row.pop("_votes")
    agent = row.pop("_agent")
    review = (
        review_row({"grant_id": row["id"], "review_json": review_json, "escalation_level": level})
        if review_json is not None
        else None
    )
    found = from_json(votes) if isinstance(votes, str) else votes
    votes_in_order = [vote_row(v) for v in sorted(found or (), key=lambda v: v["seq"])]
    return grant_row(row), review, votes_in_order, from_json(agent) if isinstance(agent, str) else agent


def delegation_row(row: dict[str, Any]) -> Delegation:
    row["scopes"] = from_json(row["scopes"])
    return cast(Delegation, row)


def person_row(row: Any) -> Person:
    person = {c: row[c] for c in PERSON_COLUMNS}  # a row may carry more (PostgreSQL's fold columns)
    person["admin"] = bool(person["admin"])
    return cast(Person, person)


def credential_row(row: Any) -> PasskeyCredential:
    credential = dict(row)
    credential["transports"] = from_json(credential["transports"])
    credential["backed_up"] = bool(credential["backed_up"])
    return cast(PasskeyCredential, credential)


def registration_row(row: Any) -> RegistrationUrl:
    registration = dict(row)
    registration["admin"] = bool(registration["admin"])
    return cast(RegistrationUrl, registration)

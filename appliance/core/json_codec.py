"""The one place grantd's hot paths turn values into JSON and back: orjson, with the standard library
behind it for what orjson refuses.

Why: every grant write encodes its event's snapshot, every read decodes stored JSON, every answer is
encoded, and the decision log's sequencer decodes each event and encodes each leaf (issues 23 and
27). orjson does each of these 3–9 times faster than the standard library's C encoder (a leaf
3.0 → 0.34 µs, a grant snapshot decoded 2.6 → 0.9 µs, measured in docs/performance.md).

What differs from ``json`` and how it is kept out of sight:

- orjson writes a non-ASCII character as UTF-8 (``é`` as the bytes C3 A9), the standard library by
  default as an escape (``\\u00e9``): the same JSON text to every reader. Stored JSON is only
  ever read back by ``loads`` (never compared as text), so old rows and new rows read alike.
- orjson refuses what is not plain JSON data the way the standard library would write it: strings
  with lone surrogates (not UTF-8), integers beyond 64 bits, non-string keys. Those go to the
  standard library, which writes them exactly as before; so nothing that was accepted is refused.
- orjson also writes some types the standard library refuses (dataclasses, datetimes, UUIDs,
  enums). Dataclasses and datetimes are passed through to ``default`` (so they fail as they
  did); the callers give only plain values (leaves are checked by type before they are
  encoded: ``grantd.core.tlog.leaves``).
- orjson writes NaN and ±Infinity as ``null`` (they are not JSON, RFC 8259; the standard library
  writes ``NaN``, which a JSON parser such as JavaScript's refuses). None reaches a writer: request
  bodies are read with ``strict``, which refuses them.
- ``loads`` sends what orjson refuses (NaN, lone surrogate escapes, text that is not UTF-8) to the
  standard library, which answers or raises exactly as ``json.loads`` always did. orjson reads an
  integer beyond 64 bits as a float (a silent change of value), so text with a run of 19 or more
  digits anywhere (in a string too: a false alarm only costs the slower reader) goes to the
  standard library at once.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_PLAIN = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
_SORTED_STRICT = _PLAIN | orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER


def _refuse(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def dumps_bytes(value: Any) -> bytes:
    """Compact JSON as UTF-8 bytes (what an HTTP answer carries)."""
    try:
        return orjson.dumps(value, default=_refuse, option=_PLAIN)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(value, separators=(",", ":")).encode("ascii")  # escaped: valid UTF-8 always


def dumps(value: Any) -> str:
    """Compact JSON text (what a backend stores)."""
    try:
        return orjson.dumps(value, default=_refuse, option=_PLAIN).decode("utf-8")
    except TypeError:
        return json.dumps(value, separators=(",", ":"))


def dumps_sorted(value: Any) -> bytes | None:
    """Compact JSON with sorted keys as UTF-8 bytes, or None when orjson refuses the value, an
    integer outside RFC 8785's safe range ±(2^53 − 1) included (the caller decides what then:
    ``grantd.core.tlog.leaves.canonical`` asks the rfc8785 library)."""
    try:
        return orjson.dumps(value, default=_refuse, option=_SORTED_STRICT)
    except TypeError:
        return None


# A run of 19 digits, found in C: every digit mapped to "0", then one substring search (0.5 µs for
# a grant's snapshot, where a regular expression takes 4–6 µs). 10**18 < 2**63, so any integer of
# 18 digits or fewer is exact in orjson.
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= i <= 0x39 else i for i in range(256))
_LONG_RUN = b"0" * 19


def _exact_in_orjson(text: str | bytes) -> bool:
    """No run of 19 digits anywhere: every integer in it is one orjson reads exactly."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    return _LONG_RUN not in raw.translate(_DIGITS_AS_ZERO)


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(text: str | bytes, *, strict: bool = False) -> Any:
    """``json.loads``: the same values, the same errors. ``strict`` (a request body): NaN and
    ±Infinity, which ``json.loads`` takes and RFC 8259 does not, are a ValueError as well, so they
    never reach a record or an answer."""
    if _exact_in_orjson(text):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass  # the standard library answers, or raises its own error
    return json.loads(text, parse_constant=_not_json) if strict else json.loads(text)


def loads_unscanned(text: str | bytes) -> Any:
    """``loads`` without the scan for a run of 19 digits (0.7 µs of a grant's snapshot; 5 % of the
    decision log's sequencer in the server, issue 23): exactly ``loads``' value, except that an
    integer beyond 64 bits comes back as a float. Only for a caller that refuses every float it
    meets and then reads the text again with ``loads`` (``grantd.services.audit_leaves.row_leaves``)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def loads_strict(text: str | bytes) -> Any:
    """``loads(text, strict=True)``: Sanic's reader of every JSON request body."""
    return loads(text, strict=True)

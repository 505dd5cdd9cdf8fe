"""Response headers encoded once (issue 27: what a request costs above the floor).

Sanic encodes every response header on every answer: both name and value go through
``str.translate`` (dropping CR, LF and NUL, so a value cannot split the header block) and then
``encode``. About ten headers go out with every answer, and most are the same constant pairs each
time (the security headers, ``Cache-Control: no-store``, the JSON content types): 13 % of
``/healthz``'s CPU under the profiler. ``install()`` replaces ``BaseHTTPResponse.processed_headers``
with the same computation that looks a pair up in a table of constant pairs encoded once, and
does exactly Sanic's sanitising and encoding for any other pair (a value from a request, an
ETag, a request id, a cookie), so the bytes on the wire are the same
(tests/unit/test_lean_headers.py compares them with Sanic's own for both kinds, header injection
included)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sanic.helpers import has_message_body
from sanic.response.types import BaseHTTPResponse

_DROPPED = str.maketrans("", "", "\r\n\x00")  # Sanic's HEADER_TRANSLATION_TABLE
_sanic_processed_headers = BaseHTTPResponse.processed_headers
_encoded: dict[tuple[str, str], tuple[bytes, bytes]] = {}


def encode_pair(name: str, value: object) -> tuple[bytes, bytes]:
    """Sanic's encoding of one header (BaseHTTPResponse.processed_headers), for any pair. Text that
    is printable ASCII holds no CR, LF or NUL, so it is encoded as it is (what the ETag, the
    request id and most values are: 5x cheaper); anything else is cleaned exactly as Sanic does."""
    text = value if type(value) is str else f"{value}"
    if text.isascii() and text.isprintable():
        encoded = text.encode("ascii")
    else:
        encoded = text.translate(_DROPPED).encode(errors="surrogateescape")
    if name.isascii() and name.isprintable():
        return name.encode("ascii"), encoded
    return name.translate(_DROPPED).encode("ascii"), encoded


def remember(pairs: Iterable[tuple[str, str]]) -> None:
    """Constant (name, value) pairs that are then encoded once per process instead of per answer."""
    for name, value in pairs:
        _encoded[(name, value)] = encode_pair(name, value)


def _processed_headers(self: BaseHTTPResponse) -> Iterator[tuple[bytes, bytes]]:
    if has_message_body(self.status):
        self.headers.setdefault("content-type", self.content_type)
    known = _encoded
    out = []
    for name, value in self.headers.items():
        kind = type(value)
        if kind is str:
            pair = known.get((name, value))
        elif kind is int:  # content-length, set by Sanic as a number: its digits need no cleaning
            pair = known.get((name, ""))
            pair = (pair[0], b"%d" % value) if pair is not None else None
        else:
            pair = None
        out.append(pair if pair is not None else encode_pair(name, value))
    return iter(out)


# What Sanic's HTTP/1.1 writer adds to every answer (Http.http1_response_header): the connection
# header's two values, and the name of content-length (its value is a number; ``name: ""`` keeps
# the encoded name for numbers).
SANIC_PAIRS = (("connection", "keep-alive"), ("connection", "close"), ("content-length", ""))


def install(constant_pairs: Iterable[tuple[str, str]]) -> None:
    """Idempotent: every app of the process shares the table."""
    remember([*SANIC_PAIRS, *constant_pairs])
    BaseHTTPResponse.processed_headers = property(_processed_headers)  # type: ignore[assignment,method-assign]


def sanic_processed_headers(response: BaseHTTPResponse) -> list[tuple[bytes, bytes]]:
    """Sanic's own encoding of a response's headers (for the tests that compare both)."""
    return list(_sanic_processed_headers.fget(response))  # type: ignore[attr-defined]

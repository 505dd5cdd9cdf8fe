"""Issue 27: response headers encoded once (grantd.web.lean_headers) give the very bytes Sanic's own
encoding gives, and a header value that carries CR, LF or NUL is still cleaned on every answer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sanic.response import HTTPResponse, json

from grantd.web import lean_headers
from grantd.web.app import SECURITY_HEADERS


def _response(extra: dict[str, str]) -> HTTPResponse:
    response = json({"ok": True}, headers={**dict(SECURITY_HEADERS), "Cache-Control": "no-store", **extra})
    return response


def test_constant_and_other_pairs_encode_as_sanic_encodes_them():
    lean_headers.install(
        [*SECURITY_HEADERS, ("Cache-Control", "no-store"), ("content-type", "application/json")]
    )
    response = _response({"ETag": '"abc"', "X-Request-ID": "0f" * 16})
    expected = lean_headers.sanic_processed_headers(_response({"ETag": '"abc"', "X-Request-ID": "0f" * 16}))
    assert list(response.processed_headers) == expected
    assert (b"X-Frame-Options", b"DENY") in expected


def test_a_value_with_line_breaks_cannot_split_the_header_block():
    lean_headers.install([("X-Frame-Options", "DENY")])
    injected = "a\r\nSet-Cookie: x=1\x00"
    response = _response({"X-Echo": injected, "X-Bad\r\nName": "v"})
    pairs = list(response.processed_headers)
    assert (b"X-Echo", b"aSet-Cookie: x=1") in pairs
    assert (b"X-BadName", b"v") in pairs
    assert all(b"\r" not in n + v and b"\n" not in n + v and b"\x00" not in n + v for n, v in pairs)
    assert pairs == lean_headers.sanic_processed_headers(
        _response({"X-Echo": injected, "X-Bad\r\nName": "v"})
    )


def test_a_constant_value_is_looked_up_only_for_its_own_name():
    lean_headers.install([("X-Frame-Options", "DENY")])
    response = HTTPResponse(b"", headers={"X-Other": "DENY", "X-Frame-Options": "DENY\r\n"})
    pairs = list(response.processed_headers)
    assert pairs[:2] == [(b"X-Other", b"DENY"), (b"X-Frame-Options", b"DENY")]
    assert pairs == lean_headers.sanic_processed_headers(
        HTTPResponse(b"", headers={"X-Other": "DENY", "X-Frame-Options": "DENY\r\n"})
    )


def test_sanic_s_own_headers_encode_as_sanic_encodes_them():
    """content-length (a number) and connection, which Sanic's writer sets on every answer."""
    lean_headers.install([])
    for extra in (
        {"content-length": 1234, "connection": "keep-alive"},
        {"content-length": 0, "connection": "close"},
    ):
        response = _response({})
        response.headers.update(extra)
        expected = _response({})
        expected.headers.update(extra)
        pairs = list(response.processed_headers)
        assert pairs == lean_headers.sanic_processed_headers(expected)
        assert (b"content-length", str(extra["content-length"]).encode()) in pairs
    odd = HTTPResponse(b"", headers={"X-Count": 7, "X-Flag": True})
    assert list(odd.processed_headers) == lean_headers.sanic_processed_headers(
        HTTPResponse(b"", headers={"X-Count": 7, "X-Flag": True})
    )


@settings(max_examples=500, deadline=None)
@given(name=st.text(max_size=12), value=st.one_of(st.text(max_size=40), st.integers()))
def test_any_pair_encodes_as_sanic_encodes_it(name, value):
    """The printable-ASCII shortcut of ``encode_pair`` and Sanic's cleaning give the same bytes for
    any text: control characters, CR/LF/NUL, non-ASCII and lone surrogates included."""
    response = HTTPResponse(headers={name: value})
    try:
        expected = lean_headers.sanic_processed_headers(response)
    except UnicodeEncodeError:  # a non-ASCII name: Sanic refuses it, and so must we
        with pytest.raises(UnicodeEncodeError):
            lean_headers.encode_pair(name, value)
        return
    assert [lean_headers.encode_pair(n, v) for n, v in response.headers.items()] == expected

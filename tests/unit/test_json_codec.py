"""grantd.core.json_codec: orjson where it gives exactly what the standard library gives, the
standard library wherever it would not (big integers, lone surrogates, NaN, BOMs, other encodings)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grantd.core import json_codec

_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()  # far beyond 64 bits too
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)  # NaN and ±Infinity: the test below
    | st.text(max_size=12),  # lone surrogates included
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=16,
)


def _outcome(read: Any, text: Any) -> tuple[str, str]:
    try:
        return ("value", repr(read(text)))  # repr: NaN equals itself, 1 and 1.0 and True differ
    except (ValueError, RecursionError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return ("error", type(error).__name__)


@settings(max_examples=400, deadline=None)
@given(value=_values)
def test_what_is_written_reads_back_as_the_standard_library_reads_it(value: Any) -> None:
    text = json_codec.dumps(value)
    assert _outcome(json_codec.loads, text) == _outcome(json.loads, text)
    assert repr(json_codec.loads(text)) == repr(json.loads(json.dumps(value)))
    body = json_codec.dumps_bytes(value)
    body.decode("utf-8")  # an answer's body is always valid UTF-8 (lone surrogates are escaped)
    assert repr(json.loads(body)) == repr(json.loads(json.dumps(value)))


@settings(max_examples=400, deadline=None)
@given(text=st.text(alphabet=st.sampled_from('0123456789-+.eE[]{}":, \ufeff\ud800aN\\ntrufls'), max_size=40))
def test_any_text_reads_as_json_loads_reads_it(text: str) -> None:
    assert _outcome(json_codec.loads, text) == _outcome(json.loads, text)


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=40))
def test_any_bytes_read_as_json_loads_reads_them(raw: bytes) -> None:
    assert _outcome(json_codec.loads, raw) == _outcome(json.loads, raw)


@pytest.mark.parametrize(
    "text",
    [
        "18446744073709551616",  # 2**64: orjson alone would answer a float
        "-9223372036854775809",
        '{"a":[1,123456789012345678901234567890]}',
        "1000000000000000000",  # 19 digits within 64 bits: the slower reader, the same value
        "NaN",
        "[Infinity,-Infinity]",
        "1e400",
        '"\\ud800"',
        "\ufeff[]",
        "[" * 5000 + "]" * 5000,
    ],
)
def test_the_edges_of_orjson_read_as_json_loads_reads_them(text: str) -> None:
    assert _outcome(json_codec.loads, text) == _outcome(json.loads, text)
    raw = text.encode("utf-8", "surrogatepass")
    assert _outcome(json_codec.loads, raw) == _outcome(json.loads, raw)
    assert _outcome(json_codec.loads, b"\xef\xbb\xbf" + raw) == _outcome(json.loads, b"\xef\xbb\xbf" + raw)
    utf16 = text.encode("utf-16", "surrogatepass")
    assert _outcome(json_codec.loads, utf16) == _outcome(json.loads, utf16)


def test_a_big_integer_is_written_exactly() -> None:
    assert json_codec.dumps([2**100, -(2**64)]) == f"[{2**100},{-(2**64)}]"
    assert json_codec.dumps_bytes({"n": 2**70}) == b'{"n":%d}' % 2**70


def test_what_the_standard_library_refuses_is_refused() -> None:
    @dataclasses.dataclass
    class Point:
        x: int

    for value in (Point(1), datetime.datetime(2026, 1, 1), {1, 2}, {("a", "b"): 1}):
        with pytest.raises(TypeError):
            json_codec.dumps(value)
        with pytest.raises(TypeError):
            json_codec.dumps_bytes(value)


def test_what_is_not_json_is_written_as_null_and_refused_in_a_body() -> None:
    assert json_codec.dumps([math.nan, math.inf, -math.inf]) == "[null,null,null]"
    for text in ("NaN", '{"a":Infinity}', "[-Infinity]"):
        with pytest.raises(ValueError, match="is not JSON"):
            json_codec.loads_strict(text)
        assert _outcome(json_codec.loads, text) == _outcome(json.loads, text)  # stored JSON: as ever


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.sampled_from('0123456789-+.eE[]{}":, \ufeffaNIfinty\\'), max_size=40))
def test_a_body_reads_as_json_loads_reads_it_but_for_nan(text: str) -> None:
    expected = _outcome(lambda t: json.loads(t, parse_constant=json_codec._not_json), text)
    assert _outcome(json_codec.loads_strict, text) == expected


def test_sorted_gives_way_when_orjson_refuses() -> None:
    assert json_codec.dumps_sorted({"b": 1, "a": [True, None]}) == b'{"a":[true,null],"b":1}'
    assert json_codec.dumps_sorted({"n": 2**70}) is None
    # RFC 8785's safe range, as the decision log's leaves want it (make_leaf relies on the refusal)
    assert (
        json_codec.dumps_sorted({"n": [2**53 - 1, -(2**53 - 1)]})
        == b'{"n":[9007199254740991,-9007199254740991]}'
    )
    assert json_codec.dumps_sorted({"n": 2**53}) is None
    assert json_codec.dumps_sorted({"n": -(2**53)}) is None
    assert json_codec.dumps_sorted({"s": "\ud800"}) is None

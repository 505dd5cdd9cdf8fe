"""The one rule for showing untrusted text (grantd.core.display): pages, the TUI and the agent CLI use it.

Issue 19 item 8: blank and look-alike characters passed the escaping. The Default_Ignorable_Code_Point
table is checked against what Python's unicodedata can derive (it lacks the property itself)."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from grantd.core.display import (
    BLANK_RENDERING,
    DEFAULT_IGNORABLE,
    code_point,
    escape_text,
    is_default_ignorable,
    is_hidden,
    non_ascii,
    quote_arg,
)

# The code points the second attack pass used (issue 19 item 8): each rendered as nothing or as a blank.
# Shared with the page, TUI and agent CLI tests.
BLANKS = (
    "\u3164",
    "\uffa0",
    "\u2800",
    "\u115f",
    "\u1160",
    "\ufe0f",
    "\ufe00",
    "\U000e0100",
    "\u034f",
    "\u180e",
    "\u17b4",
    "\u2065",
    "\U000e0041",
    "\u00ad",
    "\u061c",
    "\u2060",
    "\u200b",
    "\u202e",
)
HOMOGLYPH = "syst\u0435mctl"  # Cyrillic small letter ie


def _ranges_ok() -> None:
    previous = -1
    for start, end in DEFAULT_IGNORABLE:
        assert previous < start <= end, (hex(start), hex(end))
        previous = end


def test_the_table_is_sorted_and_holds_the_published_count():
    _ranges_ok()
    assert sum(end - start + 1 for start, end in DEFAULT_IGNORABLE) == 4174  # DerivedCoreProperties 14.0-15.1


# Cf characters that are not Default_Ignorable_Code_Point (UAX #44's derivation): the prepended
# concatenation marks, the interlinear annotation characters and the Egyptian hieroglyph format controls.
_CF_NOT_IGNORABLE = {
    *range(0x0600, 0x0606),
    0x06DD,
    0x070F,
    0x0890,
    0x0891,
    0x08E2,
    0x110BD,
    0x110CD,
    0xFFF9,
    0xFFFA,
    0xFFFB,
    *range(0x13430, 0x13440),
}


def test_every_format_character_is_in_the_table_except_the_ones_the_derivation_leaves_out():
    cf = {c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"}
    ignorable = {c for start, end in DEFAULT_IGNORABLE for c in range(start, end + 1)}
    assert cf - _CF_NOT_IGNORABLE <= ignorable, sorted(hex(c) for c in cf - _CF_NOT_IGNORABLE - ignorable)
    assert not (ignorable & _CF_NOT_IGNORABLE)


def test_the_rest_of_the_table_is_variation_selectors_fillers_and_reserved_code_points():
    """Derivation: Cf + Variation_Selector + Other_Default_Ignorable_Code_Point (fillers, Khmer
    inherent vowels, U+034F, reserved blocks). Everything in the table that is not Cf is one of those."""
    for start, end in DEFAULT_IGNORABLE:
        for c in range(start, end + 1):
            ch = chr(c)
            category = unicodedata.category(ch)
            name = unicodedata.name(ch, "")
            if category == "Cf":
                continue
            assert (
                category == "Cn"
                or "VARIATION SELECTOR" in name
                or "FILLER" in name
                or c in (0x034F, 0x17B4, 0x17B5)
            ), (hex(c), category, name)
    # ... and every variation selector Python knows is in it.
    for c in range(sys.maxunicode + 1):
        if "VARIATION SELECTOR" in unicodedata.name(chr(c), ""):
            assert is_default_ignorable(c), hex(c)


def test_is_default_ignorable_at_the_edges_of_ranges():
    for start, end in DEFAULT_IGNORABLE:
        assert is_default_ignorable(start) and is_default_ignorable(end)
        assert not is_default_ignorable(start - 1) or any(s <= start - 1 <= e for s, e in DEFAULT_IGNORABLE)
        assert not is_default_ignorable(end + 1) or any(s <= end + 1 <= e for s, e in DEFAULT_IGNORABLE)
    assert not is_default_ignorable(ord("a")) and not is_default_ignorable(0x10FFFF)


@pytest.mark.parametrize("blank", BLANKS, ids=lambda ch: f"U+{ord(ch):04X}")
def test_each_blank_or_ignorable_character_is_shown_as_an_escape(blank: str):
    shown = escape_text(f"rm{blank}-rf")
    assert blank not in shown
    assert f"{ord(blank):02x}" in shown.replace("\\U000", "\\u")  # \xad, \u3164, \U000e0100
    assert all(ch.isprintable() and ord(ch) < 0x80 for ch in shown), shown


def test_every_default_ignorable_and_blank_code_point_is_escaped():
    for start, end in DEFAULT_IGNORABLE:
        for c in range(start, end + 1):
            assert is_hidden(chr(c)), hex(c)
            assert escape_text("a" + chr(c)).isascii(), hex(c)  # after a letter too (variation selectors)
    for c in BLANK_RENDERING:
        assert escape_text(chr(c)).isascii(), hex(c)


def test_look_alikes_stay_readable_and_are_listed_by_code_point():
    assert escape_text(HOMOGLYPH) == HOMOGLYPH  # printable: the badge tells it apart, not an escape
    assert non_ascii(HOMOGLYPH) == ["U+0435 CYRILLIC SMALL LETTER IE"]
    assert non_ascii("systemctl") == [] and non_ascii(None) == []
    assert non_ascii("a\u3164b\u3164") == ["U+3164 HANGUL FILLER"]  # each code point once
    assert code_point("\U000e0001") == "U+E0001 LANGUAGE TAG"
    assert code_point("\u2065") == "U+2065 <Cn>"
    assert quote_arg("\u2800") == '"\\u2800"'

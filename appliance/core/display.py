"""How untrusted text is shown to people: the one escaping rule for pages, the TUI and the agent CLI.

A grant's argv, an agent's name, a reason, an error message: all come from someone else. Shown raw, an
ESC sequence could repaint a terminal, a newline or a carriage return could hide an argument, a bidi
override could make ``rm -rf /home`` read as something else, and a no-break space, a Hangul filler or
a Braille blank could pass for a plain space or for nothing at all. Every character that is not a
plain printable one is written as a backslash escape (``\\x1b``, ``\\u3164``), so what a person reads
is what the target host will run (D18). A look-alike letter (Cyrillic ``е`` in ``systеmctl``) is
printable and stays as it is; ``non_ascii`` lists the code points of such text so pages and the TUI
can mark it with a badge that shows them.

Pure standard library and no grantd imports: the agent CLI and the TUI import this module too
(tests/unit/test_layers.py). Functions return plain ``str``; callers render the result as text, never as
markup (Jinja2 autoescapes it once more for HTML).
"""

from __future__ import annotations

import unicodedata
from bisect import bisect_right
from collections.abc import Sequence

_NAMED = {
    "\\": "\\\\",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}

# Control (Cc), format (Cf: bidi overrides, zero-width characters, BOM), surrogate (Cs), private use
# (Co), unassigned (Cn), line/paragraph separators (Zl/Zp) and every space separator other than
# U+0020 (Zs: no-break space, ideographic space, ...).
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})

# Default_Ignorable_Code_Point, from DerivedCoreProperties.txt of Unicode 15.1.0 (the same 4,174 code
# points in 27 entries since Unicode 14.0, the version of Python 3.11's unicodedata, which has no such
# property). Renderers show these as nothing; several are letters (Lo: U+115F, U+1160, U+3164, U+FFA0)
# or marks (Mn: U+034F, variation selectors) that the categories above would let through.
# tests/unit/test_display.py checks the table against the rule that derives it from categories.
DEFAULT_IGNORABLE: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),  # Cf SOFT HYPHEN
    (0x034F, 0x034F),  # Mn COMBINING GRAPHEME JOINER
    (0x061C, 0x061C),  # Cf ARABIC LETTER MARK
    (0x115F, 0x1160),  # Lo HANGUL CHOSEONG FILLER..HANGUL JUNGSEONG FILLER
    (0x17B4, 0x17B5),  # Mn KHMER VOWEL INHERENT AQ..KHMER VOWEL INHERENT AA
    (0x180B, 0x180D),  # Mn MONGOLIAN FREE VARIATION SELECTOR ONE..THREE
    (0x180E, 0x180E),  # Cf MONGOLIAN VOWEL SEPARATOR
    (0x180F, 0x180F),  # Mn MONGOLIAN FREE VARIATION SELECTOR FOUR
    (0x200B, 0x200F),  # Cf ZERO WIDTH SPACE..RIGHT-TO-LEFT MARK
    (0x202A, 0x202E),  # Cf LEFT-TO-RIGHT EMBEDDING..RIGHT-TO-LEFT OVERRIDE
    (0x2060, 0x2064),  # Cf WORD JOINER..INVISIBLE PLUS
    (0x2065, 0x2065),  # Cn <reserved-2065>
    (0x2066, 0x206F),  # Cf LEFT-TO-RIGHT ISOLATE..NOMINAL DIGIT SHAPES
    (0x3164, 0x3164),  # Lo HANGUL FILLER
    (0xFE00, 0xFE0F),  # Mn VARIATION SELECTOR-1..VARIATION SELECTOR-16
    (0xFEFF, 0xFEFF),  # Cf ZERO WIDTH NO-BREAK SPACE
    (0xFFA0, 0xFFA0),  # Lo HALFWIDTH HANGUL FILLER
    (0xFFF0, 0xFFF8),  # Cn <reserved-FFF0>..<reserved-FFF8>
    (0x1BCA0, 0x1BCA3),  # Cf SHORTHAND FORMAT LETTER OVERLAP..SHORTHAND FORMAT UP STEP
    (0x1D173, 0x1D17A),  # Cf MUSICAL SYMBOL BEGIN BEAM..MUSICAL SYMBOL END PHRASE
    (0xE0000, 0xE0000),  # Cn <reserved-E0000>
    (0xE0001, 0xE0001),  # Cf LANGUAGE TAG
    (0xE0002, 0xE001F),  # Cn <reserved-E0002>..<reserved-E001F>
    (0xE0020, 0xE007F),  # Cf TAG SPACE..CANCEL TAG
    (0xE0080, 0xE00FF),  # Cn <reserved-E0080>..<reserved-E00FF>
    (0xE0100, 0xE01EF),  # Mn VARIATION SELECTOR-17..VARIATION SELECTOR-256
    (0xE01F0, 0xE0FFF),  # Cn <reserved-E01F0>..<reserved-E0FFF>
)

# Printable by category and not default-ignorable, yet drawn as an empty cell (or as nothing) by
# common fonts and terminals: they pass for a space or for nothing.
BLANK_RENDERING = frozenset(
    {
        0x2800,  # So BRAILLE PATTERN BLANK
        0x3000,  # Zs IDEOGRAPHIC SPACE (a category above; listed for the record)
        0x16FE4,  # Mn KHITAN SMALL SCRIPT FILLER
        0x1D159,  # So MUSICAL SYMBOL NULL NOTEHEAD
        0xFFFC,  # So OBJECT REPLACEMENT CHARACTER (nothing, or a box, depending on the font)
    }
)

_STARTS = tuple(start for start, _ in DEFAULT_IGNORABLE)


def is_default_ignorable(code: int) -> bool:
    index = bisect_right(_STARTS, code) - 1
    return index >= 0 and code <= DEFAULT_IGNORABLE[index][1]


def is_hidden(ch: str) -> bool:
    """True when ``ch`` would not show as itself: it is written as an escape instead."""
    if ch == " ":
        return False
    code = ord(ch)
    return (
        unicodedata.category(ch) in _ESCAPED_CATEGORIES
        or is_default_ignorable(code)
        or code in BLANK_RENDERING
    )


def _code(ch: str) -> str:
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _escape_char(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    return _code(ch) if is_hidden(ch) else ch


def _combines_with_nothing(value: str, index: int) -> bool:
    """A combining mark at the start, or after a non-letter, would decorate a quote or a space."""
    if unicodedata.category(value[index]) not in ("Mn", "Me", "Mc"):
        return False
    return index == 0 or unicodedata.category(value[index - 1])[0] not in ("L", "M", "N")


def escape_text(value: str) -> str:
    """Escape backslashes and every control, format, invisible, default-ignorable or blank-rendering
    character; leave printable text (and ' ') alone."""
    out = []
    for index, ch in enumerate(value):
        if _combines_with_nothing(value, index):
            out.append(_code(ch))
        else:
            out.append(_escape_char(ch))
    return "".join(out)


def quote_arg(value: str) -> str:
    """One argument, escaped and always quoted, so its boundaries and any spaces are visible."""
    return '"' + escape_text(value).replace('"', '\\"') + '"'


def summarize_argv(argv: Sequence[str]) -> str:
    """A one-line command for a table cell: escaped arguments, quoted only when needed."""
    parts = []
    for arg in argv:
        escaped = escape_text(arg)
        if escaped == "" or any(c in escaped for c in " \"'"):
            parts.append(quote_arg(arg))
        else:
            parts.append(escaped)
    return " ".join(parts)


def describe_argv(argv: Sequence[str]) -> list[str]:
    """One line per argument, numbered and quoted: the detail pane's exact view of a command."""
    width = len(str(max(len(argv) - 1, 0)))
    return [f"[{index:>{width}}] {quote_arg(arg)}" for index, arg in enumerate(argv)]


def code_point(ch: str) -> str:
    """``U+0435 CYRILLIC SMALL LETTER IE`` (unnamed ones by their category: ``U+E0001 <Cf>``)."""
    return f"U+{ord(ch):04X} {unicodedata.name(ch, '') or '<' + unicodedata.category(ch) + '>'}"


def non_ascii(value: str | None) -> list[str]:
    """The distinct non-ASCII code points of ``value`` in order of appearance, as ``code_point`` lines:
    what a badge next to a look-alike or an escaped character shows. Empty for plain ASCII."""
    seen: dict[str, None] = {}
    for ch in value or "":
        if ord(ch) > 0x7F:
            seen.setdefault(ch)
    return [code_point(ch) for ch in seen]

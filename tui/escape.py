"""Make untrusted strings safe and unambiguous to show in a terminal.

A grant's argv comes from an agent. Shown raw, an ESC sequence could repaint the screen, a newline
or a carriage return could hide an argument, a bidi override could make `rm -rf /home` read as
something else, and a no-break space could pass for a plain one. Every character that is not a
plain printable one is written as a backslash escape, so what the approver reads is what the target
host will run. These functions are pure (no Textual) and return plain `str`; callers must render the
result as text, never as markup.
"""

from __future__ import annotations

import unicodedata
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


def _escape_char(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    if ch == " " or unicodedata.category(ch) not in _ESCAPED_CATEGORIES:
        return ch
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _combines_with_nothing(value: str, index: int) -> bool:
    """A combining mark at the start, or after a non-letter, would decorate a quote or a space."""
    if unicodedata.category(value[index]) not in ("Mn", "Me", "Mc"):
        return False
    return index == 0 or unicodedata.category(value[index - 1])[0] not in ("L", "M", "N")


def escape_text(value: str) -> str:
    """Escape backslashes, control/format/invisible characters; leave printable text (and ' ') alone."""
    out = []
    for index, ch in enumerate(value):
        if _combines_with_nothing(value, index):
            out.append(f"\\u{ord(ch):04x}")
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
        if escaped == "" or any(c in escaped for c in ' "\''):
            parts.append(quote_arg(arg))
        else:
            parts.append(escaped)
    return " ".join(parts)


def describe_argv(argv: Sequence[str]) -> list[str]:
    """One line per argument, numbered and quoted: the detail pane's exact view of a command."""
    width = len(str(max(len(argv) - 1, 0)))
    return [f"[{index:>{width}}] {quote_arg(arg)}" for index, arg in enumerate(argv)]

"""The command digest every part of grantd agrees on (D4).

Imported by the server and by `grantd elevate` (through plugins/elevate_default.py), which runs as
root: keep it to the standard library, with no grantd imports.
"""

from __future__ import annotations

import hashlib


def cmd_hash(argv: list[str]) -> str:
    """sha256 over the argv joined by single spaces (no newline), with the ``sha256:`` prefix.

    The peer ecosystem hashes exactly these bytes; verifiers compare the argv element by element
    first, because joining loses the boundaries between arguments ("a b" + "c" == "a" + "b c").
    """
    return "sha256:" + hashlib.sha256(" ".join(argv).encode("utf-8")).hexdigest()

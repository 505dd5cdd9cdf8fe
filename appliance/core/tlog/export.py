"""The export directory (``grantd audit export DIR``, ``grantd audit verify --from-export DIR``).

Layout (plain files, for WORM storage or a SIEM; every file is appended to or added, never rewritten
in place by a later export of the same log):

- ``leaves.jsonl``: one line per leaf in index order, ``{"index": i, "leaf": "<the exact leaf text>",
  "leaf_hash": "<base64 RFC 6962 leaf hash>"}`` (``leaf`` is the string that was hashed; ``leaf_hash`` is
  the hash the log stored, used only to name a bad leaf once it folds to a signed root);
- ``checkpoints/<size, 20 digits>.txt``: each signed checkpoint note the log published, so a later
  verifier checks consistency between them;
- ``checkpoint``: the newest checkpoint note (the one ``verify`` checks the leaves against);
- ``keys.txt``: the log's vkey lines when exported. Informational only: a verifier uses the keys it
  was given (``--key``), never keys read from the export.

``export_files`` and ``read_export`` are pure (path → bytes); ``write_export``/``load_export`` move
those to and from a directory.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from grantd.core.tlog.merkle import leaf_hash
from grantd.core.tlog.note import NoteError, parse_checkpoint, parse_note

LEAVES = "leaves.jsonl"
LATEST = "checkpoint"
CHECKPOINTS = "checkpoints"
KEYS = "keys.txt"


class ExportError(ValueError):
    """The export directory is not in this format."""


@dataclass(frozen=True)
class Export:
    leaves: list[bytes]
    leaf_hashes: list[bytes]
    checkpoint: str  # the newest signed note
    checkpoints: list[str]  # every signed note, by size
    keys: list[str]


def _size_of(note: str) -> int:
    try:
        return parse_checkpoint(parse_note(note)[0]).size
    except NoteError as error:
        raise ExportError(f"not a checkpoint note: {error}") from None


def export_files(
    leaves: Sequence[bytes],
    checkpoints: Iterable[str],
    keys: Iterable[str] = (),
    leaf_hashes: Sequence[bytes] | None = None,
) -> dict[str, bytes]:
    """The files of an export, by relative path. ``leaf_hashes`` are the stored hashes (default: computed)."""
    notes = sorted(set(checkpoints), key=_size_of)
    if not notes:
        raise ExportError("an export carries at least one checkpoint")
    hashes = leaf_hashes if leaf_hashes is not None else [leaf_hash(leaf) for leaf in leaves]
    if len(hashes) != len(leaves):
        raise ExportError("one stored hash per leaf")
    lines = [
        json.dumps(
            {"index": i, "leaf": leaf.decode("utf-8"), "leaf_hash": base64.b64encode(h).decode()},
            ensure_ascii=False,
            separators=(",", ":"),
        )
        + "\n"
        for i, (leaf, h) in enumerate(zip(leaves, hashes, strict=True))
    ]
    files = {
        LEAVES: "".join(lines).encode("utf-8"),
        LATEST: notes[-1].encode("utf-8"),
        KEYS: "".join(f"{k}\n" for k in keys).encode("utf-8"),
    }
    for note in notes:
        files[f"{CHECKPOINTS}/{_size_of(note):020d}.txt"] = note.encode("utf-8")
    return files


def read_export(files: Mapping[str, bytes]) -> Export:
    if LEAVES not in files or LATEST not in files:
        raise ExportError(f"an export has {LEAVES} and {LATEST}")
    leaves: list[bytes] = []
    hashes: list[bytes] = []
    try:
        text = files[LEAVES].decode("utf-8")
        for number, line in enumerate(text.splitlines()):
            row = json.loads(line)
            if (
                not isinstance(row, dict)
                or row.get("index") != number
                or not isinstance(row.get("leaf"), str)
            ):
                raise ExportError(f"{LEAVES} line {number + 1}: expected index {number} and its leaf")
            leaves.append(row["leaf"].encode("utf-8"))
            hashes.append(base64.b64decode(row.get("leaf_hash", ""), validate=True))
        latest = files[LATEST].decode("utf-8")
        notes = [files[name].decode("utf-8") for name in sorted(files) if name.startswith(CHECKPOINTS + "/")]
        keys = [line for line in files.get(KEYS, b"").decode("utf-8").splitlines() if line.strip()]
    except (UnicodeDecodeError, json.JSONDecodeError, binascii.Error, ValueError) as error:
        if isinstance(error, ExportError):
            raise
        raise ExportError(f"unreadable export: {error}") from None
    _size_of(latest)
    notes.sort(key=_size_of)
    if latest not in notes:
        notes.append(latest)
    return Export(leaves, hashes, latest, notes, keys)


def write_export(directory: str | os.PathLike[str], files: Mapping[str, bytes]) -> None:
    """Write the files; a file already there with other content is an error (exports are append-only)."""
    base = Path(directory)
    for name, content in files.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and name not in (LEAVES, LATEST, KEYS) and path.read_bytes() != content:
            raise ExportError(f"{path} exists with other content")
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_bytes(content)
        temporary.replace(path)


def load_export(directory: str | os.PathLike[str]) -> Export:
    base = Path(directory)
    files = {
        str(path.relative_to(base)).replace(os.sep, "/"): path.read_bytes()
        for path in base.rglob("*")
        if path.is_file() and not path.name.endswith(".tmp")
    }
    return read_export(files)

"""C2SP signed notes (https://c2sp.org/signed-note) and tlog-checkpoints (https://c2sp.org/tlog-checkpoint).

A note is its text (UTF-8, ending in a newline), a blank line, and one or more signature lines
``— <key name> <base64(key id ‖ signature)>``. Ed25519 keys (signature type 0x01) only: the key id is
the first 4 bytes of ``SHA-256(name ‖ 0x0A ‖ 0x01 ‖ 32-byte public key)``; a verifier key ("vkey") is
written ``<name>+<8 hex digits of the key id>+<base64(0x01 ‖ public key)>``, the golang.org/x/mod/sumdb/note
form. A checkpoint is a note whose text is the origin, the tree size in decimal and the base64 root hash.

Opening a note: signatures by keys the verifier does not know are ignored (rotation, witnesses); a
signature by a known key that does not verify rejects the note; at least one known key must have
signed. The log signs a checkpoint only through ``sign_checkpoint``, which proves it consistent with
the previous one first (tlog-checkpoint: "a log MUST NOT sign a checkpoint inconsistent with any
checkpoint it previously signed").
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from grantd.core.tlog.merkle import HASH_SIZE, ProofError, verify_consistency

ALG_ED25519 = 0x01
DASH = "\u2014"  # EM DASH, the start of every signature line
MAX_SIGNATURES = 100  # as golang.org/x/mod/sumdb/note (C2SP: a verifier accepts at least 16)
_SIG_LINE = re.compile(r"\u2014 (\S+) (\S+)")
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,18}")
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")  # control characters but the newline


class NoteError(ValueError):
    """A malformed note, key or checkpoint, or a note no known key verifies."""


class InconsistentCheckpoint(NoteError):
    """The log was about to sign a checkpoint that does not extend its previous one."""


def _check_name(name: str) -> str:
    if not name or any(c.isspace() for c in name) or "+" in name or not name.isprintable():
        raise NoteError(f"key name {name!r} must be non-empty, without spaces or '+'")
    return name


def key_id(name: str, public: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([ALG_ED25519]) + public).digest()[:4]


def _raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise NoteError("invalid base64") from None


@dataclass(frozen=True)
class Verifier:
    name: str
    public: bytes  # the 32-byte Ed25519 public key

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.public)

    @property
    def vkey(self) -> str:
        return (
            f"{self.name}+{self.key_id.hex()}+{base64.b64encode(bytes([ALG_ED25519]) + self.public).decode()}"
        )

    @classmethod
    def from_vkey(cls, vkey: str) -> Verifier:
        parts = vkey.strip().split("+", 2)
        if len(parts) != 3 or not re.fullmatch(r"[0-9a-f]{8}", parts[1]):
            raise NoteError("a vkey is <name>+<8 hex digits>+<base64 key>")
        name = _check_name(parts[0])
        material = _b64decode(parts[2])
        if len(material) != 33 or material[0] != ALG_ED25519:
            raise NoteError("only Ed25519 vkeys (type 0x01, 32 bytes) are supported")
        verifier = cls(name, material[1:])
        if verifier.key_id.hex() != parts[1]:
            raise NoteError("the vkey's key id does not match its name and key")
        return verifier

    def verify(self, message: bytes, signature: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.public).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True


@dataclass(frozen=True)
class Signer:
    name: str
    private: Ed25519PrivateKey

    def __post_init__(self) -> None:
        _check_name(self.name)

    @classmethod
    def generate(cls, name: str) -> Signer:
        return cls(name, Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, name: str, seed: bytes) -> Signer:
        return cls(name, Ed25519PrivateKey.from_private_bytes(seed))

    @classmethod
    def from_skey(cls, skey: str) -> Signer:
        """The golang.org/x/mod/sumdb/note private key form ``PRIVATE+KEY+<name>+<hex id>+<base64(0x01 ‖ seed)>``."""
        if not skey.startswith("PRIVATE+KEY+"):
            raise NoteError("a private key starts with PRIVATE+KEY+")
        parts = skey.removeprefix("PRIVATE+KEY+").split("+", 2)
        if len(parts) != 3:
            raise NoteError("malformed private key")
        material = _b64decode(parts[2])
        if len(material) != 33 or material[0] != ALG_ED25519:
            raise NoteError("only Ed25519 private keys are supported")
        signer = cls.from_seed(_check_name(parts[0]), material[1:])
        if signer.verifier.key_id.hex() != parts[1]:
            raise NoteError("the private key's key id does not match")
        return signer

    @property
    def seed(self) -> bytes:
        return self.private.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )

    @property
    def skey(self) -> str:
        material = base64.b64encode(bytes([ALG_ED25519]) + self.seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.verifier.key_id.hex()}+{material}"

    @cached_property
    def verifier(self) -> Verifier:  # derived once per signer (every signature names its key id)
        return Verifier(self.name, _raw_public(self.private.public_key()))

    def signature_line(self, text: str) -> str:
        blob = self.verifier.key_id + self.private.sign(text.encode("utf-8"))
        return f"{DASH} {self.name} {base64.b64encode(blob).decode()}\n"


def _check_text(text: str) -> None:
    if not text.endswith("\n") or "\n\n" in text:
        raise NoteError("a note's text ends with a newline and has no blank line")
    if _CONTROL.search(text):
        raise NoteError("a note's text has no control characters but newlines")


def sign_note(text: str, signers: Sequence[Signer]) -> str:
    _check_text(text)
    if not signers:
        raise NoteError("a note needs at least one signature")
    return text + "\n" + "".join(signer.signature_line(text) for signer in signers)


@dataclass(frozen=True)
class Signature:
    name: str
    key_id: bytes
    signature: bytes


@dataclass(frozen=True)
class OpenedNote:
    text: str
    verified: tuple[Verifier, ...]  # the known keys whose signature verified
    unverified: tuple[Signature, ...]  # signatures by keys the verifier does not know (ignored)


def parse_note(note: str | bytes) -> tuple[str, list[Signature]]:
    """Split a note into its text and signatures; ``NoteError`` if malformed."""
    if isinstance(note, bytes):
        try:
            note = note.decode("utf-8")
        except UnicodeDecodeError:
            raise NoteError("a note is UTF-8") from None
    split = note.rfind("\n\n")
    if split < 0:
        raise NoteError("a note has a blank line before its signatures")
    text, block = note[: split + 1], note[split + 2 :]
    _check_text(text)
    if not block.endswith("\n"):
        raise NoteError("a note ends with a newline")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise NoteError(f"more than {MAX_SIGNATURES} signatures")
    signatures = []
    for line in lines:
        match = _SIG_LINE.fullmatch(line)
        if not match:
            raise NoteError("a signature line is '\u2014 <name> <base64>'")
        blob = _b64decode(match.group(2))
        if len(blob) < 5:
            raise NoteError("a signature is a key id and at least one byte")
        signatures.append(Signature(_check_name(match.group(1)), blob[:4], blob[4:]))
    return text, signatures


def open_note(note: str | bytes, verifiers: Iterable[Verifier]) -> OpenedNote:
    """Verify a note against known keys: unknown signatures are ignored, a known key's bad signature
    rejects the note, and at least one known key must have signed."""
    text, signatures = parse_note(note)
    known = {(v.name, v.key_id): v for v in verifiers}
    verified: list[Verifier] = []
    unverified: list[Signature] = []
    for sig in signatures:
        verifier = known.get((sig.name, sig.key_id))
        if verifier is None:
            unverified.append(sig)
            continue
        if not verifier.verify(text.encode("utf-8"), sig.signature):
            raise NoteError(f"the signature of {sig.name}+{sig.key_id.hex()} does not verify")
        if verifier not in verified:
            verified.append(verifier)
    if not verified:
        raise NoteError("no known key signed this note")
    return OpenedNote(text, tuple(verified), tuple(unverified))


# -- checkpoints ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def text(self) -> str:
        if not self.origin or not self.origin.isprintable() or self.origin != self.origin.strip():
            raise NoteError("the origin is a non-empty printable line")
        if len(self.root) != HASH_SIZE or self.size < 0:
            raise NoteError("a checkpoint has a 32-byte root and a non-negative size")
        lines = [self.origin, str(self.size), base64.b64encode(self.root).decode(), *self.extensions]
        return "\n".join(lines) + "\n"


def parse_checkpoint(text: str) -> Checkpoint:
    """A checkpoint's text (the body of the note, already verified)."""
    if not text.endswith("\n"):
        raise NoteError("a checkpoint ends with a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3 or not lines[0] or any(not line for line in lines):
        raise NoteError("a checkpoint is an origin, a size and a root hash, one per line")
    if not _DECIMAL.fullmatch(lines[1]):
        raise NoteError("a checkpoint's size is a decimal number without leading zeros")
    root = _b64decode(lines[2])
    if len(root) != HASH_SIZE or base64.b64encode(root).decode() != lines[2]:
        raise NoteError("a checkpoint's root is the base64 of 32 bytes")
    return Checkpoint(lines[0], int(lines[1]), root, tuple(lines[3:]))


def open_checkpoint(
    note: str | bytes, verifiers: Iterable[Verifier], origin: str | None = None
) -> Checkpoint:
    """Verify a signed checkpoint and read it; the origin, when given, must match (C2SP: a client
    checks the origin it expects). The log's key is named as the origin."""
    verifiers = list(verifiers)
    opened = open_note(note, verifiers)
    checkpoint = parse_checkpoint(opened.text)
    if origin is not None and checkpoint.origin != origin:
        raise NoteError(f"the checkpoint is for {checkpoint.origin!r}, not {origin!r}")
    return checkpoint


def sign_checkpoint(
    signer: Signer, checkpoint: Checkpoint, previous: Checkpoint | None, proof: Sequence[bytes]
) -> str:
    """Sign ``checkpoint`` only if ``proof`` shows it extends ``previous`` (the last one this log
    signed; None for its first); ``InconsistentCheckpoint`` otherwise. The key is named as the origin."""
    if signer.name != checkpoint.origin:
        raise NoteError("the log key is named as the checkpoint's origin")
    if previous is not None:
        if previous.origin != checkpoint.origin:
            raise InconsistentCheckpoint("the previous checkpoint is of another log")
        try:
            verify_consistency(previous.size, checkpoint.size, previous.root, checkpoint.root, proof)
        except ProofError as error:
            raise InconsistentCheckpoint(f"refusing to sign: {error}") from None
    return sign_note(checkpoint.text(), [signer])

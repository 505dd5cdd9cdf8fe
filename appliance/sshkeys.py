"""Agent public keys and the two signature envelopes an agent may send.

Key parsing and Ed25519 verification are done by `cryptography`; this module only reads the
SSH wire format (RFC 4251 strings) of the SSHSIG envelope that `ssh-keygen -Y sign` writes
(PROTOCOL.sshsig), to find the Ed25519 signature and the exact bytes it covers.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import re

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

SSHSIG_NAMESPACE = "grantd"
_ARMOR = re.compile(r"-----BEGIN SSH SIGNATURE-----(.*?)-----END SSH SIGNATURE-----", re.S)


class KeyFormatError(ValueError):
    pass


def parse_public_key(text: str) -> tuple[Ed25519PublicKey, str, str]:
    """Parse an OpenSSH public key line; return (key, normalized line without comment, key id).

    The key id is the SHA-256 fingerprint of the key blob (as ssh-keygen -l prints it), so the
    same key with another comment is the same key.
    """
    if not isinstance(text, str) or not text.strip().startswith("ssh-ed25519 "):
        raise KeyFormatError("publicKey must be an SSH ssh-ed25519 public key")
    parts = text.strip().split()
    try:
        key = serialization.load_ssh_public_key(f"{parts[0]} {parts[1]}".encode())
    except (ValueError, UnsupportedAlgorithm, IndexError):
        raise KeyFormatError("publicKey is not a valid ssh-ed25519 public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFormatError("publicKey must be an SSH ssh-ed25519 public key")
    blob = base64.b64decode(parts[1])
    fingerprint = "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return key, f"{parts[0]} {parts[1]}", fingerprint


@functools.lru_cache(maxsize=4096)
def load_public_key(normalized: str) -> Ed25519PublicKey:
    """The key object of an enrolled key line (cached: agents sign in again and again)."""
    key = serialization.load_ssh_public_key(normalized.encode())
    assert isinstance(key, Ed25519PublicKey)
    return key


def _lenient_b64(text: str) -> bytes:
    cleaned = "".join(text.split()).replace("-", "+").replace("_", "/")
    cleaned += "=" * (-len(cleaned) % 4)
    return base64.b64decode(cleaned, validate=True)


class _Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def string(self) -> bytes:
        if self.pos + 4 > len(self.data):
            raise ValueError("truncated")
        length = int.from_bytes(self.data[self.pos : self.pos + 4], "big")
        start = self.pos + 4
        if start + length > len(self.data):
            raise ValueError("truncated")
        self.pos = start + length
        return self.data[start : self.pos]

    def uint32(self) -> int:
        if self.pos + 4 > len(self.data):
            raise ValueError("truncated")
        value = int.from_bytes(self.data[self.pos : self.pos + 4], "big")
        self.pos += 4
        return value


def _ssh_string(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def _verify_sshsig(blob: bytes, key: Ed25519PublicKey, message: bytes) -> bool:
    if not blob.startswith(b"SSHSIG"):
        return False
    reader = _Reader(blob[6:])
    version = reader.uint32()
    public_blob = reader.string()
    namespace = reader.string()
    reserved = reader.string()
    hash_alg = reader.string()
    sig_blob = reader.string()
    if version != 1 or namespace != SSHSIG_NAMESPACE.encode() or hash_alg not in (b"sha256", b"sha512"):
        return False
    expected_blob = key.public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).split()[1]
    if public_blob != base64.b64decode(expected_blob):
        return False
    sig_reader = _Reader(sig_blob)
    if sig_reader.string() != b"ssh-ed25519":
        return False
    raw_sig = sig_reader.string()
    digest = hashlib.new(hash_alg.decode(), message).digest()
    signed = (
        b"SSHSIG"
        + _ssh_string(namespace)
        + _ssh_string(reserved)
        + _ssh_string(hash_alg)
        + _ssh_string(digest)
    )
    try:
        key.verify(raw_sig, signed)
    except InvalidSignature:
        return False
    return True


def verify_challenge_signature(key: Ed25519PublicKey, challenge: str, signature: str) -> bool:
    """True if ``signature`` signs exactly ``challenge`` with ``key``.

    Accepted envelopes: the raw 64-byte Ed25519 signature, base64 (standard or URL alphabet,
    padding optional) as the peer CLI sends it; or an SSHSIG (namespace "grantd"), armored or
    as its base64 body. For SSHSIG the message may end with one newline, because
    `echo CHALLENGE | ssh-keygen -Y sign` is what people type.
    """
    if not isinstance(signature, str) or not signature.strip() or len(signature) > 8192:
        return False
    armored = _ARMOR.search(signature)
    try:
        blob = _lenient_b64(armored.group(1) if armored else signature)
    except (binascii.Error, ValueError):
        return False
    message = challenge.encode()
    if len(blob) == 64 and not armored:
        try:
            key.verify(blob, message)
            return True
        except InvalidSignature:
            return False
    try:
        return _verify_sshsig(blob, key, message) or _verify_sshsig(blob, key, message + b"\n")
    except ValueError:
        return False

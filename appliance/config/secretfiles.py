"""Secrets in the config: "file:PATH", "env:NAME" or (warned) a literal; and fresh ones written
to a 0600 file (`grantd config init`, the development config of `grantd serve`)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def resolve_secret(
    path: str, value: str, base_dir: Path, problems: list[str], warnings: list[str]
) -> str | None:
    """Turn "file:PATH" / "env:NAME" / literal into the secret itself."""
    if value.startswith("file:"):
        p = Path(value[5:]).expanduser()
        p = p if p.is_absolute() else base_dir / p
        try:
            secret = p.read_text(encoding="utf-8").strip()
        except OSError as exc:
            problems.append(f"{path}: cannot read secret file {p}: {exc.strerror or exc}")
            return None
        if not secret:
            problems.append(f"{path}: secret file {p} is empty")
            return None
        try:
            if p.stat().st_mode & 0o077 and os.name == "posix":
                warnings.append(f"{path}: secret file {p} is readable by group or others (chmod 600 it)")
        except OSError:
            pass
        return secret
    if value.startswith("env:"):
        name = value[4:]
        secret = os.environ.get(name, "")
        if not secret:
            problems.append(f"{path}: environment variable {name} is not set or empty")
            return None
        return secret
    warnings.append(f"{path}: the secret is written inline; prefer file:PATH or env:NAME")
    return value


def new_secret() -> str:
    """A fresh secret (the management token, an OAuth client's secret): 32 random bytes as URL-safe
    base64 without padding, so only ``A-Z a-z 0-9 - _``.

    URL-safe on purpose: a client secret travels in HTTP Basic credentials, which RFC 6749 §2.3.1
    wants form-encoded, and common clients (authlib's default ``client_secret_basic`` among them)
    send it unencoded. Ordinary base64 (``openssl rand -base64 32``: about half of its secrets hold a
    ``+`` or ``/``, and ``=`` padding) or a ``%`` then means one thing to the client and another to
    a server that decodes as the RFC says. A URL-safe secret is the same string encoded or not."""
    return secrets.token_urlsafe(32)


def write_secret_file(path: Path, *, force: bool = False) -> str:
    """Write ``new_secret()`` to ``path`` (mode 0600, created or, with ``force``, replaced); the secret."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (0 if force else os.O_EXCL)
    secret = new_secret()
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(secret + "\n")
    os.chmod(path, 0o600)
    return secret

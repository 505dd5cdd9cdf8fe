"""The agent's files: $XDG_CONFIG_HOME/grantd (agent.json, agent.toml) and its Ed25519 key."""

from __future__ import annotations

import json
import time
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from grantd.agent.errors import CliError
from grantd.client.files import PrivateFileError, config_dir, private_directory
from grantd.client.files import write_private as _write_private

# -- files -------------------------------------------------------------------------------------------


def private_dir() -> Path:
    """``~/.config/grantd``, made or tightened to 0700 (grantd.client.files)."""
    return private_directory(config_dir())


def write_private(path: Path, data: bytes) -> None:
    """Write a file only its owner can read (grantd.client.files: atomic, 0600, a private directory)."""
    try:
        _write_private(path, data)
    except PrivateFileError as exc:
        raise CliError(str(exc), kind="config") from None


def agent_settings() -> dict[str, Any]:
    path = config_dir() / "agent.toml"
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CliError(f"{path}: {exc}", kind="config") from None


@dataclass
class State:
    idp: str = ""
    issuer: str = ""  # the token's `iss`: where people go (links are printed on it, D18), may differ from idp
    email: str = ""
    key_path: str = ""
    agent_id: str = ""
    token: str = ""
    expires_at: int = 0
    token_type: str = "Bearer"  # noqa: S105 - "DPoP": the token is bound to the key (D16): every call carries a proof

    @staticmethod
    def path() -> Path:
        return config_dir() / "agent.json"

    @classmethod
    def load(cls) -> State:
        try:
            data = json.loads(cls.path().read_text())
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as exc:
            raise CliError(
                f"cannot read {cls.path()}: {exc}; run grantd agent login again", kind="config"
            ) from None
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)

    def save(self) -> None:
        write_private(self.path(), json.dumps(asdict(self), indent=2).encode())

    def public(self) -> dict[str, Any]:
        return {
            "idp": self.idp,
            "issuer": self.issuer or self.idp,
            "email": self.email,
            "agent_id": self.agent_id,
            "key_path": self.key_path,
            "expires_at": self.expires_at,
            "logged_in": bool(self.token) and self.expires_at > time.time(),
        }


# -- keys --------------------------------------------------------------------------------------------


def load_private_key(path: str) -> Any:
    """An Ed25519 private key from an OpenSSH or PKCS#8 PEM file; clear errors otherwise."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise CliError(
            f"key file {path} does not exist (make one with: grantd agent keygen)", kind="key"
        ) from None
    except OSError as exc:
        raise CliError(f"cannot read key file {path}: {exc.strerror}", kind="key") from None
    encrypted = CliError(
        f"key file {path} is encrypted (has a passphrase); grantd needs an unencrypted agent key: "
        "make one with grantd agent keygen, or remove the passphrase with ssh-keygen -p -N '' -f FILE",
        kind="key",
    )
    try:
        if b"-----BEGIN OPENSSH PRIVATE KEY-----" in data:
            key: Any = serialization.load_ssh_private_key(data, password=None)
        elif b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in data:
            raise encrypted
        elif b"-----BEGIN PRIVATE KEY-----" in data:
            key = serialization.load_pem_private_key(data, password=None)
        else:
            raise CliError(f"key file {path} is neither an OpenSSH nor a PKCS#8 PEM private key", kind="key")
    except TypeError:
        raise encrypted from None  # cryptography: "Key is password-protected"
    except (ValueError, Exception) as exc:
        if isinstance(exc, CliError):
            raise
        if "encrypt" in str(exc).lower() or "password" in str(exc).lower() or "bcrypt" in str(exc).lower():
            raise encrypted from None
        raise CliError(f"key file {path} cannot be read as a private key: {exc}", kind="key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise CliError(
            f"key file {path} holds a {type(key).__name__.replace('_', '')}; agents use Ed25519 keys",
            kind="key",
        )
    return key


def public_line(key: Any, comment: str) -> str:
    from cryptography.hazmat.primitives import serialization

    return key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode() + (f" {comment}" if comment else "")

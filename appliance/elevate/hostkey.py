"""This host's Ed25519 key (D14 "Hosts"): `grantd elevate --init-host` makes it once, root-owned 0600,
and prints its public half as the OpenSSH `ssh-ed25519` line an administrator enrols
(`POST /api/hosts {host, publicKey}`); elevate signs its receipts with it.

The key file is never overwritten: a host's identity changes only when root removes the old key
on purpose. Its folder gets the same checks as elevate's config (root-owned, nobody else may write).
cryptography and the receipt format are imported only here, inside the functions (elevate's
`--help` and `--check-config` stay light: tests/unit/test_layers.py)."""

from __future__ import annotations

import contextlib
import os
import stat
from typing import Any

from grantd.elevate.config import ElevateConfig, check_root_owned
from grantd.elevate.errors import config_error

MAX_KEY_BYTES = 16 * 1024


def init_host(cfg: ElevateConfig) -> str:
    """Make the host key at ``cfg.host_key`` (refusing to overwrite anything there) and return its
    public OpenSSH line, named after the host."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from grantd.receipts import check_host_name, host_public_key_line

    path = cfg.host_key
    directory = os.path.dirname(path)
    try:
        check_host_name(cfg.host)
    except ValueError as exc:
        raise config_error(f"host {cfg.host!r} cannot name a receipt's signer: {exc}") from None
    try:
        check_root_owned(directory, "host key directory")
    except FileNotFoundError:
        raise config_error(f"host key directory {directory} does not exist") from None
    if os.path.lexists(path):
        raise config_error(
            f"host key {path} already exists: refusing to overwrite it (remove it first to make a new "
            "host identity, then enrol the new key)"
        )
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchown(fd, 0, 0)
        os.fchmod(fd, 0o600)
        os.write(fd, pem)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        try:
            os.link(tmp, path)  # fails if anything appeared at path meanwhile: never an overwrite
        except FileExistsError:
            raise config_error(f"host key {path} already exists: refusing to overwrite it") from None
    finally:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return f"{host_public_key_line(key)} {cfg.host}"


def load_host_key(path: str) -> Any:
    """The host's private key: a regular root-owned file nobody else may read or write (0600 or
    stricter) in a root-owned folder; anything else is a config error."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    check_root_owned(os.path.dirname(path), "host key directory")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise config_error(
            f"host key {path} does not exist (make it with grantd elevate --init-host)"
        ) from None
    except OSError as exc:
        raise config_error(f"cannot open the host key {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o077:
            raise config_error(
                f"host key {path} must be a regular root-owned file of mode 0600 "
                f"(it is uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})"
            )
        data = os.read(fd, MAX_KEY_BYTES)
    finally:
        os.close(fd)
    try:
        key = serialization.load_ssh_private_key(data, password=None)
    except (ValueError, TypeError):
        raise config_error(f"host key {path} is not an unencrypted OpenSSH private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise config_error(f"host key {path} is not an Ed25519 key")
    return key

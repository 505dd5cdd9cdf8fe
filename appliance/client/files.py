"""A client's private files: ``$XDG_CONFIG_HOME/grantd`` (default ``~/.config/grantd``) holds the
agent's token (agent.json) and a person's refresh token (session.json).

One rule for both: a file is written 0600 and atomically (a new file, then a rename: a crash never
leaves half a token, and there is no moment with wider permissions), in a directory that is
- made 0700 when it is new, and tightened to 0700 when it is grantd's own (someone loosened it);
- refused when it is another directory others may write to without the sticky bit (the file could
  be swapped under the client).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


class PrivateFileError(OSError):
    """A private file cannot be kept where it was asked for; the message says why, for a person."""


def config_dir() -> Path:
    """``$XDG_CONFIG_HOME/grantd``, else ``~/.config/grantd``."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "grantd"


def private_directory(directory: Path, *, own: bool = False) -> Path:
    """``directory``, made (or checked) fit to hold a private file (see the module's rule). ``own``:
    grantd's own directory although it is not ``config_dir()`` (a ``$GRANTD_SESSION_FILE``'s)."""
    created = not directory.exists()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if created or own or directory.resolve() == config_dir().resolve():
        os.chmod(directory, 0o700)  # owner only: it holds tokens
        return directory
    mode = directory.stat().st_mode
    if mode & (stat.S_IWGRP | stat.S_IWOTH) and not mode & stat.S_ISVTX:
        raise PrivateFileError(
            f"{directory} is writable by others: keep private files in a private directory"
        )
    return directory


def write_private(path: Path, data: bytes, *, own_directory: bool = False) -> None:
    """Write ``data`` to ``path`` 0600, atomically, in a private directory."""
    directory = private_directory(path.parent, own=own_directory)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}-", dir=directory)  # O_EXCL, created 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise

"""Private files and directories of the SQLite store (D12): the database, its companions, backups."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from grantd.store import StoreError

from .connection import DIR_MODE, FILE_MODE

log = logging.getLogger("grantd")


# -- file modes (D12) ---------------------------------------------------------------------------------
def _make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and any missing parents mode 0700 (only those this call creates)."""
    missing: list[Path] = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(d, DIR_MODE)


def _create_private_file(path: Path) -> bool:
    """Create ``path`` empty and 0600 unless it exists (SQLite then opens it as a new database and
    creates its -wal and -shm files with the same mode). True if this call created it."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, FILE_MODE)  # the umask may have taken bits away; never adds any
    finally:
        os.close(fd)
    return True


def _check_private(path: Path) -> None:
    """An existing file readable or writable by group or others is fixed to 0600 when this process
    owns it (with a warning); otherwise the store refuses to open."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o077:
        return
    loose = oct(stat.S_IMODE(st.st_mode))
    if st.st_uid == os.geteuid():
        try:
            os.chmod(path, FILE_MODE)
        except OSError:
            pass
        else:
            log.warning("%s was mode %s (it holds signing keys); changed it to 0600", path, loose)
            return
    raise StoreError(
        f"{path} is mode {loose}: readable or writable by group or others, and grantd cannot change that "
        f"(it holds signing keys). Run: chmod 600 {path}"
    )

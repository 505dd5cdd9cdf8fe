"""Private files and directories of a store (D12): a database file, its companions, backups.

The files hold signing keys: every backend creates them, and the directories it creates for them,
private to the service account, with these helpers (one place for the modes and the rule).
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from grantd.store import StoreError

log = logging.getLogger("grantd")

FILE_MODE = 0o600
DIR_MODE = 0o700


def make_private_dirs(directory: Path) -> None:
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


def create_private_file(path: Path) -> bool:
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


def check_private(path: Path) -> None:
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


def open_backup_target(file: Path) -> int:
    """A file descriptor, open for writing, on ``file`` mode 0600 in private directories: created
    here, or an existing empty file (``StoreError`` if it holds anything: a backup never overwrites)."""
    make_private_dirs(file.parent)
    try:
        fd = os.open(file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
    except FileExistsError:
        if file.stat().st_size:
            raise StoreError(f"backup target {file} exists and is not empty") from None
        fd = os.open(file, os.O_WRONLY)
    try:
        os.fchmod(fd, FILE_MODE)  # the umask may have taken bits away; an existing file may be looser
    except BaseException:
        os.close(fd)
        raise
    return fd

"""Who called `grantd elevate`: through sudo or not, the caller's ids, and acting with their
permissions (to open a --grant-file as them, not as root)."""

from __future__ import annotations

import contextlib
import os
import pwd
from collections.abc import Iterator


def through_sudo() -> bool:
    """Started by sudo (or any set-uid path): the caller is not root itself. The SUDO_* variables
    can be forged only by making this answer stricter, never laxer."""
    return bool(os.environ.get("SUDO_UID") or os.environ.get("SUDO_USER")) or os.getuid() != os.geteuid()


def caller_ids() -> tuple[int, int | None, str | None]:
    """(real uid, uid of the user who ran sudo, their name). Under sudo the real uid is 0."""
    uid = os.getuid()
    sudo_uid = os.environ.get("SUDO_UID")
    if uid == 0 and sudo_uid and sudo_uid.isdigit():
        return uid, int(sudo_uid), os.environ.get("SUDO_USER")
    return uid, None, None


@contextlib.contextmanager
def as_caller() -> Iterator[None]:
    """Open files with the permissions of the user who ran sudo, not root's."""
    _, sudo_uid, _ = caller_ids()
    if os.geteuid() != 0 or sudo_uid is None or sudo_uid == 0:
        yield
        return
    sudo_gid = int(os.environ.get("SUDO_GID", "") or pwd.getpwuid(sudo_uid).pw_gid)
    groups = os.getgroups()
    try:
        name = pwd.getpwuid(sudo_uid).pw_name
        os.setgroups(os.getgrouplist(name, sudo_gid))
    except KeyError:
        os.setgroups([sudo_gid])
    os.setegid(sudo_gid)
    os.seteuid(sudo_uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)
        os.setgroups(groups)

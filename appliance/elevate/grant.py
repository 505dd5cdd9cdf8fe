"""Reading the grant (the AuthZ-JWT): never from argv under sudo, bounded in size and time, a
--grant-file opened as the caller and only when it is theirs and private."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import stat

from grantd.elevate.caller import as_caller, caller_ids
from grantd.elevate.errors import EXIT_ERROR, DeadlineExceeded, Stop, deadline

MAX_TOKEN_BYTES = 16 * 1024
GRANT_IN_ARGV = (
    "--grant puts the token into the process list (/proc/PID/cmdline), where every local user can "
    "read and reuse it: under sudo use --grant-stdin, --grant-fd N or --grant-file FILE (0600, yours)"
)


def _read_fd(fd: int, *, one_line: bool) -> bytes:
    data = bytearray()
    while len(data) <= MAX_TOKEN_BYTES:
        chunk = os.read(fd, 1 if one_line else 4096)
        if not chunk:
            break
        if one_line and chunk == b"\n":
            break
        data += chunk
    if len(data) > MAX_TOKEN_BYTES:
        raise Stop(EXIT_ERROR, "usage", "grant is larger than 16 KiB")
    return bytes(data)


def _is_stream(fd: int) -> bool:
    with contextlib.suppress(OSError):
        mode = os.fstat(fd).st_mode
        return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
    return False


def _check_grant_file(fd: int, path: str) -> None:
    """A grant file must belong to the caller and be private: a token others can read is a token
    others can use (grantd run's FIFO is 0600 in a 0700 directory)."""
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        raise Stop(EXIT_ERROR, "usage", "--grant-file names a directory")
    uid, sudo_uid, _ = caller_ids()
    caller = sudo_uid if sudo_uid is not None else uid
    if st.st_uid != caller:
        raise Stop(
            EXIT_ERROR,
            "usage",
            f"--grant-file {path} is not owned by you (uid {caller}) but by uid {st.st_uid}",
        )
    if st.st_mode & 0o077:
        raise Stop(
            EXIT_ERROR,
            "usage",
            f"--grant-file {path} is readable or writable by others "
            f"(mode {stat.S_IMODE(st.st_mode):04o}): make it 0600",
        )


def split_grant(text: str) -> tuple[str, str | None]:
    """The AuthZ-JWT and its DPoP proof: a bare JWT, or the JSON line ``{"authz_jwt": ..., "dpop": ...}``
    `grantd run` writes for a bound grant (D16)."""
    if not text.startswith("{"):
        return text, None
    try:
        value = json.loads(text)
    except ValueError:
        raise Stop(EXIT_ERROR, "usage", "the grant line starts with { but is not JSON") from None
    if not isinstance(value, dict) or not isinstance(value.get("authz_jwt"), str) or not value["authz_jwt"]:
        raise Stop(EXIT_ERROR, "usage", 'the grant JSON line must be {"authz_jwt": JWT, "dpop": PROOF}')
    unknown = set(value) - {"authz_jwt", "dpop"}
    if unknown:
        raise Stop(
            EXIT_ERROR,
            "usage",
            f"the grant JSON line has unknown members: {', '.join(sorted(unknown))[:100]}",
        )
    dpop = value.get("dpop")
    if dpop is not None and (not isinstance(dpop, str) or not dpop):
        raise Stop(EXIT_ERROR, "usage", "dpop must be a DPoP proof (a JWT string)")
    return value["authz_jwt"].strip(), dpop


def read_grant(args: argparse.Namespace, timeout: float) -> str:
    stream = False
    try:
        with deadline(timeout):
            if args.grant is not None:
                raw = args.grant.encode()
            elif args.grant_fd is not None:
                if args.grant_fd < 3:
                    raise Stop(
                        EXIT_ERROR, "usage", "--grant-fd must be 3 or higher (use --grant-stdin for stdin)"
                    )
                try:
                    stream = _is_stream(args.grant_fd)
                    raw = _read_fd(args.grant_fd, one_line=False)
                finally:
                    with contextlib.suppress(OSError):
                        os.close(args.grant_fd)
            elif args.grant_stdin:
                # Byte by byte up to the first newline: whatever follows stays for the command.
                stream = _is_stream(0)
                raw = _read_fd(0, one_line=True)
            elif args.grant_file is not None:
                with as_caller():
                    fd = os.open(args.grant_file, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    _check_grant_file(fd, args.grant_file)
                    stream = _is_stream(fd)
                    raw = _read_fd(fd, one_line=False)
                finally:
                    os.close(fd)
            else:
                raise Stop(
                    EXIT_ERROR, "usage", "no grant given (--grant-stdin, --grant-fd, --grant-file or --grant)"
                )
    except DeadlineExceeded:
        raise Stop(EXIT_ERROR, "usage", f"no grant arrived within {timeout:g} s") from None
    except OSError as exc:
        raise Stop(EXIT_ERROR, "usage", f"cannot read the grant: {exc.strerror}") from None
    if not raw and stream:
        # The writer closed the pipe without writing a byte: it failed, and said why itself (as in
        # `grantd grant token ID | sudo -n grantd elevate --grant-stdin -- CMD` for a used once grant).
        # A second message from us would only confuse, so this one goes to the audit log alone.
        stop = Stop(EXIT_ERROR, "no_grant", "no grant: the sender closed the pipe without writing one")
        stop.quiet = True
        raise stop
    token = raw.decode("utf-8", "replace").strip()
    if not token:
        raise Stop(EXIT_ERROR, "usage", "the grant is empty")
    return token

"""Running the command: find the program, then fork; the child drops to the run_as user and
execs, the parent (still root) forwards signals, waits and audits how the command ended."""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

from grantd.elevate.audit import Audit
from grantd.elevate.errors import EXIT_ERROR, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, Stop, emit


def resolve_command(name: str, search_path: str) -> str:
    """Absolute path of the program, or Stop 127 (not found) / 126 (not executable)."""
    if "/" in name:
        if not os.path.exists(name):
            raise Stop(EXIT_NOT_FOUND, "not_found", f"command not found: {name}")
        if os.path.isdir(name) or not os.access(name, os.X_OK):
            raise Stop(EXIT_NOT_EXECUTABLE, "not_executable", f"not executable: {name}")
        return os.path.abspath(name)
    blocked = None
    for directory in search_path.split(":"):
        if not directory.startswith("/"):
            continue  # never the current directory
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate):
            if os.access(candidate, os.X_OK):
                return candidate
            blocked = blocked or candidate
    if blocked:
        raise Stop(EXIT_NOT_EXECUTABLE, "not_executable", f"not executable: {blocked}")
    raise Stop(EXIT_NOT_FOUND, "not_found", f"command not found: {name}")


def switch_user(user: pwd.struct_passwd) -> None:
    os.initgroups(user.pw_name, user.pw_gid)
    os.setgid(user.pw_gid)
    os.setuid(user.pw_uid)
    if user.pw_uid != 0:
        try:
            os.setuid(0)
        except PermissionError:
            pass
        else:
            raise Stop(EXIT_ERROR, "internal", "could not drop root privileges")


# Signals passed on to the command when someone sends them to us (kill, sudo relaying its own).
# Job control (TSTP, CONT, TTIN, TTOU) and WINCH are left alone: they reach the whole foreground
# process group, the command included, directly from the terminal.
FORWARDED = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
_SI_KERNEL = 0x80  # si_code of a signal the kernel (a terminal) generated for the whole process group


def run_command(
    program: str,
    argv: list[str],
    env: dict[str, str],
    user: pwd.struct_passwd,
    audit: Audit,
    on_end: Callable[[str, int, str | None], str | None] | None = None,
) -> int:
    """fork; the child drops to `user` and execs; we wait, forwarding signals, then audit how it ended.

    ``on_end(result, code, reason)`` (the receipt: exited with the status, signaled with the signal
    number, refused when the program could not be started) runs before the exit line, which records
    what it returns as ``receipt``; it never changes the status returned.

    The forwarded signals stay blocked here from before the fork (the child unblocks them), so
    none is lost and each is taken with sigtimedwait together with who sent it: a signal the
    terminal sent to the whole group already reached the command and is not sent twice."""
    err_read, err_write = os.pipe()  # close-on-exec: EOF without a byte means execve succeeded
    sys.stdout.flush()
    sys.stderr.flush()
    waited = {*FORWARDED, signal.SIGCHLD}
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    started = time.monotonic()
    try:
        pid = os.fork()
    except OSError as exc:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        os.close(err_read)
        os.close(err_write)
        reason = f"cannot start the command: {exc.strerror}"
        audit.exit(
            "error",
            reason,
            status=EXIT_ERROR,
            exit_code=EXIT_ERROR,
            duration_ms=0,
            **_receipt(on_end, "refused", EXIT_ERROR, reason),
        )
        raise Stop(EXIT_ERROR, "exec", reason) from None
    if pid == 0:  # the child: never returns
        _child(program, argv, env, user, err_write, previous_mask)
    os.close(err_write)
    report = bytearray()
    with os.fdopen(err_read, "rb") as fh:
        report += fh.read(4096)
    if report:  # the child could not exec: it said why and exits with 126/127/1
        os.waitpid(pid, 0)
        code_text, _, reason = bytes(report).decode("utf-8", "replace").partition(":")
        code = int(code_text) if code_text.isdigit() else EXIT_ERROR
        stop = Stop(
            code,
            {EXIT_NOT_FOUND: "not_found", EXIT_NOT_EXECUTABLE: "not_executable"}.get(code, "exec"),
            reason,
        )
        emit(stop)
        audit.exit(
            "error",
            reason,
            child_pid=pid,
            status=code,
            exit_code=code,
            duration_ms=int((time.monotonic() - started) * 1000),
            **_receipt(on_end, "refused", code, reason),
        )
        return code
    status = _wait_forwarding(pid, waited)
    duration_ms = int((time.monotonic() - started) * 1000)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        code = 128 + number
        audit.exit(
            "signalled",
            None,
            child_pid=pid,
            signal=number,
            signal_name=_signal_name(number),
            exit_code=code,
            duration_ms=duration_ms,
            **_receipt(on_end, "signaled", number, None),
        )
    else:
        code = os.waitstatus_to_exitcode(status)
        audit.exit(
            "exited",
            None,
            child_pid=pid,
            status=code,
            exit_code=code,
            duration_ms=duration_ms,
            **_receipt(on_end, "exited", code, None),
        )
    return code


def _receipt(
    on_end: Callable[[str, int, str | None], str | None] | None, result: str, code: int, reason: str | None
) -> dict[str, Any]:
    """The exit line's ``receipt`` field; nothing the receipt does may change how the run ends."""
    if on_end is None:
        return {}
    try:
        status = on_end(result, code, reason)
    except Exception as exc:  # noqa: BLE001 - a receipt never changes the command's exit status
        status = f"lost: {exc.__class__.__name__}: {exc}"
    return {} if status is None else {"receipt": status}


def _wait_forwarding(pid: int, waited: set[signal.Signals]) -> int:
    while True:
        info = signal.sigtimedwait(waited, 1.0)  # the timeout also covers a SIGCHLD merged with another
        if info is not None and info.si_signo != signal.SIGCHLD:
            if info.si_code != _SI_KERNEL and info.si_pid != pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, info.si_signo)  # not reaped yet, so the pid is still the command's
            continue
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return status


def _child(
    program: str,
    argv: list[str],
    env: dict[str, str],
    user: pwd.struct_passwd,
    err_write: int,
    mask: set[int | signal.Signals],
) -> NoReturn:
    """Between fork and exec: default signal dispositions, the caller's signal mask, the user's
    ids and groups, a sane umask; then execve. Any failure is reported through err_write."""
    code, reason = EXIT_ERROR, "internal error before exec"
    try:
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, *FORWARDED, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        switch_user(user)
        os.umask(os.umask(0o022) | 0o022)
        if not os.access(program, os.X_OK):
            code, reason = EXIT_NOT_EXECUTABLE, f"not executable by {user.pw_name}: {program}"
        else:
            os.execve(program, argv, env)  # noqa: S606 - the verified argv, no shell
    except Stop as stop:
        code, reason = stop.exit_code, stop.reason
    except OSError as exc:
        code = EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_NOT_EXECUTABLE
        reason = f"cannot execute {program}: {exc.strerror}"
    except BaseException as exc:  # noqa: BLE001 - nothing may escape a forked child
        reason = f"internal error before exec: {exc.__class__.__name__}"
    finally:
        with contextlib.suppress(BaseException):
            os.write(err_write, f"{code}:{reason}".encode()[:4000])
        os._exit(code)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)

"""Handing the AuthZ-JWT to `grantd elevate`: a pipe as root, a FIFO in a private directory through sudo."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from grantd.agent.errors import CliError

DEFAULT_ELEVATE_PATH = "/usr/local/bin/grantd"


# -- hand-off to grantd elevate ------------------------------------------------------------------------


def self_command() -> list[str]:
    """This grantd program, started so that the current directory and PYTHON* cannot change it."""
    if getattr(sys, "frozen", False):
        return [sys.executable]
    return [sys.executable, "-I", "-m", "grantd"]


def elevate_prefix(settings: dict[str, Any], given: str | None = None) -> tuple[list[str], bool]:
    """(command that runs `grantd`, whether we may exec it directly with an inherited pipe).

    The command is, first found: ``--elevate-command``, ``GRANTD_ELEVATE_COMMAND``, agent.toml's
    ``elevate_command``; else, as root, this very program; else ``sudo -n`` and agent.toml's
    ``elevate_path`` (default /usr/local/bin/grantd, where packaging/install puts it)."""
    configured = given or os.environ.get("GRANTD_ELEVATE_COMMAND") or settings.get("elevate_command")
    if configured:
        return (
            shlex.split(configured) if isinstance(configured, str) else [str(c) for c in configured]
        ), False
    if os.geteuid() == 0:
        return self_command(), True
    return ["sudo", "-n", str(settings.get("elevate_path") or DEFAULT_ELEVATE_PATH)], False


ELEVATE_HOW = (
    "name the command that runs grantd with --elevate-command CMD, GRANTD_ELEVATE_COMMAND or "
    'elevate_command in agent.toml (e.g. "sudo -n /opt/grantd/grantd"; as root, grantd run starts '
    "elevate itself), or install the bundle (sudo packaging/install)"
)


def elevate_missing(prefix: list[str]) -> str | None:
    """What is missing to start ``grantd elevate`` through ``prefix``, said before any grant is
    requested (a source checkout has no /usr/local/bin/grantd); None when every program is there."""
    if not prefix:
        return f"the elevate command is empty: {ELEVATE_HOW}"
    program = prefix[0]
    found = shutil.which(program)
    if found is None:
        return f"cannot run grantd elevate: {program} not found; {ELEVATE_HOW}"
    if os.path.basename(program) == "sudo":
        target = next((a for a in prefix[1:] if not a.startswith("-")), None)
        if target is None:
            return (
                f"cannot run grantd elevate: {shlex.join(prefix)} names no program after sudo; {ELEVATE_HOW}"
            )
        if os.path.isabs(target) and not os.access(target, os.X_OK):
            return (
                f"cannot run grantd elevate: it is reached through `{shlex.join(prefix)} elevate`, and {target} "
                f"does not exist or is not executable; {ELEVATE_HOW}"
            )
    return None


def hand_off(
    token: str,
    argv: list[str],
    settings: dict[str, Any],
    *,
    elevate_command: str | None = None,
    config: str | None = None,
) -> int:
    prefix, direct = elevate_prefix(settings, elevate_command)
    config_args = ["--config", config] if config else []
    sys.stdout.flush()
    sys.stderr.flush()
    if direct:
        # Root: the token goes into a pipe (it fits the pipe buffer), the read end is inherited.
        read_fd, write_fd = os.pipe()
        os.write(write_fd, token.encode())
        os.close(write_fd)
        os.set_inheritable(read_fd, True)
        command = [*prefix, "elevate", "--grant-fd", str(read_fd), *config_args, "--", *argv]
        try:
            os.execv(command[0], command)  # noqa: S606 - a fixed program and the user's argv, no shell
        except OSError as exc:
            raise CliError(f"cannot start {command[0]}: {exc.strerror}", kind="exec") from None
    # Through sudo: sudo closes inherited descriptors, so the token goes through a FIFO in a
    # directory only we can enter; elevate opens it with our permissions.
    directory = tempfile.mkdtemp(prefix="grantd-run-")
    fifo = os.path.join(directory, "grant")
    os.mkfifo(fifo, 0o600)
    command = [*prefix, "elevate", "--grant-file", fifo, *config_args, "--", *argv]
    try:
        try:
            child = subprocess.Popen(command)
        except OSError as exc:
            raise CliError(f"cannot start {command[0]}: {exc.strerror}", kind="exec") from None
        writer = threading.Thread(target=_feed_fifo, args=(fifo, token, child), daemon=True)
        writer.start()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's ^C reaches the child itself
        try:
            signal.signal(signal.SIGTERM, lambda *_: child.terminate())
            code = child.wait()
        finally:
            signal.signal(signal.SIGINT, previous)
        return code if code >= 0 else 128 - code
    finally:
        with contextlib.suppress(OSError):
            os.unlink(fifo)
        with contextlib.suppress(OSError):
            os.rmdir(directory)


def _feed_fifo(fifo: str, token: str, child: subprocess.Popen[bytes]) -> None:
    while child.poll() is None:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: no reader yet
            time.sleep(0.05)
            continue
        try:
            os.set_blocking(fd, True)
            os.write(fd, token.encode())
        except OSError as exc:  # elevate then reads an empty FIFO and stays quiet: this is the one message
            print(f"grantd: could not hand the token to grantd elevate: {exc.strerror}", file=sys.stderr)
        finally:
            os.close(fd)
        return

"""Several server processes on one port (``[server] workers`` > 1).

``grantd serve`` binds the listening socket once, starts ``workers - 1`` more server processes
that inherit it, and serves in its own process too: N peers, each one single-process Sanic server
accepting from the same socket (the kernel gives each new connection to one of them, as with
Sanic's own workers, which also share one socket). The first process also looks after the others:

- **Start.** A started process says so on a pipe once its server listens. One that exits before
  that failed to start (a broken plugin, too little memory): the whole server stops with an error,
  as it would with one process, instead of restarting it for ever.
- **Crash.** One that exits later is logged and replaced (at most ``MAX_RESTARTS`` a minute; more is
  a crash loop and stops the server).
- **Stop.** SIGTERM or SIGINT to the first process: every other process gets SIGTERM (Sanic's
  graceful stop: in-flight requests get ``graceful_shutdown_timeout`` less half a second, event
  streams end; a process still importing just ends), the first one stops the same way, and
  whatever still runs ``graceful_shutdown_timeout`` s after the signal is killed, so the server
  ends within its grace (D18; ``grantd.web.stopping.drain_time``). A second signal kills at once.
- **The first process dies** (SIGKILL, OOM): the others get SIGTERM from the kernel
  (``PR_SET_PDEATHSIG``) and also notice it within a second, so no orphan keeps the port.

Why not Sanic's worker manager (issue 14): it adds a process that holds the whole app and serves
nothing (~70 MiB), and two helpers of ``multiprocessing`` (19 and 13 MiB): two workers took
242 MiB at rest this way and take 122 MiB here (docs/performance.md). Its stop also needed
workarounds for signals that arrive while workers start (issue 12), which a plain process group
does not need.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from sanic import Sanic

from grantd.config import Config
from grantd.logs import LOGGER
from grantd.web.api import metrics as metrics_api
from grantd.web.app import StartupError, create_app_from_path, describe_startup_error, is_frozen, preflight
from grantd.web.children import die_with_parent as _die_with_parent
from grantd.web.children import log_failure as _log_failure
from grantd.web.heap import freeze_after_start
from grantd.web.sequencer import SequencerProcess
from grantd.web.state import state_of
from grantd.web.stopping import EarlyStop, Stopper, drain_time, exit_now, expected_twice, kill_after

log = logging.getLogger(LOGGER)

BACKLOG = 100  # Sanic's default listen backlog
SUPERVISE_EVERY = 0.5  # seconds between looks at the other processes
ORPHAN_CHECK_EVERY = 1.0  # seconds: a process whose first process is gone stops
MAX_RESTARTS = 5  # replaced crashed processes per RESTART_WINDOW before the server gives up
RESTART_WINDOW = 60.0
READY = b"r"


def listen_socket(host: str, port: int) -> socket.socket:
    """The one listening socket every process accepts from, inheritable by the others."""
    from sanic.server.socket import bind_socket

    sock = bind_socket(host, port, backlog=BACKLOG)
    sock.set_inheritable(True)
    return sock


@dataclass
class _Peer:
    """One of the other server processes, as the first process sees it."""

    index: int
    proc: subprocess.Popen[bytes]
    ready_fd: int  # read end of the pipe it writes READY to once it serves
    started: float
    ready: bool = False


@dataclass
class ProcessGroup:
    """The other ``count`` server processes of one ``grantd serve``, started and watched by the first."""

    config_path: str
    sock: socket.socket
    count: int
    grace: float
    peers: list[_Peer] = field(default_factory=list)
    stopping: bool = False
    failed: str | None = None  # why the group stopped on its own (a process that could not start)
    reaped: list[int] = field(default_factory=list)  # pids of exited processes not yet seen to (``attach``)
    _restarts: deque[float] = field(default_factory=deque)
    _stop_at: float | None = None

    # -- starting -------------------------------------------------------------------------------------
    def start(self) -> None:
        for index in range(1, self.count + 1):
            self.peers.append(self._spawn(index))

    def _spawn(self, index: int) -> _Peer:
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        command = [
            sys.executable,
            "-m",
            "grantd.web.processes",
            "--config",
            self.config_path,
            "--fd",
            str(self.sock.fileno()),
            "--ready-fd",
            str(write_fd),
            "--parent",
            str(os.getpid()),
        ]
        try:
            proc = subprocess.Popen(
                command, pass_fds=(self.sock.fileno(), write_fd), stdin=subprocess.DEVNULL
            )  # noqa: S603 - our own interpreter and module
        finally:
            os.close(write_fd)
        log.debug("started server process %d (pid %d)", index, proc.pid)
        return _Peer(index, proc, read_fd, time.monotonic())

    # -- watching -------------------------------------------------------------------------------------
    def check(self) -> str | None:
        """Look at every other process once: note the ones that now serve, replace the ones that
        crashed. Returns why the whole server must stop, or None."""
        if self.stopping:
            return None
        for i, peer in enumerate(self.peers):
            if not peer.ready:
                peer.ready = self._read_ready(peer)
                if peer.ready and all(p.ready for p in self.peers):
                    log.info("all %d server processes serving", self.count + 1)
            code = peer.proc.poll()
            if code is None:
                continue
            os.close(peer.ready_fd)
            metrics_api.process_gone(peer.proc.pid)
            self.reaped.append(peer.proc.pid)
            if not peer.ready:
                return f"server process {peer.index} (pid {peer.proc.pid}) exited with {_describe(code)} while starting"
            now = time.monotonic()
            while self._restarts and now - self._restarts[0] > RESTART_WINDOW:
                self._restarts.popleft()
            if len(self._restarts) >= MAX_RESTARTS:
                return (
                    f"server processes keep exiting ({MAX_RESTARTS} restarts within {RESTART_WINDOW:.0f} s)"
                )
            self._restarts.append(now)
            log.warning(
                "server process %d (pid %d) exited with %s; starting another",
                peer.index,
                peer.proc.pid,
                _describe(code),
            )
            self.peers[i] = self._spawn(peer.index)
        return None

    @staticmethod
    def _read_ready(peer: _Peer) -> bool:
        try:
            return os.read(peer.ready_fd, 1) == READY
        except OSError:  # BlockingIOError: nothing written yet
            return False

    # -- stopping -------------------------------------------------------------------------------------
    def stop(self) -> None:
        """SIGTERM to every other process (once); the deadline for all of them starts now."""
        if self.stopping:
            return
        self.stopping = True
        self._stop_at = time.monotonic()
        for peer in self.peers:
            if peer.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    peer.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.stopping = True
        for peer in self.peers:
            if peer.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    peer.proc.kill()

    def wait(self) -> None:
        """Until every other process has ended: the grace from the stop signal, then they are killed."""
        self.stop()
        assert self._stop_at is not None
        deadline = self._stop_at + kill_after(self.grace)
        for peer in self.peers:
            try:
                peer.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning(
                    "server process %d (pid %d) still running %s s after the stop signal: killing it",
                    peer.index,
                    peer.proc.pid,
                    kill_after(self.grace),
                )
                peer.proc.kill()
                peer.proc.wait()
            with contextlib.suppress(OSError):
                os.close(peer.ready_fd)


def _describe(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
    return f"code {code}"


def attach(app: Any, group: ProcessGroup, early: EarlyStop) -> None:
    """The first process's part: watch the others while serving, take the stop signals, stop the
    others with this server and wait for them."""
    import asyncio

    def kill_all(signum: int) -> None:
        group.kill()
        exit_now(signum)

    early.on_second = kill_all  # the group exists now
    stopper = Stopper(app, early=early, grace=drain_time(group.grace))

    async def watch(app: Any) -> None:
        while not group.stopping:
            why = group.check()
            while group.reaped:  # an inline sequencer's lease the dead process may hold
                await hand_back_lease(app, group.reaped.pop())
            if why is not None:
                group.failed = why
                log.error("%s; stopping", why)
                stopper.stop()
                return
            await asyncio.sleep(SUPERVISE_EVERY)

    @app.after_server_start
    async def start_watching(app: Any) -> None:
        state_of(app).process_group_watch = asyncio.get_running_loop().create_task(
            watch(app), name="grantd-process-group"
        )

    @app.before_server_stop
    async def stop_the_others(app: Any) -> None:  # however this server's stop began
        group.stop()


# -- the other processes -------------------------------------------------------------------------------
def separate_sequencer(config: Config) -> bool:
    """``[audit] sequencer = "process"``: the log is integrated by a process of its own, not by the
    server processes (the bundle, which cannot start a module, keeps it inline)."""
    return config.audit.sequencer == "process" and not is_frozen()


def serve_peer(config_path: str, fd: int, ready_fd: int, parent: int) -> None:
    """One of the other server processes: the app of ``config_path`` on the inherited socket."""
    import asyncio

    _die_with_parent(parent)
    early = EarlyStop(on_second=expected_twice)
    app = create_app_from_path(config_path)
    state_of(app).inline_sequencer = not separate_sequencer(state_of(app).config)
    freeze_after_start(app)
    sock = socket.socket(fileno=fd)
    app.prepare(sock=sock, single_process=True, access_log=False, motd=False, register_sys_signals=False)
    stopper = Stopper(app, early=early, grace=float(app.config.GRACEFUL_SHUTDOWN_TIMEOUT))

    @app.after_server_start
    async def say_ready(app: Sanic) -> None:
        with contextlib.suppress(OSError):
            os.write(ready_fd, READY)
            os.close(ready_fd)

        async def orphan_check() -> None:
            while os.getppid() == parent:  # noqa: ASYNC110 - polling the kernel: there is no event to wait on
                await asyncio.sleep(ORPHAN_CHECK_EVERY)
            log.warning("the first server process (pid %d) is gone: stopping", parent)
            stopper.stop()

        state_of(app).orphan_check = asyncio.get_running_loop().create_task(
            orphan_check(), name="grantd-orphan-check"
        )

    Sanic.serve_single(primary=app)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="grantd-server-process", description="one of `grantd serve`'s processes (internal)"
    )
    parser.add_argument("--config", required=True)
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--ready-fd", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        serve_peer(args.config, args.fd, args.ready_fd, args.parent)
    except Exception as exc:
        _log_failure(args.config, describe_startup_error(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())


async def hand_back_lease(app: Any, pid: int) -> None:
    """A process this one just reaped (a server process running the log inline, or the sequencer
    process) may have held the decision log's lease: a kill -9 or the OOM killer gave it no chance to
    give it up, and it would last up to 5 s more. Hand it back, so that another integrates at once."""
    services = state_of(app).services
    audit = services.audit if services is not None else None
    if audit is None:
        return
    try:
        await audit.release_for_dead(pid)
    except Exception as exc:  # the database is away: the lease runs out by itself
        log.warning("decision log: could not hand back the lease of process %d (%s)", pid, exc)


def watch_sequencer(app: Sanic, sequencer: SequencerProcess) -> None:
    """The first process starts the sequencer process once its server started (and its stop signals
    are handled), replaces it if it exits, and stops it after the server (``serve``'s ``finally``)."""
    import asyncio

    async def watch() -> None:
        while True:
            await asyncio.sleep(SUPERVISE_EVERY)
            dead = sequencer.check()
            if dead is not None:
                await hand_back_lease(app, dead)

    @app.after_server_start
    async def start_watching(app: Sanic) -> None:
        # Started here, once this process's stop signals are handled (Stopper takes them first): a
        # SIGTERM before that was held and stops the start (grantd.web.stopping), with no child of
        # this process running yet.
        sequencer.start()
        state_of(app).sequencer_watch = asyncio.get_running_loop().create_task(
            watch(), name="grantd-sequencer-watch"
        )

    @app.before_server_stop
    async def stop_watching(app: Sanic) -> None:
        task = state_of(app).sequencer_watch
        if task is not None:
            task.cancel()


def serve(config: Config, *, checked: bool = False) -> None:
    """Run the server until SIGTERM/SIGINT. ``checked``: ``preflight`` already ran (grantd serve
    runs it before its banner); otherwise it runs here. With ``workers`` > 1 this process is the
    first of a group sharing one socket (grantd.web.processes)."""
    if not checked:
        preflight(config)
    workers = config.server.workers
    single = is_frozen() or workers == 1
    if is_frozen() and workers > 1:
        log.warning("the bundle serves in one process; [server] workers = %d is ignored", workers)
    assert config.path is not None
    metrics_dir = metrics_api.prepare_process_dir(config, multiprocess=not single)
    early = EarlyStop()
    group = None
    sequencer = SequencerProcess(str(config.path)) if separate_sequencer(config) else None
    grace = float(config.server.graceful_shutdown_timeout)
    try:
        app = create_app_from_path(str(config.path))
        freeze_after_start(app)
        if sequencer is not None:
            state_of(app).inline_sequencer = False
            watch_sequencer(app, sequencer)
        if single:
            app.prepare(
                host=config.server.host,
                port=config.server.port,
                single_process=True,
                access_log=False,
                motd=False,
                register_sys_signals=False,
            )
            Stopper(app, early=early, grace=drain_time(grace))
        else:
            sock = listen_socket(config.server.host, config.server.port)
            group = ProcessGroup(str(config.path), sock, workers - 1, grace)
            app.prepare(
                sock=sock, single_process=True, access_log=False, motd=False, register_sys_signals=False
            )
            attach(app, group, early)
        log.info(
            "grantd listening on http://%s:%s (issuer %s, %d process%s)",
            config.server.host,
            config.server.port,
            config.server.issuer,
            1 if single else workers,
            "" if single else "es",
        )
        if early.requested:
            log.info("stopped before the server started")
            return
        if group is not None:
            group.start()
        Sanic.serve_single(primary=app)
        if group is not None and group.failed:
            raise StartupError(group.failed)
    finally:
        if group is not None:
            group.wait()
        if sequencer is not None:
            sequencer.stop(kill_after(grace))
        metrics_api.remove_process_dir(metrics_dir)

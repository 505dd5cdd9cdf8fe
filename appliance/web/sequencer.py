"""The decision log's sequencer in a process of its own (``[audit] sequencer = "process"``, issue 23).

Integrating an event into the log (encode its leaf, hash it, store the leaf and its new nodes, sign
a checkpoint) costs 15–30 µs of CPU; a grant request costs 300–400 µs. Done inside the server
processes, that was +6–24 % CPU per request on create, approve and consume (docs/performance.md).
``grantd serve`` therefore starts one more process that runs only ``AuditLog``'s loop, and the server
processes run none of it. Nothing else changes: the events are still written in each change's own
transaction (a kill -9 loses none), the store's lease still makes one sequencer the winner across
processes and nodes (each node's sequencer process competes for it), and a checkpoint still follows
an event within about a second. The first server process watches this one and starts another if
it exits (``SequencerProcess``) and hands back the lease a killed one still held; it gets SIGTERM
with the server processes, releases the lease and ends; it also ends when the first process dies
(``PR_SET_PDEATHSIG``, and a check every second).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field

from grantd.logs import LOGGER

log = logging.getLogger(LOGGER)

MAX_RESTARTS = 5  # per RESTART_WINDOW seconds; more, and the first process logs an error and stops trying
RESTART_WINDOW = 60.0
ORPHAN_CHECK_EVERY = 1.0


@dataclass
class SequencerProcess:
    """The sequencer process of one ``grantd serve``, started and watched by the first process."""

    config_path: str
    proc: subprocess.Popen[bytes] | None = None
    stopping: bool = False
    gave_up: bool = False
    _restarts: deque[float] = field(default_factory=deque)

    def start(self) -> None:
        command = [
            sys.executable,
            "-m",
            "grantd.web.sequencer",
            "--config",
            self.config_path,
            "--parent",
            str(os.getpid()),
        ]
        self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL)  # noqa: S603 - our own interpreter and module
        log.debug("started the decision log's sequencer process (pid %d)", self.proc.pid)

    def check(self) -> int | None:
        """Start another if it exited (bounded, so a sequencer that cannot start is not a loop); the
        pid of the one that exited, or None."""
        if self.stopping or self.gave_up or self.proc is None or self.proc.poll() is None:
            return None
        dead = self.proc.pid
        now = time.monotonic()
        while self._restarts and now - self._restarts[0] > RESTART_WINDOW:
            self._restarts.popleft()
        if len(self._restarts) >= MAX_RESTARTS:
            self.gave_up = True
            log.error(
                "the decision log's sequencer process keeps exiting (%d restarts within %.0f s): "
                "no new checkpoints from this node until grantd restarts",
                MAX_RESTARTS,
                RESTART_WINDOW,
            )
            return dead
        self._restarts.append(now)
        log.warning(
            "the decision log's sequencer process (pid %d) exited with %s; starting another",
            self.proc.pid,
            self.proc.returncode,
        )
        self.start()
        return dead

    def stop(self, grace: float) -> None:
        """SIGTERM, then wait up to ``grace`` seconds (it releases its lease), then kill."""
        self.stopping = True
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


async def _run(config_path: str, parent: int) -> None:
    from grantd.plugin_manager import build_plugin_manager, load_with_plugins
    from grantd.services.context import open_services
    from grantd.web.heap import freeze_start_up_heap

    config = load_with_plugins(config_path)  # the server's own view: its plugins, serve's overrides
    services = await open_services(config, build_plugin_manager(config))
    audit = services.audit
    assert audit is not None
    services.store.serving()
    freeze_start_up_heap()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    audit.start()
    try:
        while not stop.is_set() and os.getppid() == parent:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), ORPHAN_CHECK_EVERY)
    finally:
        await audit.close()  # gives the lease up: another node's sequencer takes over at once
        services.store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="grantd-sequencer",
        description="the decision log's sequencer process of `grantd serve` (internal)",
    )
    parser.add_argument("--config", required=True)
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args(argv)
    from grantd.web.children import die_with_parent, log_failure

    die_with_parent(args.parent)
    try:
        import logging.config

        from grantd.config import load
        from grantd.logs import log_config

        config = load(args.config)
        logging.config.dictConfig(log_config(config.log.level, config.log.format))
        asyncio.run(_run(args.config, args.parent))
    except Exception as exc:  # noqa: BLE001 - one error line; the first process starts another
        log_failure(args.config, f"decision log sequencer: {exc!r}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

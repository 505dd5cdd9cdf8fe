"""What every process `grantd serve` starts shares (the other server processes of
grantd.web.processes, the log's sequencer process of grantd.web.sequencer): ending with the first
process, and one error line when it cannot start."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys

from grantd.logs import LOGGER

log = logging.getLogger(LOGGER)


def die_with_parent(parent: int) -> None:
    """SIGTERM from the kernel when the first process dies (Linux); checked once against a parent
    that died before this ran."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        sys.exit(0)


def log_failure(config_path: str, message: str) -> None:
    """One error line, as the server's logs are written (text or JSON), for a process that failed
    before its app configured logging; the first process then stops the server."""
    import logging.config

    from grantd.logs import log_config

    try:
        from grantd.config import load

        fmt = load(config_path).log.format
    except Exception:  # noqa: BLE001 - the config the first process loaded; text if even that fails now
        fmt = "text"
    logging.config.dictConfig(log_config("INFO", fmt))
    log.error("server process cannot start: %s", message)

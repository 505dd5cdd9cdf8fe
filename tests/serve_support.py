"""`grantd serve` run as a newcomer runs it: in a directory with no config given, its stderr (the
banner, then the server's log) read line by line while it runs."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx

from conftest import GRANTD, ROOT


def serve_in(
    directory: Path, port: int, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], list[str]]:
    """`grantd serve --port P` in ``directory``; returns once it is ready and its banner is read, with
    a list that a reader thread fills with its stderr lines. ``env``: the environment (default this
    one without ``GRANTD_CONFIG``), with this checkout on ``PYTHONPATH``."""
    if env is None:
        env = {k: v for k, v in os.environ.items() if k != "GRANTD_CONFIG"}
    proc = subprocess.Popen(
        [*GRANTD, "serve", "--port", str(port)],
        cwd=directory,
        env={**env, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    stream = proc.stderr
    assert stream is not None
    threading.Thread(target=lambda: lines.extend(stream), daemon=True).start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    else:
        proc.kill()
        raise AssertionError("".join(lines))
    while time.monotonic() < deadline and not any("listening" in line for line in lines):
        time.sleep(0.05)  # the banner (printed before the server starts) has been read
    return proc, lines


def stop_serving(proc: subprocess.Popen[str], lines: list[str]) -> str:
    """SIGTERM, wait for it to end; everything it wrote to stderr."""
    proc.send_signal(signal.SIGTERM)
    proc.wait(20)
    time.sleep(0.2)  # the reader thread reaches the end of the pipe
    return "".join(lines)

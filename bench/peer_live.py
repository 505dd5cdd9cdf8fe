"""The peer's IdP beside grantd in the same run (issue 27): started fresh from its production build
(../shared/tools/peer: build-refidp.sh, start-refidp.sh) for every agent count of every round, and
driven by the same load generator (bench/load.py, dialect "peer"); plus the floor of this machine
measured in the same run (one Ed25519 verify in-process).

The peer is found through GRANTD_BENCH_PEER_SCRATCH (its build's SCRATCH; default
/work/scratch-peer) and GRANTD_BENCH_PEER_TOOLS (default ../shared/tools/peer beside the checkout).
When it is not built, `peer_missing()` says so in one line and the bench runs without it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

ROOT = Path(__file__).resolve().parent.parent
PEER_URL = "http://127.0.0.1:3300"
PEER_TOKEN = "refidp-management-token"


def scratch() -> Path:
    return Path(os.environ.get("GRANTD_BENCH_PEER_SCRATCH", "/work/scratch-peer"))


def tools() -> Path:
    default = ROOT.parent / "shared" / "tools" / "peer"
    return Path(os.environ.get("GRANTD_BENCH_PEER_TOOLS", str(default)))


def peer_missing() -> str | None:
    """None when the peer can be started, else why not (in words for the report)."""
    app = scratch() / "openape" / "apps" / "refidp" / ".output" / "server" / "index.mjs"
    if not (tools() / "start-refidp.sh").is_file():
        return f"the peer's start script is not at {tools()} (set GRANTD_BENCH_PEER_TOOLS)"
    if not app.is_file():
        return (
            f"the peer is not built ({app} is missing): run SCRATCH={scratch()} MIRROR=<bare clone of "
            f"openape> {tools() / 'build-refidp.sh'} (or set GRANTD_BENCH_PEER_SCRATCH)"
        )
    return None


@dataclass
class _Proc:
    pid: int


@dataclass
class PeerNode:
    """Looks like a started grantd server to the bench: url, proc.pid, directory (management token)."""

    url: str
    proc: _Proc
    directory: Path

    def stop(self) -> int | None:
        try:
            os.kill(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return None
        for _ in range(100):
            try:
                os.kill(self.proc.pid, 0)
            except ProcessLookupError:
                return 0
            time.sleep(0.05)
        os.kill(self.proc.pid, signal.SIGKILL)
        return -9


@dataclass
class PeerDeployment:
    """The peer as a bench deployment: one Node process (its whole tree is counted)."""

    storage: str = "peer"
    nodes: list[Any] = field(default_factory=list)
    postgres: Any = None

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def server_roots(self) -> list[int]:
        return [node.proc.pid for node in self.nodes]

    def postgres_roots(self) -> list[int]:
        return []

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def start_peer(directory: Path) -> PeerDeployment:
    """A fresh peer (empty store, its rate limiter off) on 127.0.0.1:3300."""
    why = peer_missing()
    if why:
        raise RuntimeError(why)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "management-token").write_text(PEER_TOKEN + "\n")
    done = subprocess.run(
        ["bash", str(tools() / "start-refidp.sh")],
        env={**os.environ, "SCRATCH": str(scratch())},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].isdigit():
        raise RuntimeError(f"the peer did not start: {done.stderr.strip()[-400:]}")
    return PeerDeployment(nodes=[PeerNode(PEER_URL, _Proc(int(lines[-1])), directory)])


def ed25519_verify_ms(calls: int = 2000) -> float:
    """CPU ms of one Ed25519 signature verification (cryptography/OpenSSL, as grantd does it):
    the irreducible work of every operation that checks a token, measured in the bench process."""
    key = Ed25519PrivateKey.generate()
    public = key.public_key()
    message = b"x" * 200  # about a JWT's signing input
    signature = key.sign(message)
    for _ in range(100):
        public.verify(signature, message)
    started = time.process_time()
    for _ in range(calls):
        public.verify(signature, message)
    return round((time.process_time() - started) * 1000 / calls, 4)

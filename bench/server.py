"""The servers under test: real `grantd serve` processes (tests/conftest.py's helpers), one or more
nodes on one database (a SQLite file, or a private PostgreSQL server started from
tests/support/postgres.py), and the CPU and memory of their process trees."""

from __future__ import annotations

import dataclasses
import importlib
import os
import shutil
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
STORAGES = ("sqlite", "postgres")
# Several nodes stand for one deployment behind a load balancer: one public URL for all of them,
# so a token minted at one node is accepted at the others.
SHARED_ISSUER = "http://grantd-bench.invalid"


def _tests_module(name: str) -> Any:
    """tests/conftest.py starts servers exactly as the test-suite does (free port, TOML config,
    management token file) and tests/support/postgres.py a private PostgreSQL server; the bench
    reuses both rather than keeping second copies."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    return importlib.import_module(name)


def _conftest() -> Any:
    return _tests_module("conftest")


def postgres_module() -> Any:
    return _tests_module("support.postgres")


def _disable_access_log(config_path: Path) -> None:
    """One access line per request would make logging a large share of what we measure.

    make_server's `extra=` is appended after the [storage] table, and the generated config already
    has a [log] table (TOML forbids declaring it twice), so the key is written into that table."""
    text = config_path.read_text()
    if "[log]\n" not in text:
        raise RuntimeError(f"{config_path}: no [log] table to put 'access = false' in")
    config_path.write_text(text.replace("[log]\n", "[log]\naccess = false\n", 1))


# The load comes from one address and 64 agents at thousands of requests/s: far beyond the abuse
# limits (D12), which would answer most of it 429. The bench measures the work, so by default they
# are off ("off"). "counted" keeps every rate limit on but out of reach, so each request pays for
# its counters (a store write per counted attempt, a read per bearer check) as in production; the
# bound on pending grants stays off there too (the bench leaves thousands pending on purpose).
RATE_LIMIT_KEYS = (
    "authenticate_per_agent",
    "authenticate_per_address",
    "enroll_per_address",
    "failed_bearer_per_address",
    "grants_per_agent",
    "verify_per_address",
    "passkey_per_address",
    "device_code_per_address",
    "sp_login_per_address",
    "token_per_address",
)
BOUND_KEYS = (
    "pending_per_agent",
    "pending_per_owner",
    "agents_per_person",
    "streams_per_principal",
    "streams_per_owner",
    "streams_per_process",
)
LIMIT_MODES = ("off", "counted")
OUT_OF_REACH = 1_000_000_000


def notify_down_table() -> str:
    """Issue 27 item 4: one mail channel whose SMTP server is down (a loopback port nobody listens
    on: every delivery attempt is refused and retried), so a grant's create writes its outbox rows
    and the delivery worker keeps trying while the bench measures."""
    import socket

    with socket.socket() as probe:  # a free port, closed again: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return (
        '[notify]\nmax_attempts = 8\n\n[[notify.channels]]\nid = "mail"\ntype = "smtp"\n'
        f'host = "127.0.0.1"\nport = {port}\nstarttls = false\nfrom = "grantd@example.com"\ntimeout = 2\n'
    )


def limits_table(mode: str) -> str:
    rate = 0 if mode == "off" else OUT_OF_REACH
    return (
        "[limits]\n"
        + "".join(f"{key} = {rate}\n" for key in RATE_LIMIT_KEYS)
        + "".join(f"{key} = 0\n" for key in BOUND_KEYS)
    )


def start_server(
    directory: Path,
    workers: int,
    storage: str | None = None,
    issuer: str | None = None,
    token: str | None = None,
    limits: str = "off",
    extra: str = "",
) -> Any:
    """A started `grantd serve` with `workers` processes, its token (and by default its SQLite file) in
    `directory`; `storage` replaces the lines of the [storage] table, `token` the management token,
    `extra` is more configuration (TOML tables)."""
    # GRANTD_BENCH_SERVER_PATH: a folder holding another `grantd` package (a copy of an earlier tree,
    # appliance/ as grantd/ with plugins/ inside) for the servers to run instead: "before" figures
    # measured with this same bench while the working tree changes.
    other = os.environ.get("GRANTD_BENCH_SERVER_PATH")
    env = {"PYTHONPATH": os.pathsep.join([other, str(ROOT), str(TESTS / "plugins")])} if other else None
    server = _conftest().make_server(
        directory, workers=workers, extra=limits_table(limits) + extra, storage=storage, env=env
    )
    _disable_access_log(server.config_path)
    if issuer:
        text = server.config_path.read_text()
        server.config_path.write_text(
            text.replace(f"port = {server.port}\n", f'port = {server.port}\nissuer = "{issuer}"\n', 1)
        )
    if token:
        server.token = token
        (directory / "management-token").write_text(token + "\n")
    return server.start(timeout=60)


@dataclass
class Deployment:
    """`nodes` grantd servers on separate ports sharing one database; `postgres` is the private
    PostgreSQL server when the storage is PostgreSQL (owned by the caller, not stopped here)."""

    storage: str
    nodes: list[Any] = field(default_factory=list)
    postgres: Any = None

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def server_roots(self) -> list[int]:
        return [node.proc.pid for node in self.nodes]

    def postgres_roots(self) -> list[int]:
        """The postmaster: its children are the backends, checkpointer, WAL writer, autovacuum."""
        if self.postgres is None:
            return []
        return [int((self.postgres.data / "postmaster.pid").read_text().split()[0])]

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def start_deployment(
    directory: Path,
    storage: str,
    nodes: int,
    workers: int,
    postgres: Any = None,
    pool_size: int | None = None,
    limits: str = "off",
    seeded: Any = None,
    extra: str = "",
) -> Deployment:
    """`nodes` servers of `workers` processes each on one database: a SQLite file in `directory`, or
    a new database on `postgres` (a started tests/support/postgres.py server). Started one after the
    other: the first migrates the schema and makes the signing key, the others find them.
    `seeded` (bench/seed.py): the database starts as a copy of that seeded one (a SQLite file, or
    the name of a PostgreSQL database used as the template) instead of empty."""
    directory.mkdir(parents=True, exist_ok=True)
    deployment = Deployment(storage, postgres=postgres if storage == "postgres" else None)
    if storage == "postgres":
        dsn_file = directory / "postgres-dsn"
        if seeded:
            name = "t_" + uuid.uuid4().hex[:16]
            postgres.admin_sql(f"CREATE DATABASE {name} TEMPLATE {seeded}")
            dsn = postgres.dsn(name)
        else:
            dsn = postgres.create_database()
        dsn_file.write_text(dsn + "\n")
        dsn_file.chmod(0o600)
        lines = f'plugin = "postgres"\ndsn = "file:{dsn_file}"'
        if pool_size:
            lines += f"\npool_size = {pool_size}"
    else:
        lines = f'plugin = "sqlite"\npath = "{directory / "grantd.db"}"'
        if seeded:
            shutil.copyfile(seeded, directory / "grantd.db")
    try:
        for i in range(nodes):
            first = deployment.nodes[0] if deployment.nodes else None
            deployment.nodes.append(
                start_server(
                    directory / f"node-{i}",
                    workers,
                    storage=lines,
                    issuer=SHARED_ISSUER if nodes > 1 else None,
                    token=first.token if first else None,
                    limits=limits,
                    extra=extra,
                )
            )
    except BaseException:
        deployment.stop()
        raise
    return deployment


def restart_profiled(server: Any, profile_to: Path) -> Any:
    """Stop the server and start it again on the same directory (same port, database, keys and
    tokens) under cProfile, so the profile holds the measured load and not the set-up before it.
    Only with workers = 1: then Sanic serves in the very process cProfile watches."""
    server.stop()
    command = [sys.executable, "-m", "cProfile", "-o", str(profile_to), "-m", "grantd"]
    return dataclasses.replace(server, command=command, proc=None).start(timeout=60)


def management_token(server: Any) -> str:
    return (Path(server.directory) / "management-token").read_text().strip()


# -- memory ------------------------------------------------------------------------------------------


def _children_by_parent() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                # the command name (field 2) may hold spaces and parentheses: split after the last ")"
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def process_tree(root: int) -> list[int]:
    tree = _children_by_parent()
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(tree.get(pid, []))
    return found


def rss_kib(pid: int) -> int:
    """Resident memory of one process; 0 once it has ended (it may end between listing and reading)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            lines = status.readlines()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in lines if line.startswith("VmRSS:")), 0)


def tree_cpu_seconds(roots: list[int]) -> float:
    """CPU time (user + system) of the process trees under `roots` so far, including children that
    have ended and been reaped (cutime, cstime: fields 16 and 17 of proc(5)). The trees are listed
    afresh at each reading, so the difference of two readings counts processes that started or
    ended in between (a PostgreSQL backend for a new pooled connection, say)."""
    tree = _children_by_parent()
    ticks = 0
    todo = list(roots)
    while todo:
        pid = todo.pop()
        todo.extend(tree.get(pid, []))
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def sequencer_cpu_seconds(roots: list[int]) -> float:
    """CPU time of the decision log's integration under `roots` (issue 23: `grantd serve` integrates
    the log in a process of its own, grantd.web.sequencer): the main thread of each sequencer
    process, where its steps run. That process's other thread checkpoints SQLite's WAL for every
    process of the server (what the serving processes' own checkpoint threads would otherwise do),
    so it stays with the rest of the tree, the processes that serve requests. Counting the whole
    process put up to a fifth of the serving processes' checkpointing on the log (stop 14)."""
    tree = _children_by_parent()
    ticks = 0
    todo = list(roots)
    while todo:
        pid = todo.pop()
        todo.extend(tree.get(pid, []))
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if b"grantd.web.sequencer" not in cmdline.read():
                    continue
            with open(f"/proc/{pid}/task/{pid}/stat") as stat:  # the main thread alone
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (a thread has no children)
    return ticks / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU time all cores have spent not idle since boot (the first line of /proc/stat)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    # guest time is already counted in user time, so only the first eight fields are summed
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def pss_kib(pid: int) -> int:
    """Proportional memory of one process (shared pages divided among their users): PostgreSQL's
    processes share its buffers, and summing their RSS would count those once per backend."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            lines = rollup.readlines()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in lines if line.startswith("Pss:")), 0)


class MemorySampler:
    """Samples the summed RSS (or PSS) of process trees every `interval` seconds in a thread and keeps
    the peak.

    The trees are re-listed once a second only: scanning all of /proc ten times a second would take
    CPU away from the load generator on a small machine."""

    def __init__(
        self,
        roots: int | list[int],
        interval: float = 0.1,
        relist_every: int = 10,
        proportional: bool = False,
    ):
        self.roots = [roots] if isinstance(roots, int) else list(roots)
        self.interval = interval
        self.relist_every = relist_every
        self.measure = pss_kib if proportional else rss_kib
        self.peak_kib = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)

    def _run(self) -> None:
        pids: list[int] = []
        while not self._stop.is_set():
            if self.samples % self.relist_every == 0:
                pids = [pid for root in self.roots for pid in process_tree(root)]
            self.peak_kib = max(self.peak_kib, sum(self.measure(pid) for pid in pids))
            self.samples += 1
            self._stop.wait(self.interval)

    def __enter__(self) -> MemorySampler:
        if self.roots:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    @property
    def peak_mib(self) -> float:
        return self.peak_kib / 1024

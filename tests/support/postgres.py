"""A real, private PostgreSQL server for the tests: Debian's `postgresql` package (``scripts/bootstrap``
installs it), a fresh cluster made with ``initdb`` in a temporary directory, started with
``pg_ctl`` on a free port that listens on no TCP address at all: its only door is a unix socket in
that directory (mode 0700), so no other local user reaches it. Running as root, the cluster belongs
to the ``postgres`` system user (PostgreSQL refuses to run as root); the tests connect over the
socket as the superuser ``grantd`` (trust authentication: only the socket's directory guards it).

``Postgres.create_database()`` gives a test an empty database of its own (about 0.7 s: CREATE
DATABASE copies a template and checkpoints); ``create_schema()`` an empty schema of the shared
``contract`` database, reached through the DSN's ``search_path`` (a few milliseconds: what the
contract suite uses for each of its hundreds of tests). ``stop()`` ends the server and removes
the directory.

``GRANTD_TEST_STORAGE=postgres`` runs every test server of the suite on PostgreSQL (``storage_for``,
at the end of this module).
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from support.ports import free_port

SUPERUSER = "grantd"


def find_bin(name: str) -> str | None:
    """A PostgreSQL server program: on PATH, else the newest of Debian's /usr/lib/postgresql/N/bin."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    return candidates[-1] if candidates else None


def available() -> str | None:
    """None when a server can be started here, else why not."""
    for name in ("initdb", "pg_ctl", "postgres"):
        if find_bin(name) is None:
            return f"PostgreSQL's {name} is not installed (scripts/bootstrap test installs the postgresql package)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root needs the postgres system user (created by the postgresql package)"
    return None


def require() -> None:
    """Fail (never skip) when no PostgreSQL can be started: scripts/bootstrap test installs it, so
    its absence is a broken set-up, not a reason to test less."""
    import pytest

    why = available()
    if why is not None:
        pytest.fail(why)


def _free_port() -> int:
    return free_port()  # outside the ephemeral range (tests/support/ports.py)


class Postgres:
    """One private PostgreSQL server (see the module docstring)."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="grantd-pg-"))
        self.data = self.directory / "data"
        self.socket_dir = str(self.directory)
        self.port = _free_port()
        self._owner: pwd.struct_passwd | None = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        self.started = False
        self._contract_db = False

    def _run(self, argv: Sequence[str], timeout: float = 120) -> None:
        """Run a server program as the cluster's owner (the postgres user when we are root)."""
        owner = self._owner
        result = subprocess.run(  # noqa: S603 - fixed programs, our own arguments
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.directory,
            user=owner.pw_uid if owner else None,
            group=owner.pw_gid if owner else None,
            extra_groups=[] if owner else None,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8", "TZ": "UTC"},
        )
        if result.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")

    def start(self) -> Postgres:
        if self._owner is not None:
            os.chown(self.directory, self._owner.pw_uid, self._owner.pw_gid)
        os.chmod(self.directory, 0o700)
        initdb, pg_ctl = find_bin("initdb"), find_bin("pg_ctl")
        assert initdb and pg_ctl
        self._run(
            [
                initdb,
                "-D",
                str(self.data),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            ]
        )
        options = " ".join(
            [
                "-c listen_addresses=''",  # no TCP at all: the socket in our 0700 directory is the only way in
                f"-c port={self.port}",
                f"-c unix_socket_directories='{self.socket_dir}'",
                "-c unix_socket_permissions=0777",  # the directory (0700) is what guards it
                "-c max_connections=400",
                "-c shared_buffers=16MB",
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off",  # a test database: speed over durability
                "-c log_min_messages=warning",
            ]
        )
        self._run(
            [
                pg_ctl,
                "-D",
                str(self.data),
                "-l",
                str(self.directory / "server.log"),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "start",
            ]
        )
        self.started = True
        return self

    def stop(self) -> None:
        try:
            if self.started:
                pg_ctl = find_bin("pg_ctl")
                assert pg_ctl
                self._run([pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop"], timeout=60)
                self.started = False
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host={self.socket_dir} port={self.port} user={SUPERUSER} dbname={dbname}"

    def log(self) -> str:
        path = self.directory / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def admin_sql(self, sql: str) -> None:
        """One statement as the superuser on the maintenance database (CREATE/DROP DATABASE)."""
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(sql.encode())

    def create_database(self) -> str:
        """A new empty database; returns its DSN."""
        name = "t_" + uuid.uuid4().hex[:16]
        self.admin_sql(f"CREATE DATABASE {name} TEMPLATE template0")
        return self.dsn(name)

    def drop_database(self, dsn: str) -> None:
        name = dsn.rsplit("dbname=", 1)[1]
        self.admin_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def create_schema(self) -> str:
        """A new empty schema in the ``contract`` database (made on first use); returns a DSN whose
        ``search_path`` is that schema alone, so every unqualified table name lands in it."""
        import psycopg

        if not self._contract_db:
            self.admin_sql("CREATE DATABASE contract TEMPLATE template0")
            self._contract_db = True
        name = "s_" + uuid.uuid4().hex[:16]
        with psycopg.connect(self.dsn("contract"), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}".encode())
        return f"{self.dsn('contract')} options='-csearch_path={name}'"

    def drop_schema(self, dsn: str) -> None:
        import psycopg

        name = dsn.rsplit("search_path=", 1)[1].rstrip("'")
        with psycopg.connect(self.dsn("contract"), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE".encode())


# -- the suite-wide switch: GRANTD_TEST_STORAGE=postgres ---------------------------------------------
#
# With GRANTD_TEST_STORAGE=postgres every test server that does not name its storage
# (conftest.make_server, inproc.InProcessServer) gets a fresh, empty database of its own on one
# PostgreSQL server per test *process*: started on first use, stopped when that process's session
# ends (conftest's pytest_sessionfinish, and atexit should a worker end otherwise). Why one per
# process and not one for the whole xdist run: a server shared by the workers needs a lock file, a
# leader that starts it and a last-one-out that stops it, and a crashed leader leaves the others
# without one; one per worker costs one initdb (~2 s) per worker and nothing else, and each
# worker's cluster lives and dies with that worker's session.

STORAGE_ENV = "GRANTD_TEST_STORAGE"
TEST_POOL_SIZE = 4  # connections per server process: hundreds of test servers share max_connections
_suite_server: list[Postgres] = []


def suite_storage() -> str:
    """The backend the suite's servers use: ``sqlite`` (the default) or ``postgres``."""
    value = os.environ.get(STORAGE_ENV, "sqlite").strip().lower() or "sqlite"
    if value not in ("sqlite", "postgres"):
        raise RuntimeError(f"{STORAGE_ENV}={value!r}: expected sqlite or postgres")
    return value


def suite_server() -> Postgres:
    """This process's PostgreSQL server for the switch, started on first use."""
    if not _suite_server:
        why = available()
        if why is not None:
            raise RuntimeError(f"{STORAGE_ENV}=postgres: {why}")
        server = Postgres().start()
        _suite_server.append(server)
        atexit.register(stop_suite_server)
    return _suite_server[0]


def stop_suite_server() -> None:
    while _suite_server:
        _suite_server.pop().stop()


def storage_for(directory: Path) -> str | None:
    """The ``[storage]`` lines for a test server in ``directory``: None (the caller's SQLite default)
    unless the switch says postgres; then a fresh database, its DSN in ``directory/postgres-dsn``
    (0600), referenced as ``file:`` the way an operator writes it. A server started again in the
    same directory keeps its database, as it keeps its SQLite file ``grantd.db``."""
    if suite_storage() != "postgres":
        return None
    dsn_file = directory / "postgres-dsn"
    if not dsn_file.exists():
        dsn_file.write_text(suite_server().create_database() + "\n")
        dsn_file.chmod(0o600)
    return f'plugin = "postgres"\ndsn = "file:postgres-dsn"\npool_size = {TEST_POOL_SIZE}'


def server_sql(directory: Path, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Run one statement (``?`` placeholders) in the database of the test server in ``directory``,
    whichever backend it has: its PostgreSQL database when ``storage_for`` gave it one, else its
    SQLite file ``grantd.db``. For tests that age a row instead of sleeping; returns the rows."""
    dsn_file = directory / "postgres-dsn"
    if dsn_file.exists():
        import psycopg

        with psycopg.connect(dsn_file.read_text().strip(), autocommit=True) as conn:
            cursor = conn.execute(query.replace("?", "%s").encode(), list(params))
            return list(cursor.fetchall()) if cursor.description else []
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(directory / "grantd.db")) as db, db:
        return list(db.execute(query, tuple(params)).fetchall())


def database_bytes(directory: Path) -> bytes:
    """Everything the database of the test server in ``directory`` holds, for tests that look for a
    secret that must not be stored: the raw bytes of SQLite's files (``grantd.db``, ``-wal``,
    ``-shm``), or every row of every table of its PostgreSQL database as text."""
    if (directory / "postgres-dsn").exists():
        tables = server_sql(directory, "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        return b"\n".join(
            str(row[0]).encode()
            for (table,) in tables
            for row in server_sql(directory, f'SELECT t::text FROM "{table}" t')
        )
    return b"".join(p.read_bytes() for p in sorted(directory.glob("grantd.db*")))


def open_store(directory: Path) -> Any:
    """The store of the test server in ``directory``, opened directly (not migrated): its
    PostgreSQL database when ``storage_for`` gave it one, else ``directory/grantd.db``. For tests
    that fill a database before the server starts."""
    if (directory / "postgres-dsn").exists():
        from grantd.plugins.storage_postgres import PostgresStore

        return PostgresStore((directory / "postgres-dsn").read_text().strip(), pool_size=2)
    from grantd.plugins.storage_sqlite import SQLiteStore

    return SQLiteStore(directory / "grantd.db")


def share_database(source: Path, target: Path) -> bool:
    """Point the test server in ``target`` at the PostgreSQL database of the one in ``source`` (both
    made by ``make_server`` under GRANTD_TEST_STORAGE=postgres); False, changing nothing, when
    ``source`` has no PostgreSQL database (the caller shares its SQLite file its own way)."""
    if not (source / "postgres-dsn").exists():
        return False
    shutil.copyfile(source / "postgres-dsn", target / "postgres-dsn")
    (target / "postgres-dsn").chmod(0o600)
    return True


def sqlite_only(why: str) -> Any:
    """A skip marker for a test about SQLite itself (its files, ``VACUUM INTO``, its PRAGMAs), skipped
    under GRANTD_TEST_STORAGE=postgres with ``why``: say what it tests and where PostgreSQL's
    counterpart is tested, if anywhere."""
    import pytest

    return pytest.mark.skipif(suite_storage() == "postgres", reason=f"about SQLite itself: {why}")

"""``PostgresStore``: the parts on one database, migrations, backup and restore, the backend hook."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grantd.hookspecs import hookimpl
from grantd.store import StoreError
from grantd.store.files import open_backup_target

from .agents import PostgresAgents, PostgresChallenges
from .ciba import PostgresCiba
from .connection import _Database, _on_store_loop
from .constants import CONNECT_TIMEOUT, MIGRATE_LOCK, PING_TIMEOUT
from .delegations import PostgresDelegations
from .grants import PostgresGrants
from .keys import PostgresKeys
from .migrations import MIGRATIONS
from .notify import PostgresNotify
from .oauth import PostgresConsents, PostgresDeviceCodes, PostgresOneTime, PostgresRefreshTokens
from .people import (
    PostgresCredentials,
    PostgresPeople,
    PostgresRegistrations,
    PostgresSessions,
    PostgresWebAuthnChallenges,
)
from .principals import _has_table
from .rates import PostgresRates
from .tlog import PostgresHosts, PostgresReceipts, PostgresTlog


# -- the store ------------------------------------------------------------------------------------------
def _find_pg_tool(name: str) -> str:
    """pg_dump or pg_restore: on PATH, else the newest of Debian's /usr/lib/postgresql/N/bin."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(
        Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), key=lambda p: int(p.parent.parent.name)
    )
    if not candidates:
        raise StoreError(f"{name} is not installed (Debian: apt-get install postgresql-client)")
    return str(candidates[-1])


def _tables() -> list[str]:
    """Every table the migrations create (and schema_migrations), for restore to replace."""
    names = ["schema_migrations"]
    for _, _, statements in MIGRATIONS:
        for statement in statements:
            words = statement.split()
            if words[:2] == ["CREATE", "TABLE"]:
                names.append(words[2])
    return names


class PostgresStore:
    """``grantd.store.Store`` on one PostgreSQL database; see grantd.store for each method's contract."""

    def __init__(self, dsn: str, pool_size: int = 10):
        if not dsn:
            raise StoreError("storage.dsn is empty")
        self._db = _Database(dsn, pool_size)
        self.keys = PostgresKeys(self._db)
        self.agents = PostgresAgents(self._db)
        self.challenges = PostgresChallenges(self._db)
        self.grants = PostgresGrants(self._db)
        self.delegations = PostgresDelegations(self._db)
        self.rates = PostgresRates(self._db)
        self.people = PostgresPeople(self._db)
        self.credentials = PostgresCredentials(self._db)
        self.sessions = PostgresSessions(self._db)
        self.registrations = PostgresRegistrations(self._db)
        self.webauthn_challenges = PostgresWebAuthnChallenges(self._db)
        self.onetime = PostgresOneTime(self._db)
        self.refresh_tokens = PostgresRefreshTokens(self._db)
        self.device_codes = PostgresDeviceCodes(self._db)
        self.ciba = PostgresCiba(self._db)
        self.tlog = PostgresTlog(self._db)
        self.hosts = PostgresHosts(self._db)
        self.receipts = PostgresReceipts(self._db)
        self.notify = PostgresNotify(self._db)
        self.consents = PostgresConsents(self._db)

    # -- lifecycle --------------------------------------------------------------------------------------
    async def migrate(self) -> list[int]:
        return await self._db.loop.run(self._migrate())

    async def _migrate(self) -> list[int]:
        """Under a session advisory lock: a second node waits, then finds the migrations applied."""
        import psycopg

        applied: list[int] = []
        async with await psycopg.AsyncConnection.connect(self._db.dsn, autocommit=True) as conn:
            await conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATE_LOCK,))
            try:
                await conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT, applied_at BIGINT)"
                )
                cur = await conn.execute("SELECT version FROM schema_migrations")
                done = {r[0] for r in await cur.fetchall()}
                for version, name, statements in MIGRATIONS:
                    if version in done:
                        continue
                    async with conn.transaction():
                        for statement in statements:
                            await conn.execute(statement.encode())
                        await conn.execute(
                            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, (extract(epoch FROM now()) * 1000)::bigint)",
                            (version, name),
                        )
                    applied.append(version)
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATE_LOCK,))
        return applied

    def schema_version(self) -> int:
        return self._db.loop.run_sync(self._schema_version(), CONNECT_TIMEOUT + 5)

    async def _schema_version(self) -> int:
        async with self._db.tx() as cur:
            if not await _has_table(cur, "schema_migrations"):
                return 0  # not migrated yet
            await cur.execute("SELECT max(version) AS v FROM schema_migrations")
            row = await cur.fetchone()
        return int(row["v"] or 0) if row else 0

    async def ping(self) -> bool:
        try:
            return await self._ping()
        except Exception:
            return False

    @_on_store_loop
    async def _ping(self) -> bool:
        async with self._db.tx(PING_TIMEOUT) as cur:
            await cur.execute("SELECT 1 AS x FROM schema_migrations LIMIT 1")
        return True

    def serving(self) -> None:
        """Called on the loop this process serves requests on: from now on the store's calls from
        that loop run on it, with connections of their own (``_Database.serve_here``). Nothing runs
        in the background until the event hub first waits for events (LISTEN)."""
        self._db.serve_here()

    def close(self) -> None:
        self._db.close()

    async def backup(self, target: str) -> None:
        """``pg_dump -Fc`` (a consistent snapshot; restore with ``pg_restore``) into a new file created
        0600 beforehand. The password, if the DSN has one, goes through PGPASSWORD, not argv."""
        await asyncio.to_thread(self._backup, Path(target))

    def _tool_args(self) -> tuple[str, dict[str, str]]:
        """The DSN for pg_dump/pg_restore without its password (that goes in PGPASSWORD, not argv)."""
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(self._db.dsn)
        password = params.pop("password", None)
        env = dict(os.environ)
        if password is not None:
            env["PGPASSWORD"] = str(password)
        return f"--dbname={make_conninfo('', **params)}", env

    def _backup(self, file: Path) -> None:
        dbname, env = self._tool_args()
        fd = open_backup_target(file)
        try:
            result = subprocess.run(  # noqa: S603 - pg_dump with our own arguments
                [_find_pg_tool("pg_dump"), "--format=custom", "--no-password", dbname],
                stdout=fd,
                stderr=subprocess.PIPE,
                env=env,
                check=False,
                timeout=3600,
            )
        finally:
            os.close(fd)
        if result.returncode != 0:
            file.unlink(missing_ok=True)
            raise StoreError(f"pg_dump failed: {result.stderr.decode(errors='replace').strip()}")

    async def restore(self, source: str) -> str:
        """Check ``source`` is a ``pg_dump -Fc`` archive of a grantd database with a schema version
        this grantd knows; refuse while another session uses the database (every grantd process
        keeps a pooled connection open); keep the current contents as a ``pg_dump`` beside
        ``source`` (``<source>.before-restore``, 0600); drop grantd's tables and ``pg_restore`` the
        archive in one transaction; migrate forward. The migration lock is held throughout, so a
        grantd starting meanwhile waits."""
        return await asyncio.to_thread(self._restore, Path(source))

    def _restore(self, source: Path) -> str:
        version = self._archive_version(source)
        known = max(v for v, _, _ in MIGRATIONS)
        if version > known:
            raise StoreError(
                f"{source} has schema version {version}, newer than this grantd knows ({known}): "
                "restore it with the grantd version that wrote it"
            )
        keep = Path(str(source) + ".before-restore")
        if keep.exists():
            raise StoreError(f"{keep} exists (the copy an earlier restore kept): move it away first")
        self._db.loop.run_sync(self._replace(source, keep), None)
        self._db.loop.run_sync(self._migrate(), None)
        return str(keep)

    def _archive_version(self, source: Path) -> int:
        """The highest schema_migrations version in the archive (pg_restore writes its rows as COPY data)."""
        result = subprocess.run(  # noqa: S603 - pg_restore with our own arguments
            [
                _find_pg_tool("pg_restore"),
                "--data-only",
                "--table=schema_migrations",
                "--file=-",
                str(source),
            ],
            capture_output=True,
            check=False,
            timeout=600,
        )
        if result.returncode != 0:
            raise StoreError(
                f"{source} is not a PostgreSQL backup of grantd (pg_restore: "
                f"{result.stderr.decode(errors='replace').strip()})"
            )
        versions, copying = [], False
        for line in result.stdout.decode(errors="replace").splitlines():
            if line.startswith("COPY ") and "schema_migrations" in line:
                copying = True
            elif copying and line == "\\.":
                copying = False
            elif copying and line.split("\t", 1)[0].isdigit():
                versions.append(int(line.split("\t", 1)[0]))
        if not versions:
            raise StoreError(f"{source} is not a backup of a grantd database (no schema_migrations)")
        return max(versions)

    async def _replace(self, source: Path, keep: Path) -> None:
        import psycopg

        async with await psycopg.AsyncConnection.connect(self._db.dsn, autocommit=True) as conn:
            cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (MIGRATE_LOCK,))
            row = await cur.fetchone()
            if not row or not row[0]:
                raise StoreError(
                    "the database is being migrated or restored by another grantd process: try again"
                )
            try:
                cur = await conn.execute(
                    """SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
                       AND pid != pg_backend_pid() AND backend_type = 'client backend'
                       AND application_name != %s""",
                    (self._db.app_name,),
                )
                others = await cur.fetchone()
                if others and others[0] > 0:
                    raise StoreError(
                        "the database is in use by another session (a running grantd server or command): "
                        "stop it first (systemctl stop grantd)"
                    )
                await asyncio.to_thread(self._backup, keep)
                dbname, env = self._tool_args()
                await conn.execute(("DROP TABLE IF EXISTS " + ", ".join(_tables()) + " CASCADE").encode())
                # The schema the tables live in exists already (a non-public schema is dumped with its
                # CREATE SCHEMA): restore everything of the archive but that entry.
                toc = await asyncio.to_thread(_restore_list_without_schema, source)
                try:
                    result = await asyncio.to_thread(
                        subprocess.run,
                        [
                            _find_pg_tool("pg_restore"),
                            "--single-transaction",
                            "--exit-on-error",
                            "--no-owner",
                            "--no-privileges",
                            "--no-password",
                            f"--use-list={toc}",
                            dbname,
                            str(source),
                        ],
                        capture_output=True,
                        env=env,
                        check=False,
                        timeout=3600,
                    )
                finally:
                    toc.unlink(missing_ok=True)
                if result.returncode != 0:
                    raise StoreError(
                        f"pg_restore failed (the previous contents are in {keep}): "
                        f"{result.stderr.decode(errors='replace').strip()}"
                    )
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATE_LOCK,))


def _restore_list_without_schema(source: Path) -> Path:
    """The archive's table of contents (``pg_restore --list``) without SCHEMA entries, in a 0600 file."""
    listing = subprocess.run(  # noqa: S603 - pg_restore with our own arguments
        [_find_pg_tool("pg_restore"), "--list", str(source)],
        capture_output=True,
        check=True,
        timeout=600,
    ).stdout.decode(errors="replace")
    kept = [line for line in listing.splitlines() if " SCHEMA " not in line]
    fd, name = tempfile.mkstemp(prefix="grantd-restore-", suffix=".list")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write("\n".join(kept) + "\n")
    return Path(name)


class _PostgresBackend:
    """The ``postgres`` storage backend: opens a PostgresStore. ``check_config`` (``grantd config
    validate``, D18) says what would stop ``serve``: psycopg missing, no DSN, or a database that
    cannot be reached or refuses the DSN (one connection, closed at once; nothing is written)."""

    @staticmethod
    def _preconditions(config: Any) -> list[str]:
        problems = []
        try:
            import psycopg  # noqa: F401
        except ImportError:
            problems.append(
                'storage.plugin: "postgres" needs psycopg 3: pip install "grantd[postgres]" '
                '(offline: pip install --no-index --find-links DIR "grantd[postgres]")'
            )
        if not config.storage.dsn:
            problems.append('storage.dsn: missing (e.g. dsn = "file:postgres-dsn" or "env:GRANTD_DSN")')
        return problems

    def check_config(self, config: Any) -> list[str]:
        problems = self._preconditions(config)
        if problems:
            return problems
        import psycopg

        try:
            psycopg.connect(
                config.storage.dsn,
                connect_timeout=int(CONNECT_TIMEOUT),
                application_name="grantd config validate",
            ).close()
        except psycopg.Error as exc:
            return [f"storage.dsn: cannot connect to PostgreSQL ({' '.join(str(exc).split())})"]
        return []

    def __call__(self, config: Any) -> PostgresStore:
        from grantd.config import ConfigError

        problems = self._preconditions(config)
        if problems:
            raise ConfigError(problems, config.path)
        return PostgresStore(config.storage.dsn, config.storage.pool_size)


@hookimpl
def storage_backends() -> dict[str, Callable[[Any], PostgresStore]]:
    return {"postgres": _PostgresBackend()}

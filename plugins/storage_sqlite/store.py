"""``SQLiteStore``: the parts on one file, migrations, backup and restore, the backend hook."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sqlite3
import threading
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grantd.hookspecs import hookimpl
from grantd.store import StoreError
from grantd.store.files import (
    FILE_MODE,
    check_private,
    create_private_file,
    make_private_dirs,
    open_backup_target,
)

if TYPE_CHECKING:
    # sqlite-utils runs the migrations only; a server process on a current schema never imports it
    # (4.5 MiB per process, issue 14).
    import sqlite_utils

from .agents import SQLiteAgents, SQLiteChallenges
from .ciba import SQLiteCiba
from .connection import (
    BUSY_TIMEOUT_MS,
    CHECKPOINT_INTERVAL,
    COMPANIONS,
    RESTART_WAIT_MS,
    WAL_RESTART_BYTES,
    _Database,
)
from .delegations import SQLiteDelegations
from .grants import SQLiteGrants
from .keys import SQLiteKeys
from .migrations import MIGRATIONS, _now_ms
from .notify import SQLiteNotify
from .oauth import SQLiteConsents, SQLiteDeviceCodes, SQLiteOneTime, SQLiteRefreshTokens
from .people import (
    SQLiteCredentials,
    SQLitePeople,
    SQLiteRegistrations,
    SQLiteSessions,
    SQLiteWebAuthnChallenges,
)
from .rates import SQLiteRates
from .tlog import SQLiteHosts, SQLiteReceipts, SQLiteTlog


def _size(file: Path) -> int:
    try:
        return file.stat().st_size
    except OSError:
        return 0


class SQLiteStore:
    """``grantd.store.Store`` on one SQLite file; see grantd.store for the contract of each method."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._use_lock: int | None = None
        try:
            if self.path != ":memory:":
                file = Path(self.path)
                make_private_dirs(file.parent)
                if not create_private_file(file):
                    check_private(file)
                for suffix in COMPANIONS:
                    check_private(Path(self.path + suffix))
                if not os.access(file, os.R_OK | os.W_OK):  # SQLite would open it read-only, silently
                    raise PermissionError(13, "not writable by this user", str(file))
                self._use_lock = _take_use_lock(file)
            self._db = _Database(self.path)
        except (OSError, sqlite3.Error) as exc:
            if self._use_lock is not None:
                os.close(self._use_lock)
            raise StoreError(_cannot_open(Path(self.path), exc)) from None
        self.keys = SQLiteKeys(self._db)
        self.agents = SQLiteAgents(self._db)
        self.challenges = SQLiteChallenges(self._db)
        self.grants = SQLiteGrants(self._db)
        self.delegations = SQLiteDelegations(self._db)
        self.rates = SQLiteRates(self._db)
        self.people = SQLitePeople(self._db)
        self.credentials = SQLiteCredentials(self._db)
        self.sessions = SQLiteSessions(self._db)
        self.registrations = SQLiteRegistrations(self._db)
        self.webauthn_challenges = SQLiteWebAuthnChallenges(self._db)
        self.onetime = SQLiteOneTime(self._db)
        self.refresh_tokens = SQLiteRefreshTokens(self._db)
        self.device_codes = SQLiteDeviceCodes(self._db)
        self.ciba = SQLiteCiba(self._db)
        self.consents = SQLiteConsents(self._db)
        self.tlog = SQLiteTlog(self._db)
        self.hosts = SQLiteHosts(self._db)
        self.receipts = SQLiteReceipts(self._db)
        self.notify = SQLiteNotify(self._db)
        self._checkpointer: threading.Thread | None = None
        self._stop_checkpoints = threading.Event()

    @cached_property
    def db(self) -> sqlite_utils.Database:
        """sqlite-utils over the store's connection, for the migrations."""
        import sqlite_utils

        return sqlite_utils.Database(self._db.conn, execute_plugins=False)

    # -- lifecycle ------------------------------------------------------------------------------------
    async def migrate(self) -> list[int]:
        return self.migrate_sync()

    def migrate_sync(self) -> list[int]:
        """Apply pending migrations in one write transaction: a second process waits for the lock,
        then finds them applied."""
        applied: list[int] = []
        with self._db.write() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT, applied_at INTEGER)"
            )
            done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
            for version, name, migration in MIGRATIONS:
                if version in done:
                    continue
                migration(self.db)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (version, name, _now_ms()),
                )
                applied.append(version)
        return applied

    def schema_version(self) -> int:
        try:
            row = self._db.conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
        except sqlite3.OperationalError:
            return 0  # not migrated yet
        return int(row[0] or 0)

    async def ping(self) -> bool:
        try:
            self._db.conn.execute("SELECT 1 FROM schema_migrations LIMIT 1").fetchall()
        except sqlite3.Error:
            return False
        return True

    def serving(self) -> None:
        """A server process starts: checkpoint the WAL in a background thread instead of inside
        whichever commit crosses the auto-checkpoint threshold (an fsync on the event loop)."""
        if self._checkpointer is not None or self.path == ":memory:":
            return
        for conn in (self._db.conn, self._db.wconn):
            conn.execute("PRAGMA wal_autocheckpoint = 0")
        self._checkpointer = threading.Thread(
            target=self._checkpoint_loop, name="sqlite-checkpoint", daemon=True
        )
        self._checkpointer.start()

    def _checkpoint_loop(self) -> None:
        conn = self._db.connect(0)
        wal = Path(f"{self.path}-wal")
        try:
            while not self._stop_checkpoints.wait(CHECKPOINT_INTERVAL):
                try:
                    if _size(wal) > WAL_RESTART_BYTES:  # see WAL_RESTART_BYTES: bound the -wal file
                        conn.execute(f"PRAGMA busy_timeout = {RESTART_WAIT_MS}")
                        try:
                            conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
                        finally:
                            conn.execute("PRAGMA busy_timeout = 0")
                    else:
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error:
                    continue  # busy with another process's checkpoint: next round
        finally:
            conn.close()

    def close(self) -> None:
        self.rates.close()
        self._stop_checkpoints.set()
        if self._checkpointer is not None:
            self._checkpointer.join(timeout=5)
        if self._db.wconn is not self._db.conn:
            self._db.wconn.close()
        self._db.conn.close()
        if self._use_lock is not None:
            os.close(self._use_lock)  # releases the shared lock
            self._use_lock = None

    async def backup(self, target: str) -> None:
        """``VACUUM INTO`` a new file created 0600 beforehand (SQLite would create it 0644), from a
        connection of its own in a thread: a copy of a large file must not stall the event loop."""
        await asyncio.to_thread(self._backup, Path(target))

    def _backup(self, file: Path) -> None:
        os.close(open_backup_target(file))  # VACUUM INTO fills the empty 0600 file
        conn = self._db.connect(BUSY_TIMEOUT_MS)
        try:
            conn.execute("VACUUM INTO ?", (str(file),))
        finally:
            conn.close()
        os.chmod(file, FILE_MODE)

    async def restore(self, source: str) -> str:
        """Check ``source`` is a grantd database this version knows, keep the current contents as
        ``<database>.before-restore`` (0600), copy ``source`` over the live file with SQLite's
        backup API (through SQLite, so the -wal and -shm files stay consistent) and migrate it
        forward. Refused while any other process has the database open: every ``SQLiteStore``
        holds a shared ``flock`` on the file for its life, and this one must turn its own into an
        exclusive one without waiting."""
        if self.path == ":memory:":
            raise StoreError("an in-memory database has nothing to restore into")
        return await asyncio.to_thread(self._restore, Path(source))

    def _restore(self, source: Path) -> str:
        version = _backup_schema_version(source)
        known = max(v for v, _, _ in MIGRATIONS)
        if version > known:
            raise StoreError(
                f"{source} has schema version {version}, newer than this grantd knows ({known}): "
                "restore it with the grantd version that wrote it"
            )
        keep = Path(self.path + ".before-restore")
        if keep.exists():
            raise StoreError(f"{keep} exists (the copy an earlier restore kept): move it away first")
        assert self._use_lock is not None
        try:
            fcntl.flock(self._use_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreError(
                f"{self.path} is in use by another process (a running grantd server or command): "
                "stop it first (systemctl stop grantd)"
            ) from None
        try:
            self._backup(keep)
            with contextlib.closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as src:
                src.backup(self._db.conn)
            self._db.conn.execute("PRAGMA journal_mode = WAL")
            self.migrate_sync()
            self._db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            fcntl.flock(self._use_lock, fcntl.LOCK_SH)
        os.chmod(self.path, FILE_MODE)
        return str(keep)


def _take_use_lock(file: Path) -> int:
    """A shared ``flock`` on the database file for the life of the store (SQLite's own locks are
    POSIX record locks, which flock does not touch): ``restore`` needs it exclusively, so a
    restore refuses while a server runs, and a server does not open a file being restored."""
    fd = os.open(file, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreError(f"{file} is being restored (grantd db restore); try again when it is done") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _cannot_open(file: Path, exc: BaseException) -> str:
    """One line that says which file or directory is wrong and why."""
    directory = file.parent
    if isinstance(exc, OSError):
        where = exc.filename or file
        reason = exc.strerror or str(exc)
    else:
        where, reason = file, str(exc)
    hint = ""
    if not os.access(directory, os.W_OK | os.X_OK):
        hint = f"; the directory {directory} must be writable by this user (SQLite creates -wal and -shm files there)"
    elif file.exists() and not os.access(file, os.R_OK | os.W_OK):
        hint = f"; {file} must be readable and writable by this user"
    elif "readonly" in reason or "read-only" in reason.lower():
        hint = f"; the file system of {directory} is read-only, or {file} is not writable"
    return f"cannot open the SQLite database {where}: {reason}{hint}"


def _backup_schema_version(source: Path) -> int:
    """The schema version of a grantd SQLite database (a backup), or a StoreError saying why it is not one."""
    if not source.is_file():
        raise StoreError(f"{source}: no such file")
    try:
        with contextlib.closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as conn:
            if conn.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise StoreError(f"{source} is a damaged SQLite database (PRAGMA quick_check failed)")
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not {"schema_migrations", "signing_keys", "grants"} <= tables:
                raise StoreError(f"{source} is an SQLite database but not a grantd one (no grantd tables)")
            row = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{source} is not a grantd database ({exc})") from None
    if not row or not row[0]:
        raise StoreError(f"{source} is not a grantd database (no schema version)")
    return int(row[0])


SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file


class _SQLiteBackend:
    """The ``sqlite`` storage backend: opens an SQLiteStore; ``check_config`` says, without creating
    anything, what would stop it (``grantd config validate`` and ``serve`` alike, D18)."""

    def check_config(self, config: Any) -> list[str]:
        file = Path(config.resolve_path(config.storage.path))
        try:
            return self._problems(file)
        except OSError as exc:
            return [f"storage.path: {_cannot_open(file, exc)}"]

    @staticmethod
    def _problems(file: Path) -> list[str]:
        if file.exists():
            if file.is_dir():
                return [f"storage.path: {file} is a directory, not a database file"]
            if not os.access(file, os.R_OK | os.W_OK):
                return [f"storage.path: {file} must be readable and writable by this user"]
            with file.open("rb") as opened:
                header = opened.read(len(SQLITE_HEADER))
            if header and header != SQLITE_HEADER:  # an empty file is a new database to SQLite
                return [f"storage.path: {file} is not an SQLite database (file is not a database)"]
            return []
        directory = file.parent
        while not directory.exists() and directory != directory.parent:
            directory = directory.parent
        if not directory.is_dir() or not os.access(directory, os.W_OK | os.X_OK):
            return [
                f"storage.path: cannot create {file}: {directory} is not a directory this user may write to"
            ]
        return []

    def __call__(self, config: Any) -> SQLiteStore:
        return SQLiteStore(config.resolve_path(config.storage.path))


@hookimpl
def storage_backends() -> dict[str, Callable[[Any], SQLiteStore]]:
    return {"sqlite": _SQLiteBackend()}

"""The abuse-limit counters of D12 in a table of shared memory beside the SQLite file.

Why: a counted request (verify, sign-in, a grant request, ``/token``) wrote its counter in the
database: a write transaction of ~15-30 µs that also queued behind (and held up) every grant write
for SQLite's one write lock, and made every other process re-read its page cache. Counters need
no durability (a window lasts a minute; PostgreSQL keeps them UNLOGGED), only exactness across
every process that opens the file. So they live in ``<database>-limits``: a fixed table of slots
mapped into every process (``mmap``), changed only under an exclusive ``fcntl`` lock on that file,
which the kernel releases if a process dies. A hit is one lock, a hash and one or two slots read
and written: ~3-5 µs (docs/performance.md).

Layout: a header (magic, a random hashing key, the latest ``now`` any hit saw, the end of the
last counter kept in the database), then ``SLOTS`` slots of (key digest, window start, window end,
count). A key's digest is a keyed BLAKE2b, so no caller can aim keys at another's slots; a key
lives in one of ``PROBE`` slots from its home slot; a slot whose window ended is free.

Exactness when the table is full: if all ``PROBE`` slots of a key hold live counters of other
keys (tens of thousands of addresses within one window), the hit is counted in the database's
``rate_counters`` table as before, still under the table's lock, and the header remembers until
when such counters live; a key that later finds a free slot starts from its database count. So
no flood of addresses can reset anyone's counter.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import mmap
import os
import secrets
import sqlite3
import struct
import time
from collections.abc import Callable
from pathlib import Path

from grantd.store.files import FILE_MODE, check_private

MAGIC = b"grantd-limits-1\0"
HEADER = struct.Struct("<16s16sqq")  # magic, hashing key, latest now, database counters live until
SLOT = struct.Struct("<16sqqq")  # key digest, window start, window end, count
HEADER_SIZE = 64
SLOTS = 1 << 16  # 2.5 MiB of file; the pages never touched take no memory
PROBE = 32
_NOW_AT = 32  # offset of "latest now" in the header
_FALLBACK_AT = 40  # offset of "database counters live until"
_ANY = struct.Struct("<q")
LOCK_WAIT_S = 10.0  # as long as a write waits for SQLite's lock (connection.BUSY_TIMEOUT_MS)

# the database's own counters (the table is full, or they were counted before this file existed)
DatabaseHit = Callable[[str, int, int, int], int]  # (key, window start, window ms, now) -> count
DatabaseCount = Callable[[str, int], int]


def _new_header(database_until: Callable[[], int]) -> bytes:
    """A new table's header: a new hashing key, no hit seen yet, the database's live counters."""
    return HEADER.pack(MAGIC, secrets.token_bytes(16), 0, database_until())


class CounterTable:
    def __init__(self, path: Path, database_until: Callable[[], int]):
        """``database_until``: when the database's live counters end (read once, when this call
        creates the file: counters counted there before it existed keep counting)."""
        self._slots = SLOTS  # read at opening: the tests that fill a table make it smaller
        size = HEADER_SIZE + self._slots * SLOT.size
        check_private(path)
        for _ in range(5):  # another process may replace the file between our open and our lock
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)
            try:
                os.fchmod(fd, FILE_MODE)
                fcntl.lockf(fd, fcntl.LOCK_EX)
                try:
                    mapped = self._map_locked(fd, path, size, database_until)
                finally:
                    fcntl.lockf(fd, fcntl.LOCK_UN)
            except BaseException:
                os.close(fd)
                raise
            if mapped is not None:
                self._fd, self._map = fd, mapped
                self._secret = bytes(mapped[16:32])
                return
            os.close(fd)
        raise OSError(f"{path}: replaced again and again while opening it")

    @staticmethod
    def _map_locked(fd: int, path: Path, size: int, database_until: Callable[[], int]) -> mmap.mmap | None:
        """The table of the file ``fd`` (locked), made when it is new; None when ``path`` is now
        another file (look again). A file of another layout (another grantd version) is replaced by
        a new one under its name, never shrunk: a process that maps it would die of SIGBUS."""
        found = os.fstat(fd)
        try:
            if os.stat(path).st_ino != found.st_ino:
                return None
        except FileNotFoundError:
            return None
        if found.st_size == 0:  # new: nobody maps an empty file
            os.ftruncate(fd, size)
            os.pwrite(fd, _new_header(database_until), 0)
        elif found.st_size != size or os.pread(fd, len(MAGIC), 0) != MAGIC:
            fresh = path.with_name(f"{path.name}.{os.getpid()}.new")
            new = os.open(
                fresh, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE
            )
            try:
                os.fchmod(new, FILE_MODE)
                os.ftruncate(new, size)
                os.pwrite(new, _new_header(database_until), 0)
            finally:
                os.close(new)
            os.replace(fresh, path)
            return None
        return mmap.mmap(fd, size)

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)

    async def _lock(self) -> mmap.mmap:
        """The table's lock, waited for with ``asyncio.sleep``: a holder descheduled (or stopped)
        in the middle of its few microseconds must not freeze this process's event loop in the
        kernel. The caller changes the table and unlocks without awaiting in between, so no other
        task of this process (``fcntl`` locks are per process) can come in."""
        delay, deadline = 0.0001, 0.0
        while True:
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self._map
            except (BlockingIOError, PermissionError):  # EAGAIN or EACCES: another process holds it
                now = time.monotonic()
                deadline = deadline or now + LOCK_WAIT_S
                if now > deadline:
                    raise sqlite3.OperationalError(
                        f"abuse-limit counters are locked (waited {LOCK_WAIT_S:.0f} s)"
                    ) from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.001)

    def _unlock(self) -> None:
        fcntl.lockf(self._fd, fcntl.LOCK_UN)

    def _digest(self, key: str) -> tuple[bytes, int]:
        digest = hashlib.blake2b(key.encode(), digest_size=16, key=self._secret).digest()
        return digest, int.from_bytes(digest[:8], "little") % self._slots

    async def hit(
        self,
        key: str,
        window_start: int,
        window_ms: int,
        now: int,
        database: DatabaseHit,
        count: DatabaseCount,
    ) -> int:
        digest, home = self._digest(key)
        unpack, pack, slots = SLOT.unpack_from, SLOT.pack_into, self._slots
        table = await self._lock()
        try:
            if _ANY.unpack_from(table, _NOW_AT)[0] < now:
                _ANY.pack_into(table, _NOW_AT, now)
            free = -1
            for probe in range(PROBE):
                at = HEADER_SIZE + ((home + probe) % slots) * SLOT.size
                held, start, end, counted = unpack(table, at)
                if end > now:
                    if held == digest and start == window_start:
                        pack(table, at, digest, start, end, counted + 1)
                        return counted + 1
                elif free < 0:
                    free = at
            database_until = _ANY.unpack_from(table, _FALLBACK_AT)[0]
            if free < 0:  # every slot of this key is live: count it in the database
                counted = database(key, window_start, window_ms, now)
                if database_until < window_start + window_ms:
                    _ANY.pack_into(table, _FALLBACK_AT, window_start + window_ms)
                return counted
            before = count(key, window_start) if database_until > now else 0
            pack(table, free, digest, window_start, window_start + window_ms, before + 1)
            return before + 1
        finally:
            self._unlock()

    async def count(self, key: str, window_start: int, count: DatabaseCount) -> int:
        digest, home = self._digest(key)
        table = await self._lock()
        try:
            latest = _ANY.unpack_from(table, _NOW_AT)[0]
            for probe in range(PROBE):
                at = HEADER_SIZE + ((home + probe) % self._slots) * SLOT.size
                held, start, end, counted = SLOT.unpack_from(table, at)
                if held == digest and start == window_start and end > latest:
                    return int(counted)
            if _ANY.unpack_from(table, _FALLBACK_AT)[0] > latest:
                return count(key, window_start)
            return 0
        finally:
            self._unlock()

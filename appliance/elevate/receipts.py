"""Receipts (D14 "Hosts"): after every attempt tied to a grant, elevate signs what happened with the
host key (the format: grantd.receipts) and posts it to the issuer's `POST /api/audit/receipts`
with a short timeout (`receipt_timeout`). What cannot be delivered now is spooled: one 0600 file
per receipt in a root-owned 0700 folder (`receipt_spool`), at most MAX_SPOOLED of them, and sent
first by the next attempt or by `grantd elevate --flush-receipts`. Nothing here changes how an
attempt ends: every failure becomes a word in the audit line ("sent", "spooled", ...).

Answers: 201 (new) and 200 (a repeat, which adds nothing) are delivered; 403 (the host is not
enrolled yet), 408, 429, a 5xx or no answer keep the receipt spooled; any other 4xx (a bad
signature, a malformed receipt) would never be accepted, so it is dropped with a warning."""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat
import sys
import time
from dataclasses import dataclass
from typing import Any

from grantd.elevate.config import ElevateConfig, check_root_owned
from grantd.elevate.errors import Stop, config_error
from grantd.elevate.net import NetworkError, http_request

MAX_SPOOLED = 1000
FLUSH_PER_ATTEMPT = 50  # an attempt sends at most this many spooled receipts; --flush-receipts sends them all
MAX_RECEIPT_BYTES = 16 * 1024
MAX_ID = 256  # longer grant ids or jtis come from no real grant: no receipt for them
_KEEP = {403, 408, 429}


def receipts_enabled(cfg: ElevateConfig) -> bool:
    """`receipts` when set, else on exactly when the host key exists."""
    return cfg.receipts if cfg.receipts is not None else os.path.lexists(cfg.host_key)


def check_spool_dir(path: str, *, create: bool) -> bool:
    """The spool must be a root-owned directory of mode 0700 (not a symlink) in a root-owned folder.
    Returns False when it does not exist (and ``create`` is False). With ``create``, a missing parent
    (/var/lib/grantd on a fresh host) is made root 0755."""
    parent = os.path.dirname(path)
    if not os.path.lexists(parent):
        if not create:
            return False
        os.makedirs(parent, mode=0o755, exist_ok=True)
    check_root_owned(parent, "receipt spool's parent directory")
    if create and not os.path.lexists(path):
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o077:
        raise config_error(
            f"receipt spool {path} must be a root-owned directory of mode 0700 "
            f"(it is uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}"
            f"{', a symlink' if stat.S_ISLNK(st.st_mode) else ''})"
        )
    return True


def check_receipt_config(cfg: ElevateConfig) -> dict[str, Any]:
    """For --check-config: whether receipts are on, and the host key and spool pass their checks."""
    from grantd.elevate.hostkey import load_host_key

    enabled = receipts_enabled(cfg)
    if enabled:
        load_host_key(cfg.host_key)
    if enabled or os.path.lexists(cfg.receipt_spool):
        check_spool_dir(cfg.receipt_spool, create=False)
    return {
        "receipts": enabled,
        "host_key": cfg.host_key,
        "receipt_spool": cfg.receipt_spool,
        "receipt_timeout": cfg.receipt_timeout,
    }


@dataclass
class Attempt:
    """What the receipt of one attempt says (filled in as elevate learns it)."""

    started_at: float
    issuer: str | None = None
    grant_id: str | None = None
    authz_jti: str = ""
    cmd_hash: str = ""
    run_as: str = "root"


def _warn(text: str) -> None:
    print(json.dumps({"warning": text}), file=sys.stderr, flush=True)


def _audience(token: str) -> str | None:
    """A spooled receipt's issuer (its aud), read without checking the signature (the issuer checks it)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return None
    aud = claims.get("aud") if isinstance(claims, dict) else None
    return aud if isinstance(aud, str) else None


class Outbox:
    """Posting receipts and the spool behind it."""

    def __init__(self, cfg: ElevateConfig, *, quiet: bool = False):
        self.cfg = cfg
        # quiet (an attempt's outbox): warnings are not printed (a refusal's stderr is its one JSON
        # line, D10; a run's is the command's own): the audit line's "receipt" says what became of
        # the receipt ("rejected", "lost: spool full", ...); ``--flush-receipts`` prints them
        self.quiet = quiet

    def _warn(self, text: str) -> None:
        if not self.quiet:
            _warn(text)

    # -- one receipt -----------------------------------------------------------------------------

    def post(self, token: str, issuer: str) -> str:
        """ "delivered", "keep" (try again later) or "rejected" (never accepted: drop it).
        Raises NetworkError when the issuer cannot be reached."""
        status, _ = http_request(
            self.cfg,
            "POST",
            f"{issuer}/api/audit/receipts",
            headers={"Content-Type": "application/json", "Accept": "application/json"},
            content=json.dumps({"receipt": token}).encode(),
            max_bytes=16 * 1024,
            timeout=self.cfg.receipt_timeout,
        )
        if status in (200, 201):
            return "delivered"
        if status in _KEEP or status >= 500 or status < 400:
            return "keep"
        self._warn(f"the issuer refused a receipt for good (HTTP {status}); it is dropped")
        return "rejected"

    def send(
        self, attempt: Attempt, result: str, exit_code: int | None, reason: str | None = None
    ) -> str | None:
        """Build, sign and deliver the receipt of an attempt (the spooled ones first). Returns what
        the audit line records: "sent", "spooled", "rejected", "lost: why"; None when no receipt
        is due (receipts off, or the attempt is tied to no grant of an allowed issuer)."""
        cfg = self.cfg
        if not receipts_enabled(cfg) or attempt.issuer is None or attempt.issuer not in cfg.allowed_issuers:
            return None
        if not attempt.grant_id or len(attempt.grant_id) > MAX_ID or len(attempt.authz_jti) > MAX_ID:
            return None
        try:
            token = self._build(attempt, result, exit_code, reason)
        except (Stop, ValueError, OSError) as exc:
            self._warn(f"no receipt: {exc}")
            return f"lost: {exc}"
        with contextlib.suppress(Stop, OSError):
            self.flush(limit=FLUSH_PER_ATTEMPT)
        try:
            outcome = self.post(token, attempt.issuer)
        except NetworkError:
            outcome = "keep"
        if outcome == "delivered":
            self.remember_checkpoint(attempt.issuer)
            return "sent"
        if outcome == "rejected":
            return "rejected"
        return self.spool(token)

    def _build(self, attempt: Attempt, result: str, exit_code: int | None, reason: str | None) -> str:
        from grantd.elevate.hostkey import load_host_key
        from grantd.receipts import build_receipt

        key = load_host_key(self.cfg.host_key)
        ended = time.time()
        seen = self.seen_checkpoint(str(attempt.issuer))
        return build_receipt(
            key,
            host=self.cfg.host,
            audience=str(attempt.issuer),
            grant_id=str(attempt.grant_id),
            authz_jti=attempt.authz_jti if result == "refused" or attempt.authz_jti else "",
            cmd_hash=attempt.cmd_hash,
            run_as=attempt.run_as,
            result=result,
            exit_code=exit_code,
            started_at=int(attempt.started_at),
            ended_at=max(int(ended), int(attempt.started_at)),
            duration_ms=max(0, int((ended - attempt.started_at) * 1000)),
            issued_at=int(ended),
            reason=reason[:1000] if reason is not None else None,
            seen_checkpoint=seen,
        )

    # -- the last checkpoint this host saw -------------------------------------------------------

    def _checkpoint_file(self, issuer: str) -> str:
        return os.path.join(
            self.cfg.receipt_spool, "checkpoint-" + hashlib.sha256(issuer.encode()).hexdigest()[:32] + ".json"
        )

    def remember_checkpoint(self, issuer: str) -> None:
        """After a delivered receipt: fetch the issuer's current checkpoint (the public
        `GET /api/audit/checkpoint` note) and keep its size and root for the next receipt's
        ``seen_checkpoint``. Best effort: any failure keeps the previous one. Elevate does not hold
        the log key, so it does not check the note's signature; an auditor checks that the size and
        root it names are a checkpoint the log signed (a host that saw another root saw a fork)."""
        try:
            status, body = http_request(
                self.cfg,
                "GET",
                f"{issuer}/api/audit/checkpoint",
                headers={"Accept": "text/plain"},
                max_bytes=8 * 1024,
                timeout=self.cfg.receipt_timeout,
            )
            lines = body.decode("utf-8").split("\n")
            if status != 200 or len(lines) < 4 or not lines[1].isdigit() or len(lines[1]) > 19:
                return
            if len(base64.b64decode(lines[2], validate=True)) != 32:
                return
            seen = {"size": int(lines[1]), "root": lines[2]}
            if not check_spool_dir(self.cfg.receipt_spool, create=True):
                return
            target = self._checkpoint_file(issuer)
            tmp = f"{target}.{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(seen, fh)
            os.replace(tmp, target)
        except (NetworkError, Stop, OSError, ValueError):
            return

    def seen_checkpoint(self, issuer: str) -> dict[str, Any] | None:
        """The checkpoint remembered for this issuer: {size, root}, from a root-owned 0600 file only."""
        try:
            fd = os.open(
                self._checkpoint_file(issuer), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
            )
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o077:
                return None
            seen = json.loads(os.read(fd, 4096))
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)
        if (
            not isinstance(seen, dict)
            or set(seen) != {"size", "root"}
            or isinstance(seen["size"], bool)
            or not isinstance(seen["size"], int)
            or seen["size"] < 0
            or not isinstance(seen["root"], str)
        ):
            return None
        try:
            return seen if len(base64.b64decode(seen["root"], validate=True)) == 32 else None
        except ValueError:
            return None

    # -- the spool -------------------------------------------------------------------------------

    def spool(self, token: str) -> str:
        path = self.cfg.receipt_spool
        try:
            check_spool_dir(path, create=True)
            names = [n for n in os.listdir(path) if n.endswith(".jws")]
            name = hashlib.sha256(token.encode()).hexdigest()[:32] + ".jws"
            if name in names:
                return "spooled"
            if len(names) >= MAX_SPOOLED:
                self._warn(f"receipt spool {path} holds {MAX_SPOOLED} receipts: this one is dropped")
                return "lost: spool full"
            tmp = os.path.join(path, f".{name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, token.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, os.path.join(path, name))
        except (Stop, OSError) as exc:
            self._warn(f"cannot spool the receipt: {exc}")
            return f"lost: {exc}"
        return "spooled"

    def flush(self, limit: int | None = None) -> dict[str, int]:
        """Send what the spool holds, oldest first (at most ``limit``); one process at a time (others
        skip), and an issuer that cannot be reached is not asked again in this flush. Raises Stop
        on a spool with bad modes."""
        counts = {"sent": 0, "kept": 0, "dropped": 0}
        path = self.cfg.receipt_spool
        if not check_spool_dir(path, create=False):
            return counts
        dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            try:
                fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    counts["kept"] = sum(1 for n in os.listdir(path) if n.endswith(".jws"))
                    return counts  # another run is flushing right now
                raise
            down: set[str] = set()
            entries = []
            for name in os.listdir(dir_fd):
                if name.endswith(".jws"):
                    with contextlib.suppress(FileNotFoundError):
                        entries.append(
                            (os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mtime_ns, name)
                        )
            for position, (_, name) in enumerate(sorted(entries)):
                if limit is not None and position >= limit:
                    counts["kept"] += 1
                    continue
                token = self._read(dir_fd, name)
                issuer = _audience(token) if token else None
                if token is None or issuer is None or issuer not in self.cfg.allowed_issuers:
                    counts["kept"] += 1
                    continue
                if issuer in down:
                    counts["kept"] += 1
                    continue
                try:
                    outcome = self.post(token, issuer)
                except NetworkError:
                    down.add(issuer)
                    counts["kept"] += 1
                    continue
                if outcome == "keep":
                    counts["kept"] += 1
                    continue
                os.unlink(name, dir_fd=dir_fd)
                counts["sent" if outcome == "delivered" else "dropped"] += 1
        finally:
            os.close(dir_fd)
        return counts

    def _read(self, dir_fd: int, name: str) -> str | None:
        """A spooled receipt, only from a regular root-owned file nobody else may read or write."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o077:
                self._warn(f"spooled receipt {name} is not a root-owned 0600 file: left alone")
                return None
            return os.read(fd, MAX_RECEIPT_BYTES + 1).decode("ascii", "replace").strip() or None
        finally:
            os.close(fd)

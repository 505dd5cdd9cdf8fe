"""The issuer's signing keys (JWKS): fetched from the issuer, cached on disk with a bound."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from typing import Any

from grantd.elevate.config import ElevateConfig, check_root_owned
from grantd.elevate.errors import EXIT_ERROR, Stop, refused
from grantd.elevate.net import NetworkError, http_request

MAX_JWKS_BYTES = 64 * 1024


class JwksCache:
    """The issuer's JWKS on disk: fresh for `jwks_refresh` seconds; while the issuer cannot be
    reached, usable until `jwks_max_stale` seconds after the last successful fetch."""

    def __init__(self, cfg: ElevateConfig):
        self.cfg = cfg
        self.dir = cfg.jwks_cache_dir
        self.note: str | None = None

    def _file(self, issuer: str) -> str:
        return os.path.join(self.dir, "jwks-" + hashlib.sha256(issuer.encode()).hexdigest()[:32] + ".json")

    def _usable_dir(self) -> bool:
        if not self.dir:
            return False
        try:
            os.makedirs(self.dir, mode=0o700, exist_ok=True)
            check_root_owned(self.dir, "JWKS cache directory")
            return True
        except (OSError, Stop) as exc:
            print(json.dumps({"warning": f"JWKS cache disabled: {exc}"}), file=sys.stderr)
            return False

    def load(self, issuer: str) -> dict[str, Any] | None:
        if not self._usable_dir():
            return None
        try:
            fd = os.open(self._file(issuer), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if st.st_uid != 0 or st.st_mode & 0o022:
                return None
            with os.fdopen(os.dup(fd), "rb") as fh:
                entry = json.loads(fh.read(MAX_JWKS_BYTES * 2))
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)
        if (
            not isinstance(entry, dict)
            or entry.get("issuer") != issuer
            or not isinstance(entry.get("fetched_at"), int | float)
        ):
            return None
        return entry

    def store(self, issuer: str, jwks: dict[str, Any]) -> None:
        if not self._usable_dir():
            return
        target = self._file(issuer)
        tmp = f"{target}.{os.getpid()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump({"issuer": issuer, "fetched_at": time.time(), "jwks": jwks}, fh)
            os.replace(tmp, target)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            print(json.dumps({"warning": f"cannot write the JWKS cache: {exc}"}), file=sys.stderr)

    def fetch(self, issuer: str) -> dict[str, Any]:
        status, body = http_request(
            self.cfg,
            "GET",
            f"{issuer}/.well-known/jwks.json",
            headers={"Accept": "application/json"},
            max_bytes=MAX_JWKS_BYTES,
        )
        if status != 200:
            raise NetworkError(f"{issuer}/.well-known/jwks.json answered HTTP {status}")
        try:
            jwks = json.loads(body)
        except ValueError:
            raise NetworkError(f"{issuer}/.well-known/jwks.json is not JSON") from None
        if not isinstance(jwks, dict) or not isinstance(jwks.get("keys"), list):
            raise NetworkError(f"{issuer}/.well-known/jwks.json has no keys array")
        return jwks

    def key(self, issuer: str, kid: str) -> Any:
        cached = self.load(issuer)
        age = time.time() - cached["fetched_at"] if cached else None
        if cached and age is not None and age < self.cfg.jwks_refresh:
            key = _find_key(cached["jwks"], kid)
            if key is not None:
                self.note = "jwks from cache"
                return key
        try:
            jwks = self.fetch(issuer)
        except NetworkError as exc:
            if cached and age is not None and age < self.cfg.jwks_max_stale:
                key = _find_key(cached["jwks"], kid)
                if key is not None:
                    self.note = f"issuer unreachable, jwks from cache ({int(age)} s old): {exc}"
                    return key
            raise Stop(EXIT_ERROR, "network", f"cannot fetch the issuer's keys: {exc}") from None
        self.store(issuer, jwks)
        self.note = "jwks fetched"
        key = _find_key(jwks, kid)
        if key is None:
            raise refused("bad_signature", "bad signature (the issuer does not publish the token's key)")
        return key


def _find_key(jwks: Any, kid: str) -> Any:
    from jwt.algorithms import OKPAlgorithm

    for jwk in jwks.get("keys", []) if isinstance(jwks, dict) else []:
        if (
            isinstance(jwk, dict)
            and jwk.get("kid") == kid
            and jwk.get("kty") == "OKP"
            and jwk.get("crv") == "Ed25519"
        ):
            try:
                return OKPAlgorithm.from_jwk(json.dumps(jwk))
            except Exception:  # noqa: BLE001 - a malformed key is a missing key
                return None
    return None

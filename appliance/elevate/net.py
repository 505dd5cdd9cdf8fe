"""One bounded HTTP exchange with the issuer, and which failures mean "the issuer cannot be
connected to at all" (the only ones offline_grant_types may excuse)."""

from __future__ import annotations

import errno
import socket
from typing import Any

from grantd.elevate.config import ElevateConfig
from grantd.elevate.errors import DeadlineExceeded, deadline


class NetworkError(Exception):
    """A failed exchange. ``unreachable``: no connection could be made at all (refused, unresolvable,
    no route) -- the only failure that may count as "the issuer is away" (offline_grant_types)."""

    def __init__(self, message: str, *, unreachable: bool = False):
        super().__init__(message)
        self.unreachable = unreachable


# errno values of a connection that could not be made at all. A timeout (a silent or overloaded
# issuer, a dropped packet) and a TLS failure are not among them: those fail closed.
_UNREACHABLE_ERRNOS = {errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH}


def _could_not_connect(exc: BaseException) -> bool:
    """True when the httpx error was caused by a refused connection, an unresolvable name or no route."""
    import ssl

    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ssl.SSLError):
            return False
        if isinstance(cause, socket.gaierror) or (
            isinstance(cause, OSError) and cause.errno in _UNREACHABLE_ERRNOS
        ):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def http_request(
    cfg: ElevateConfig,
    method: str,
    url: str,
    *,
    headers: dict[str, str],
    max_bytes: int,
    content: bytes | None = None,
    timeout: float | None = None,
) -> tuple[int, bytes]:
    """One bounded HTTP exchange: timeouts on every phase, an overall deadline, a size cap.

    No proxies or CA overrides from the environment (trust_env=False), no redirects."""
    import httpx

    verify: Any = cfg.ca_bundle or True
    seconds = timeout or cfg.timeout
    try:
        with (
            deadline(seconds),
            httpx.Client(
                timeout=httpx.Timeout(seconds), trust_env=False, verify=verify, follow_redirects=False
            ) as client,
        ):
            with client.stream(
                method, url, headers={"Accept-Encoding": "identity", **headers}, content=content
            ) as response:
                body = bytearray()
                for chunk in response.iter_raw():
                    body += chunk
                    if len(body) > max_bytes:
                        raise NetworkError(f"{url}: answer larger than {max_bytes} bytes")
                return response.status_code, bytes(body)
    except DeadlineExceeded:
        raise NetworkError(f"{url}: no answer within {seconds:g} s") from None
    except httpx.TimeoutException:
        raise NetworkError(f"{url}: timed out after {seconds:g} s") from None
    except httpx.ConnectError as exc:
        raise NetworkError(f"{url}: cannot connect: {exc}", unreachable=_could_not_connect(exc)) from None
    except httpx.HTTPError as exc:
        raise NetworkError(f"{url}: {exc.__class__.__name__}: {exc}") from None

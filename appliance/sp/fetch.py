"""Guarded HTTP to hosts others name: identity providers for SP login (discovery documents, JWKS,
the token endpoint) and Web Push endpoints (grantd.plugins.notify_webpush).

An IdP found through DNS is named by whoever controls that DNS zone, so requests to it are guarded
the way client metadata fetches are (``grantd.services.clients``): the host is resolved once, every
address must be public, and the connection goes to the checked address (the URL names the IP;
``Host`` and TLS SNI/certificate checks use the name), so DNS rebinding changes nothing. No
redirects, short timeouts, bodies capped, and the rules of every fetch made for a caller
(``grantd.services.outbound``, D12): one overall deadline of 5 s for the whole request, and a bound on
requests at once shared with client-metadata fetches (one more is refused, not queued). ``allow_private`` (``sp.allow_http_idp``, tests only, or
an IdP the operator configured as ``sp.fallback_idp``) lifts the address rule.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from grantd.services.clients import MetadataError, public_address, resolve
from grantd.services.outbound import DEADLINE_S, Busy, FetchGuard

TIMEOUT = httpx.Timeout(5.0, connect=3.0)
MAX_BODY = 256 * 1024
USER_AGENT = "grantd (SP login)"


class FetchError(Exception):
    """The IdP could not be asked (safe to show: no response bodies)."""


async def _targets(url: str, allow_private: bool) -> tuple[httpx.URL, list[str], str, int]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise FetchError("bad URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        raise FetchError("bad URL")
    host = parts.hostname
    port = port or (443 if parts.scheme == "https" else 80)
    try:
        addresses = await resolve(host, port)
    except MetadataError as exc:
        raise FetchError(str(exc)) from None
    if not allow_private and not all(public_address(a) for a in addresses):
        raise FetchError(f"{host} resolves to a non-public address")
    return httpx.URL(url), addresses[:4], host, port


async def send(
    method: str,
    url: str,
    *,
    allow_private: bool,
    headers: dict[str, str] | None = None,
    form: dict[str, str] | None = None,
    content: bytes | None = None,
    max_body: int = MAX_BODY,
    guard: FetchGuard | None = None,
) -> tuple[int, bytes]:
    """(status, body) of one request to ``url``, guarded (module docstring): resolved once, every
    address public unless ``allow_private``, connected to the checked address, no redirects.
    ``guard``: the process's ``FetchGuard`` (overall deadline, requests at once); without one, the
    deadline alone (``grantd.services.outbound.DEADLINE_S``)."""
    try:
        if guard is None:
            async with asyncio.timeout(DEADLINE_S):
                return await _send(
                    method,
                    url,
                    allow_private=allow_private,
                    headers=headers,
                    form=form,
                    content=content,
                    max_body=max_body,
                )
        async with guard.slot():
            return await _send(
                method,
                url,
                allow_private=allow_private,
                headers=headers,
                form=form,
                content=content,
                max_body=max_body,
            )
    except Busy as exc:
        raise FetchError(str(exc)) from None
    except TimeoutError:
        raise FetchError(
            f"no complete answer from {urlsplit(url).hostname} within "
            f"{guard.deadline_s if guard else DEADLINE_S:g} s"
        ) from None


async def _send(
    method: str,
    url: str,
    *,
    allow_private: bool,
    headers: dict[str, str] | None,
    form: dict[str, str] | None,
    content: bytes | None,
    max_body: int,
) -> tuple[int, bytes]:
    target, addresses, host, port = await _targets(url, allow_private)
    parts = urlsplit(url)
    netloc_host = parts.netloc
    last: Exception | None = None
    for address in addresses:
        literal = f"[{address}]" if ":" in address else address
        direct = urlunsplit((parts.scheme, f"{literal}:{port}", parts.path or "/", parts.query, ""))
        sent = {
            "Accept": "application/json",
            "Accept-Encoding": "identity",
            "User-Agent": USER_AGENT,
            **(headers or {}),
            "Host": netloc_host,
        }
        extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
        try:
            async with httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=False, trust_env=False) as http:
                built = http.build_request(
                    method, direct, headers=sent, data=form, content=content, extensions=extensions
                )
                response = await http.send(built, stream=True)
                try:
                    body = bytearray()
                    async for chunk in response.aiter_raw():
                        body += chunk
                        if len(body) > max_body:
                            raise FetchError("answer too large")
                finally:
                    await response.aclose()
        except httpx.ConnectError as exc:
            last = exc
            continue
        except httpx.HTTPError as exc:
            raise FetchError(f"{type(exc).__name__} from {target.host}") from None
        return response.status_code, bytes(body)
    raise FetchError(f"cannot connect to {host}: {type(last).__name__}")


async def request(
    method: str,
    url: str,
    *,
    allow_private: bool,
    form: dict[str, str] | None = None,
    guard: FetchGuard | None = None,
) -> tuple[int, Any]:
    """(status, parsed JSON body or None) of one request to ``url``, guarded as ``send``."""
    status, body = await send(method, url, allow_private=allow_private, form=form, guard=guard)
    try:
        return status, json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return status, None

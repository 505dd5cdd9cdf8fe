"""Errors as values at the edge: domain code raises Problem; one handler renders problem+json (RFC 9457)."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any


class Problem(Exception):
    """An error the client caused or may see. ``detail`` is the specification's message."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        title: str | None = None,
        type: str = "about:blank",  # noqa: A002 - the RFC 9457 member name
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.title = title or HTTPStatus(status).phrase
        self.type = type
        self.headers = headers or {}
        self.extra = extra or {}

    def body(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            **self.extra,
        }


def bad_request(detail: str, **extra: Any) -> Problem:
    return Problem(400, detail, extra=extra or None)


def not_found(detail: str) -> Problem:
    return Problem(404, detail)


def unauthorized(detail: str = "authentication required", *, invalid_token: bool = False) -> Problem:
    challenge = 'Bearer error="invalid_token"' if invalid_token else 'Bearer realm="grantd"'
    return Problem(401, detail, headers={"WWW-Authenticate": challenge})


def forbidden(detail: str) -> Problem:
    return Problem(403, detail)


def conflict(detail: str) -> Problem:
    return Problem(409, detail)

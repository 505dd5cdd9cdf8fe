"""OAuth 2.0 errors (RFC 6749 §5.2, RFC 6750 §3, D2): ``{error, error_description}`` with
``Cache-Control: no-store``. /token, /revoke and /userinfo answer them; /authorize turns the ones
raised after the redirect URI was validated into a redirect carrying ``error`` and ``state``."""

from __future__ import annotations

from typing import Any


class OAuthError(Exception):
    """``error`` is the RFC code (invalid_request, invalid_client, invalid_grant, ...);
    ``description`` a readable, safe message."""

    def __init__(
        self, error: str, description: str, status: int = 400, headers: dict[str, str] | None = None
    ):
        super().__init__(f"{error}: {description}")
        self.error = error
        self.description = description
        self.status = status
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {"error": self.error, "error_description": self.description}


def invalid_request(description: str) -> OAuthError:
    return OAuthError("invalid_request", description)


def invalid_grant(description: str) -> OAuthError:
    return OAuthError("invalid_grant", description)


def invalid_client(description: str, *, basic: bool = False) -> OAuthError:
    """401 with ``WWW-Authenticate: Basic`` (RFC 6749 §5.2 requires it when the client tried HTTP
    Basic; every 401 of ours names a scheme, so the others carry it too). ``basic``: the client did."""
    del basic  # the same challenge either way
    return OAuthError("invalid_client", description, 401, {"WWW-Authenticate": 'Basic realm="grantd"'})


def invalid_token(description: str) -> OAuthError:
    """A bearer that does not verify at a resource (RFC 6750 §3.1): 401 with the challenge."""
    challenge = f'Bearer realm="grantd", error="invalid_token", error_description="{_quoted(description)}"'
    return OAuthError("invalid_token", description, 401, {"WWW-Authenticate": challenge})


def _quoted(text: str) -> str:
    return "".join(c for c in text if c.isprintable() and c not in '"\\')[:200]


__all__ = ["OAuthError", "invalid_client", "invalid_grant", "invalid_request", "invalid_token"]

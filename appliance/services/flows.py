"""Sign-ins that leave for another site and come back (SP login, federated sign-in): one rule for
the state they keep meanwhile.

The state lives server-side in ``store.onetime`` under the SHA-256 of the ``state`` parameter, for
``FLOW_TTL_MS``, and is taken once. It is bound to the browser that started the sign-in: a random
*binding* goes to that browser in a cookie and only its digest into the kept state, so a callback
link carried to another browser (login CSRF: someone signing a victim into the attacker's account)
finds the state but is refused.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grantd.services.context import Services

FLOW_TTL_MS = 600_000  # a person has ten minutes to sign in elsewhere and come back
MAX_STATE = 200  # longer state parameters are not ours: refused before any lookup


class FlowRefused(Exception):
    """The callback's state is unknown, used or expired (``other_browser`` False), or was started
    in another browser (``other_browser`` True)."""

    def __init__(self, *, other_browser: bool):
        super().__init__("started in another browser" if other_browser else "unknown, used or expired state")
        self.other_browser = other_browser


def new_secret() -> str:
    """A state, nonce or binding: 32 random bytes, base64url."""
    return secrets.token_urlsafe(32)


def digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


async def keep(services: Services, kind: str, state: str, binding: str, data: dict[str, Any]) -> None:
    """Keep ``data`` (JSON-ready) for the callback that will carry ``state``, bound to ``binding``."""
    now = services.clock.now_ms()
    await services.store.onetime.put(
        kind, digest(state), {**data, "binding": digest(binding)}, now + FLOW_TTL_MS, now
    )


async def take(services: Services, kind: str, state: str | None, binding: str | None) -> dict[str, Any]:
    """The kept data of ``state`` (once), if ``binding`` is the browser's that started it."""
    if not state or len(state) > MAX_STATE:
        raise FlowRefused(other_browser=False)
    flow = await services.store.onetime.take(kind, digest(state), services.clock.now_ms())
    if flow is None:
        raise FlowRefused(other_browser=False)
    if not binding or not secrets.compare_digest(digest(binding), str(flow.get("binding", ""))):
        raise FlowRefused(other_browser=True)
    return flow

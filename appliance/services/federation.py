"""Who a federated sign-in signs in as: the rules every federation provider type shares (the
provider verified the upstream's answer; these decide what grantd makes of it). The routes are
``grantd.web.api.federation``; provider types come from plugins (``grantd.hookspecs``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from grantd.core.errors import Problem
from grantd.core.fields import check_identifier, is_email
from grantd.hookspecs import FederatedIdentity, FederationError
from grantd.logs import LOGGER
from grantd.services import people
from grantd.store.records import Person

if TYPE_CHECKING:
    from grantd.plugin_manager import FederationProvider
    from grantd.services.context import Services

log = logging.getLogger(LOGGER)


def display_name(name: str | None) -> str | None:
    """The upstream's name for a new person, if it is a clean identifier (D12), else None (the
    e-mail's local part is used)."""
    if not name:
        return None
    try:
        return check_identifier("name", name.strip()[:255]) or None
    except Problem:
        return None


async def person_for(services: Services, entry: FederationProvider, identity: FederatedIdentity) -> Person:
    """The person ``identity`` signs in as, under the rules every provider type shares."""
    email = identity.email.strip().lower()
    if identity.email_verified is not True:
        raise FederationError(f"{entry.name} has not verified the e-mail address {email}.", 403)
    local, _, domain = email.rpartition("@")
    if not local or not domain or len(email) > 254 or not email.isprintable() or not is_email(email):
        raise FederationError(f"{entry.name} sent an e-mail address grantd cannot use.", 403)
    allowed = tuple(getattr(entry.provider, "allowed_domains", ()) or ())
    if allowed and domain not in allowed:
        raise FederationError(
            f"{entry.name} may not sign in addresses of {domain} here (allowed: {', '.join(allowed)}).", 403
        )
    if await services.store.agents.get(email) is not None:
        raise FederationError(
            f"{email} is an agent's address here; agents sign in with their key, not in a browser.", 403
        )
    person = await services.store.people.get(email)
    if person is None:
        if not getattr(entry.provider, "create_unknown", False):
            raise FederationError(
                f"There is no account for {email} here. Ask an administrator to add you.", 403
            )
        if email in services.admin_emails:
            raise FederationError(
                f"There is no account for {email} here yet, and an administrator's account is "
                f"never created by a sign-in. Ask an administrator to add it.",
                403,
            )
        try:
            # D11: never a person whose e-mail still names an owner, approver or delegation party
            # (a deleted person's, or one an administrator has not created yet)
            person = await people.create_person(
                services, email, name=display_name(identity.name), unnamed=True
            )
        except Problem as exc:
            if not exc.extra.get("named"):
                raise
            raise FederationError(
                f"There is no account for {email} here, and this address is still named on "
                f"agents or delegations. Ask an administrator to add you.",
                403,
            ) from exc
        log.info("federated sign-in through %s created person %s", entry.id, person["person_id"])
    if person.get("status", "active") != "active":
        raise FederationError("This account is disabled. Ask an administrator.", 403)
    return person

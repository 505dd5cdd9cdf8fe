"""What issue 25 adds to the OpenID configuration (D16): CIBA, DPoP and RAR metadata. Kept apart from
the document itself (grantd.web.api.wellknown) so each protocol's members live with the protocol."""

from __future__ import annotations

from typing import Any

from grantd.dpop import PROOF_ALGS
from grantd.oauth import exchange
from grantd.oauth.ciba import DETAIL_TYPE, GRANT_TYPE


def agent_protocol_metadata(issuer: str, agent_dpop: str) -> tuple[dict[str, Any], list[str]]:
    """(members to add, grant types to add to ``grant_types_supported``)."""
    members: dict[str, Any] = {
        "backchannel_authentication_endpoint": f"{issuer}/bc-authorize",
        "backchannel_token_delivery_modes_supported": ["poll", "ping"],
        "backchannel_user_code_parameter_supported": False,
        "authorization_details_types_supported": [DETAIL_TYPE],
    }
    if agent_dpop != "off":
        members["dpop_signing_alg_values_supported"] = list(PROOF_ALGS)
    return members, [GRANT_TYPE, exchange.GRANT_TYPE]


__all__ = ["agent_protocol_metadata"]

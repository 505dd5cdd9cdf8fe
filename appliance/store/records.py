"""The records storage keeps, as typed dictionaries (JSON-ready: ints are ms since the epoch)."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class SigningKey(TypedDict):
    kid: str
    alg: str
    private_pem: str  # "" once the key retired: a retired key only verifies, it never signs again
    public_jwk: dict[str, Any]
    created_at: int
    retired_at: int | None


class Agent(TypedDict):
    agent_id: str
    email: str
    name: str
    public_key: str
    key_id: str  # SHA-256 fingerprint of the key
    key_generation: int  # grows with every new key; identity tokens carry it (D11)
    owner: str
    approver: str
    status: str  # active | disabled
    created_at: int
    updated_at: int
    # D11: the person_id the owner/approver e-mail was bound to (set by the store from the people
    # table, in the transaction that names them or that creates that person); None while the
    # e-mail names no person (the management identity, an administrator of admin.emails, a person
    # not yet created). A deleted person's id stays: nobody later created with the e-mail inherits it.
    owner_id: str | None
    approver_id: str | None


class Grant(TypedDict):
    id: str
    type: str  # command | permissions
    requester: str  # e-mail
    requester_id: str  # agent_id of an agent, else the person's e-mail; stable across re-enrolment
    request: dict[str, Any]
    grant_type: str  # once | timed | always
    status: str  # stored: pending | approved | denied | revoked | consumed | expired
    created_at: int
    decided_by: str | None
    decided_at: int | None
    expires_at: int | None
    used_at: int | None
    decision_reason: str | None
    delegation_id: str | None
    revoked_by: str | None
    revoked_at: int | None
    reuse_key: str | None
    version: int


class Vote(TypedDict):
    """One vote on a grant under an approval policy (D13); one per person per grant (``email``,
    lowercased). ``management``: cast with the management token (as its identity)."""

    grant_id: str
    email: str
    voter_id: str
    decision: str  # approve | deny
    via: str  # api | web | tui | delegation
    at: int
    reason: str | None
    grant_type: str | None
    duration: int | None
    management: bool
    # D15: how the voter proved it was them for this decision: {"webauthn": {credential_id,
    # authenticator_data, client_data_json, signature, grant_digest, nonce}} for a vote cast from a
    # review link with the passkey over the grant's digest; absent otherwise
    evidence: NotRequired[dict[str, Any] | None]


class GrantReview(TypedDict):
    """The review a grant was pinned to at creation (grantd.core.review.Review.as_dict()) and the
    escalation levels the expiry sweep has already announced."""

    grant_id: str
    review: dict[str, Any]
    escalation_level: int


class ReviewGroup(TypedDict):
    """Pending grants pinned to one review at one escalation level
    (``GrantStore.pending_review_groups``): the lists judge the review once for all of them."""

    review: dict[str, Any]
    escalation_level: int
    grant_ids: list[str]


# A grant with its pinned review (None: the default policy), its votes in recorded order and the
# agent that asked for it (None: a person's request, or a deleted agent) (``Grants.view``).
GrantView = tuple[Grant, GrantReview | None, list[Vote], Agent | None]


class GrantEvent(TypedDict):
    seq: int
    event: str  # grant.created | approved | denied | revoked | consumed | expired
    grant_id: str
    requester: str
    grant: Grant  # the grant as the change left it
    created_at: int


# A grant event as stored, its snapshot still JSON text: (seq, event, grant_id, requester, created_at,
# grant_json) (``Grants.event_rows_after``; ``grantd.store.rows.grant_event`` makes the GrantEvent).
GrantEventRow = tuple[int, str, str, str, int, str]


class Delegation(TypedDict):
    id: str
    delegator: str
    delegate: str
    audience: str
    scopes: list[str]
    approval: str
    duration: int | None
    created_at: int
    expires_at: int | None
    status: str  # active | revoked (expired is read through Lapse)
    revoked_at: int | None
    revoked_by: str | None


class Person(TypedDict):
    person_id: str  # "usr_" + 22 url-safe characters; never reused
    email: str  # lowercased; unique across persons and agents (D11)
    name: str
    admin: bool  # an administrator (besides the e-mails of admin.emails)
    status: str  # active | disabled
    created_at: int
    updated_at: int


class PasskeyCredential(TypedDict):
    credential_id: str  # base64url of the authenticator's credential id
    person_id: str
    rp_id: str  # the relying party it was registered for (the graft rule counts per RP)
    public_key: str  # base64url of the COSE public key
    sign_count: int
    transports: list[str]
    aaguid: str
    name: str  # shown on /account ("Passkey 1", or what the person called it)
    backed_up: bool
    created_at: int
    last_used_at: int | None


class Session(TypedDict):
    session_id: str  # SHA-256 hex of the cookie's secret; the secret itself is never stored
    family_id: str  # every session of one sign-in; revoked together
    person_id: str | None  # None for a guest: signed in through SP login at another IdP (``idp``)
    created_at: int
    expires_at: int
    last_seen_at: int
    user_agent: str
    revoked_at: int | None
    idp: (
        str | None
    )  # None: signed in here (passkey, federation); else the issuer of the IdP that vouched (SP login)
    email: str | None  # a guest's e-mail as that IdP asserted it (None for people of this grantd)
    name: str | None  # a guest's name as that IdP asserted it
    credential_id: (
        str | None
    )  # the passkey that started it (deleting the passkey ends it); None: another way in


class RegistrationUrl(TypedDict):
    id: str  # public handle (lists, delete); the token is the secret in the URL
    token_hash: str  # SHA-256 hex of the URL's token; the token itself is never stored
    email: str
    admin: bool  # the person becomes an administrator on registration
    purpose: str  # register (a new account's first passkey) | add-device (one more passkey)
    rp_id: str
    created_by: str
    created_at: int
    expires_at: int
    used_at: int | None


class WebAuthnChallenge(TypedDict):
    challenge: str  # base64url of the random challenge bytes
    purpose: str  # register | login | add
    rp_id: str
    person_id: str | None  # login by e-mail, add: whose ceremony it is
    registration_id: str | None  # register: the registration URL it belongs to
    expires_at: int


class RefreshToken(TypedDict):
    token_hash: str  # SHA-256 hex of the refresh token; the token itself is never stored
    family_id: str  # "rtf_" + 22 url-safe characters; every rotation of one grant of access
    client_id: str
    person_id: str
    scope: str  # space-separated, as granted
    auth_time: int  # seconds: when the person authenticated (the id_token's auth_time)
    created_at: int
    expires_at: int  # the family's absolute end (ms); rotations keep it
    used_at: int | None  # rotated: presenting it again revokes the family
    revoked_at: int | None


class DeviceCode(TypedDict):
    device_code_hash: str  # SHA-256 hex of the device_code
    user_code: (
        str  # what the person types on /device: 8 letters of BCDFGHJKLMNPQRSTVWXZ, stored without the dash
    )
    client_id: str
    scope: str
    created_at: int
    expires_at: int
    interval: int  # seconds the client must wait between polls (slow_down adds 5)
    last_polled_at: int | None
    status: str  # pending | approved | denied
    person_id: str | None
    decided_at: int | None
    client_address: str | None  # where the request came from (shown on /device: D12), None if unknown


class Consent(TypedDict):
    person_id: str
    client_id: str
    scope: str  # space-separated union of what was allowed
    created_at: int
    updated_at: int


def columns(record: type) -> tuple[str, ...]:
    """The fields of a record, in order: the column allow-list every backend builds SQL from."""
    return tuple(record.__annotations__)


KEY_COLUMNS = columns(SigningKey)
AGENT_COLUMNS = columns(Agent)
GRANT_COLUMNS = columns(Grant)
DELEGATION_COLUMNS = columns(Delegation)
PERSON_COLUMNS = columns(Person)
CREDENTIAL_COLUMNS = columns(PasskeyCredential)
SESSION_COLUMNS = columns(Session)
REGISTRATION_COLUMNS = columns(RegistrationUrl)
WEBAUTHN_CHALLENGE_COLUMNS = columns(WebAuthnChallenge)
REFRESH_TOKEN_COLUMNS = columns(RefreshToken)
DEVICE_CODE_COLUMNS = columns(DeviceCode)
CONSENT_COLUMNS = columns(Consent)
VOTE_COLUMNS = columns(Vote)
# What the contract's update methods may change (agents.update, grants.update_if, people.update).
AGENT_CHANGEABLE = (
    "name",
    "owner",
    "approver",
    "public_key",
    "key_id",
    "status",
    "updated_at",
)  # ids: the store
GRANT_CHANGEABLE = frozenset(
    {
        "request",
        "grant_type",
        "status",
        "decided_by",
        "decided_at",
        "expires_at",
        "used_at",
        "decision_reason",
        "delegation_id",
        "revoked_by",
        "revoked_at",
        "reuse_key",
    }
)
PERSON_CHANGEABLE = ("name", "admin", "status", "updated_at")

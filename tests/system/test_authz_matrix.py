"""The authorisation matrix: every route of the app x every kind of caller -> the expected answer.

One table (``TABLE`` below) is the rule, the test and the documentation: each cell is checked
against an in-process server, and docs/authorization.md is that table rendered (a test checks the
file matches). After changing the table, regenerate the page with either of

    .venv/bin/python tests/system/test_authz_matrix.py            # writes docs/authorization.md
    GRANTD_WRITE_AUTHZ_DOC=1 .venv/bin/python -m pytest -q tests/system/test_authz_matrix.py

A route the table does not list fails ``test_every_route_is_in_the_table``: new routes cannot skip
the matrix. A new kind of caller (a person, an OAuth client) is one column: an entry in ``CALLERS``
(with its legend) plus its credential in ``World.bearer``/``World.authz``, and one value per row.

Cells: an HTTP status, optionally followed by what the body must say:
``200 valid`` / ``200 invalid`` (verify's ``valid``), ``200 consumed`` / ``200 valid`` /
``200 revoked`` (consume's ``status`` or ``error``), ``200 op:ok`` / ``200 op:403`` (the batch
operation's outcome), ``303 login`` (a page sends the caller to /login), ``200 page`` / ``403 page``
/ ``404 page`` (an HTML page, errors too). Every 401 must carry ``WWW-Authenticate: Bearer``; every 4xx is problem+json.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:  # `python tests/system/test_authz_matrix.py` regenerates the page
    sys.path.insert(0, str(TESTS))

import httpx  # noqa: E402
import jwt  # noqa: E402
import pytest  # noqa: E402
from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

DOC = TESTS.parent / "docs" / "authorization.md"
SESSION_COOKIE = "grantd_session"

# The matrix is about who may do what, not about how often (D12 limits have their own tests): the
# servers of these files count nothing, or the many refused bearers from 127.0.0.1 would be 429s.
NO_LIMITS = """
[limits]
authenticate_per_agent = 0
authenticate_per_address = 0
enroll_per_address = 0
failed_bearer_per_address = 0
grants_per_agent = 0
pending_per_agent = 0
pending_per_owner = 0
agents_per_person = 0
verify_per_address = 0
streams_per_principal = 0
passkey_per_address = 0
device_code_per_address = 0
token_per_address = 0
sp_login_per_address = 0
"""

# -- the callers (columns) --------------------------------------------------------------------------

CALLERS: dict[str, str] = {
    "none": "no `Authorization` header",
    "garbage": "`Bearer not-a-token`",
    "expired": "an identity token of the requesting agent, signed with the server's key, `exp` in the past",
    "forged": "the requesting agent's identity claims signed by a foreign Ed25519 key under our `kid`",
    "disabled": "the token of an agent that was disabled afterwards",
    "deleted": "the token of an agent that was deleted afterwards",
    "reenrolled": "the old token of an agent deleted and enrolled again under the same e-mail",
    "rekeyed": "the old token of an agent whose key was replaced (`PUT /api/admin/agents/:id` `publicKey`)",
    "self": "the requesting agent: the grants, delegation and agent record the request names are its own",
    "other": "another agent (same owner as the requesting agent)",
    "foreign": "an agent whose owner and approver are someone else (`carol@example.com`)",
    "mgmt": "the management token (acts as `admin.management_identity`, an administrator)",
    "person": "a signed-in person (session cookie) with no relation to the requesting agent",
    "owner": "a signed-in person who owns the requesting agent (and the `other` agent)",
    "approver": "a signed-in person named the requesting agent's approver",
    "admin": "a signed-in person with the administrator flag (not in `admin.emails`)",
    "otherperson": "a signed-in person who owns and approves other agents (`carol@example.com`, of `foreign`)",
    "guest": "a guest of SP login (D9: a session another IdP vouched for) whose e-mail is the `admin` column's",
}

PERSON_COLUMNS = ("person", "owner", "approver", "admin", "otherperson")

# -- the table (rows: routes) -----------------------------------------------------------------------
# consume and verify take AuthZ-JWTs: there the column names the token presented (see AUTHZ_LEGEND).

TABLE = """
route                                          | none | garbage | expired | forged | disabled | deleted | reenrolled | rekeyed | self | other | foreign | mgmt | person | owner | approver | admin | otherperson | guest
GET /healthz                                   | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
GET /readyz                                    | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
GET /.well-known/jwks.json                     | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
GET /.well-known/openid-configuration          | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
GET /api/federation/providers                  | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
GET /auth/federated/:provider_id               | 302 | 302 | 302 | 302 | 302 | 302 | 302 | 302 | 302 | 302 | 302 | 302 | 302 | 302 | 302 | 302 | 302 | 302
GET /auth/federated/:provider_id/callback      | 400 page | 400 page | 400 page | 400 page | 400 page | 400 page | 400 page | 400 page | 400 page | 400 page | 400 page | 400 page | 400 page | 400 page | 400 page | 400 page | 400 page | 400 page
GET /openapi.json                              | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
GET /metrics                                   | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404
POST /api/agent/challenge                      | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
POST /api/auth/challenge                       | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
POST /api/agent/authenticate                   | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
POST /api/auth/authenticate                    | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
POST /api/agent/enroll                         | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 201 | 201 | 201 | 201 | 201 | 201 | 403
POST /api/auth/enroll                          | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 201 | 201 | 201 | 201 | 201 | 201 | 403
GET /api/me                                    | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
GET /api/admin/agents                          | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 200 | 403 | 403 | 403 | 200 | 403 | 403
POST /api/admin/agents                         | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 201 | 403 | 403 | 403 | 201 | 403 | 403
GET /api/admin/agents/:ident                   | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 200 | 403 | 403 | 403 | 200 | 403 | 403
PUT /api/admin/agents/:ident                   | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 200 | 403 | 403 | 403 | 200 | 403 | 403
DELETE /api/admin/agents/:ident                | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 200 | 403 | 403 | 403 | 200 | 403 | 403
POST /api/grants                               | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 201 | 201 | 201 | 201 | 201 | 201 | 201 | 201 | 201 | 403
GET /api/grants                                | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 403
GET /api/grants/:grant_id                      | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 200 | 404 | 404 | 200 | 404 | 200 | 200 | 200 | 404 | 403
GET /api/grants/:grant_id/reviewers            | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 200 | 404 | 404 | 200 | 404 | 200 | 200 | 200 | 404 | 403
GET /api/grants/:grant_id/notifications        | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 200 | 404 | 404 | 200 | 404 | 200 | 200 | 200 | 404 | 403
POST /api/policies/evaluate                    | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 200 | 403 | 403 | 403 | 200 | 403 | 403
POST /api/grants/:grant_id/approve             | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 404 | 404 | 200 | 404 | 200 | 200 | 200 | 404 | 403
POST /api/grants/:grant_id/deny                | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 404 | 404 | 200 | 404 | 200 | 200 | 200 | 404 | 403
POST /api/grants/:grant_id/review              | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 404 | 404 | 200 | 404 | 200 | 200 | 200 | 404 | 403
POST /api/grants/:grant_id/revoke              | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 200 | 404 | 404 | 200 | 404 | 200 | 200 | 200 | 404 | 403
POST /api/grants/:grant_id/token               | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 200 | 404 | 404 | 403 | 404 | 403 | 403 | 403 | 404 | 403
POST /api/grants/:grant_id/consume             | 401 | 401 | 401 | 401 | 200 revoked | 200 revoked | 200 revoked | 200 valid | 200 consumed | 400 | 400 | 401 | 401 | 401 | 401 | 401 | 401 | 401
POST /api/grants/verify                        | 200 invalid | 200 invalid | 200 invalid | 200 invalid | 200 invalid | 200 invalid | 200 invalid | 200 valid | 200 valid | 200 valid | 200 valid | 200 invalid | 200 invalid | 200 invalid | 200 invalid | 200 invalid | 200 invalid | 200 invalid
POST /api/grants/batch                         | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 200 op:403 | 200 op:404 | 200 op:404 | 200 op:ok | 200 op:404 | 200 op:ok | 200 op:ok | 200 op:ok | 200 op:404 | 403
GET /api/grants/events                         | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 403
POST /api/delegations                          | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 201 | 403 | 201 | 201 | 201 | 403 | 403
GET /api/delegations                           | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 403
DELETE /api/delegations/:delegation_id         | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 404 | 404 | 200 | 404 | 404 | 404 | 200 | 404 | 403
POST /api/delegations/:delegation_id/validate  | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 200 | 404 | 404 | 200 | 404 | 404 | 404 | 200 | 404 | 403
POST /api/webauthn/register/options            | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
POST /api/webauthn/register/verify             | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
POST /api/webauthn/login/options               | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
POST /api/webauthn/login/verify                | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
GET /api/webauthn/credentials                  | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 403 | 200 | 200 | 200 | 200 | 200 | 403
POST /api/webauthn/credentials/add/reauth      | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 403 | 200 | 200 | 200 | 200 | 200 | 403
POST /api/webauthn/credentials/add/options     | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 403 | 200 | 200 | 200 | 200 | 200 | 403
POST /api/webauthn/credentials/add/verify      | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 403 | 201 | 201 | 201 | 201 | 201 | 403
DELETE /api/webauthn/credentials/:credential_id| 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 403 | 200 | 200 | 200 | 200 | 200 | 403
GET /api/sessions                              | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 403 | 200 | 200 | 200 | 200 | 200 | 403
DELETE /api/sessions/:session_id               | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 403 | 200 | 200 | 200 | 200 | 200 | 403
POST /api/logout                               | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
GET /api/admin/users                           | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 200 | 403 | 403 | 403 | 200 | 403 | 403
POST /api/admin/users                          | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 201 | 403 | 403 | 403 | 201 | 403 | 403
GET /api/admin/users/:ident                    | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 200 | 403 | 403 | 403 | 200 | 403 | 403
PATCH /api/admin/users/:ident                  | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 200 | 403 | 403 | 403 | 200 | 403 | 403
DELETE /api/admin/users/:ident                 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 200 | 403 | 403 | 403 | 200 | 403 | 403
GET /api/admin/users/:ident/credentials        | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 200 | 403 | 403 | 403 | 200 | 403 | 403
GET /api/admin/sessions                        | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 200 | 403 | 403 | 403 | 200 | 403 | 403
DELETE /api/admin/sessions/:family_id          | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 200 | 403 | 403 | 403 | 200 | 403 | 403
DELETE /api/admin/sessions/user/:ident         | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 200 | 403 | 403 | 403 | 200 | 403 | 403
GET /api/admin/registration-urls               | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 200 | 403 | 403 | 403 | 200 | 403 | 403
POST /api/admin/registration-urls              | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 201 | 403 | 403 | 403 | 201 | 403 | 403
DELETE /api/admin/registration-urls/:ident     | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 200 | 403 | 403 | 403 | 200 | 403 | 403
GET /                                          | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 | 303 | 303 | 303 | 303 | 200 page
GET /login                                     | 200 page | 200 page | 200 page | 200 page | 200 page | 200 page | 200 page | 200 page | 200 page | 200 page | 200 page | 200 page | 303 | 303 | 303 | 303 | 303 | 200 page
GET /register                                  | 200 page | 200 page | 200 page | 200 page | 200 page | 200 page | 200 page | 200 page | 200 page | 200 page | 200 page | 200 page | 200 page | 200 page | 200 page | 200 page | 200 page | 200 page
GET /account                                   | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 200 page | 200 page | 200 page | 200 page | 200 page | 303 login
GET /grants                                    | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 200 page | 200 page | 200 page | 200 page | 200 page | 303 login
GET /grant-approval                            | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 404 page | 200 page | 200 page | 200 page | 404 page | 303 login
GET /enroll                                    | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 200 page | 200 page | 200 page | 200 page | 200 page | 303 login
GET /admin                                     | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 403 page | 403 page | 403 page | 200 page | 403 page | 303 login
GET /static/:name                              | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
GET /sw.js                                     | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
POST /device_authorization                     | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
GET /device                                    | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 200 page | 200 page | 200 page | 200 page | 200 page | 303 login
POST /api/device/decide                        | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 403 | 200 | 200 | 200 | 200 | 200 | 403
POST /api/login                                | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
GET /api/callback                              | 303 | 303 | 303 | 303 | 303 | 303 | 303 | 303 | 303 | 303 | 303 | 303 | 303 | 303 | 303 | 303 | 303 | 303
GET /.well-known/oauth-client-metadata         | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
GET /.well-known/auth.md                       | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
GET /.well-known/grantd.json                   | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
GET /.well-known/service.json                  | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
GET /authorize                                 | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 200 page | 200 page | 200 page | 200 page | 200 page | 303 login
POST /authorize/consent                        | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 200 | 200 | 200 | 200 | 200 | 401
POST /token                                    | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
POST /bc-authorize                             | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
POST /revoke                                   | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
GET /.well-known/oauth-authorization-server    | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
POST /introspect                               | 401 basic | 401 basic | 401 basic | 401 basic | 401 basic | 401 basic | 401 basic | 401 basic | 401 basic | 401 basic | 401 basic | 401 basic | 401 basic | 401 basic | 401 basic | 401 basic | 401 basic | 401 basic
GET /authorize/poll/:secret                    | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 404 | 404 | 404 | 404 | 404 | 401
GET /userinfo                                  | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth
GET /api/audit/checkpoint                      | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
GET /api/audit/key                             | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
GET /api/audit/entries                         | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 200 | 403 | 403 | 403 | 200 | 403 | 403
GET /api/audit/proof/inclusion                 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 200 | 403 | 403 | 403 | 200 | 403 | 403
GET /api/audit/proof/consistency               | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 200 | 403 | 403 | 403 | 200 | 403 | 403
GET /api/audit/grants/:grant_id                | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 200 | 403 | 403 | 200 | 403 | 403 | 403 | 200 | 403 | 403
POST /api/audit/receipts                       | 403 | 403 | 403 | 403 | 403 | 403 | 403 | 403 | 403 | 403 | 403 | 403 | 403 | 403 | 403 | 403 | 403 | 403
POST /api/hosts                                | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 201 | 403 | 403 | 403 | 201 | 403 | 403
POST /userinfo                                 | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth | 401 oauth
GET /api/account/consents                      | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 403 | 200 | 200 | 200 | 200 | 200 | 403
DELETE /api/account/consents/:client_id        | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 403 | 200 | 200 | 200 | 200 | 200 | 403
GET /api/account/notifications                 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 403 | 200 | 200 | 200 | 200 | 200 | 403
PUT /api/account/notifications                 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 403 | 200 | 200 | 200 | 200 | 200 | 403
GET /api/push/vapid                            | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404 | 404
POST /api/push/subscriptions                   | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 403 | 404 | 404 | 404 | 404 | 404 | 403
GET /api/push/subscriptions                    | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 403 | 200 | 200 | 200 | 200 | 200 | 403
DELETE /api/push/subscriptions/:subscription_id | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 403 | 404 | 404 | 404 | 404 | 404 | 403
GET /r/:token                                  | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 303 login | 403 page | 200 page | 403 page | 403 page | 403 page | 303 login
POST /r/:token/options                         | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 403 | 403 | 200 | 403 | 403 | 403 | 403
POST /r/:token                                 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 401 | 403 | 403 | 403 | 403 | 403 | 403 | 403 | 403 | 403 | 403
POST /r/:token/deny                            | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200
"""

ROUTE_NOTES: dict[str, str] = {
    "POST /api/agent/challenge": "public; the body names the requesting agent",
    "POST /api/agent/authenticate": "public; a fresh challenge of the requesting agent, signed with its key",
    "POST /api/agent/enroll": "a new agent `agent+…@example.com` with a new key (a person enrols their own, D8)",
    "PUT /api/admin/agents/:ident": "rename a throwaway agent",
    "DELETE /api/admin/agents/:ident": "a throwaway agent",
    "GET /api/admin/agents/:ident": "the requesting agent's record",
    "POST /api/grants": "a `once` grant for the caller (the management token names `requester`)",
    "GET /api/grants/:grant_id": "a pending grant of the requesting agent",
    "POST /api/grants/:grant_id/approve": "a pending grant of the requesting agent",
    "POST /api/grants/:grant_id/deny": "a pending grant of the requesting agent",
    "POST /api/grants/:grant_id/review": "`{decision: approve}` on a pending grant of the requesting agent",
    "GET /api/grants/:grant_id/reviewers": "a pending grant of the requesting agent",
    "GET /api/grants/:grant_id/notifications": "a pending grant of the requesting agent (whoever may read the grant)",
    "POST /api/policies/evaluate": "a dry run of a `once` grant request of the requesting agent (creates nothing)",
    "POST /api/grants/:grant_id/revoke": "a pending grant of the requesting agent",
    "POST /api/grants/:grant_id/token": "an approved grant of the requesting agent",
    "POST /api/grants/:grant_id/consume": "bearer = the AuthZ-JWT of the column (see below)",
    "POST /api/grants/verify": "`{token}` = the AuthZ-JWT of the column (see below)",
    "POST /api/grants/batch": "one `approve` of a pending grant of the requesting agent",
    "GET /api/grants/events": "opens the stream (status and headers only)",
    "GET /grant-approval": "the page of a pending grant of the requesting agent",
    "GET /login": "signed-in people are sent on to `?next=` (here /grants)",
    "GET /register": "the page for a fresh registration URL's token (an unusable token gets 404 at once)",
    "POST /api/delegations": "delegate = the requesting agent, a private audience",
    "GET /api/audit/entries": "`?start=0` (D14: administrators, the management token, `[admin] auditors`)",
    "GET /api/audit/proof/inclusion": "`?index=0&size=1` once a checkpoint covers a leaf",
    "GET /api/audit/proof/consistency": "`?from=0&to=1` once a checkpoint covers a leaf",
    "GET /api/audit/grants/:grant_id": "a grant of the requesting agent (an agent reads its own grants' leaves only)",
    "POST /api/audit/receipts": "public; a well-formed receipt signed by a host nobody enrolled (403 whoever sends it)",
    "POST /api/hosts": "a fresh host name and `ssh-ed25519` key",
    "DELETE /api/delegations/:delegation_id": "a delegation to the requesting agent by the management identity",
    "POST /api/delegations/:delegation_id/validate": "a delegation to the requesting agent by the management identity",
    "GET /api/admin/users/:ident": "the `person` column's record",
    "PATCH /api/admin/users/:ident": "rename a throwaway person",
    "DELETE /api/admin/users/:ident": "a throwaway person",
    "GET /api/admin/users/:ident/credentials": "the `person` column's passkeys",
    "DELETE /api/admin/sessions/:family_id": "a throwaway person's session family",
    "DELETE /api/admin/sessions/user/:ident": "a throwaway person's sessions",
    "POST /api/admin/registration-urls": "a `register` URL for a new e-mail",
    "DELETE /api/admin/registration-urls/:ident": "a throwaway registration URL, by id",
    "POST /api/webauthn/register/options": "public; `{token}` of a fresh registration URL",
    "POST /api/webauthn/register/verify": "public; a software authenticator's passkey for a fresh registration URL",
    "POST /api/webauthn/login/options": "public; discoverable (no e-mail)",
    "POST /api/webauthn/login/verify": "public; a registered person's software authenticator signs fresh options",
    "GET /api/webauthn/credentials": "a signed-in person's own passkeys",
    "POST /api/webauthn/credentials/add/reauth": "a signed-in person's own passkeys (the person has one)",
    "POST /api/webauthn/credentials/add/options": "a fresh user-verified assertion of the person's own passkey",
    "GET /api/sessions": "a signed-in person's own sessions",
    "DELETE /api/sessions/:session_id": "another session of the column's own person",
    "POST /api/webauthn/credentials/add/verify": "a signed-in person's own passkeys",
    "DELETE /api/webauthn/credentials/:credential_id": "a signed-in person's own passkeys",
    "POST /api/logout": "ends the browser session if the request carries one; 200 either way",
    "POST /api/login": "public; an e-mail whose domain's DDISA record names this server (SP login, D9)",
    "GET /api/callback": "public; an unknown state: 303 to `/?error=`",
    "GET /auth/federated/:provider_id": "public: anyone may start a federated sign-in (the matrix server is its own upstream)",
    "GET /auth/federated/:provider_id/callback": "public; a state no sign-in started: an HTML error page, no session",
    "POST /device_authorization": "public; form-encoded `client_id=grantd-cli` (RFC 8628)",
    "POST /bc-authorize": "public; the client authenticates in the body: a fresh `private_key_jwt` of the "
    "`self` agent (the column's credential is ignored; CIBA, D16)",
    "GET /device": "the page of a fresh pending user code (`?user_code=`)",
    "POST /api/device/decide": "approve a fresh pending user code: a person's browser session only (not a bearer)",
    "GET /authorize": "apes-cli code + PKCE; the people have consented before, yet apes-cli (public, API access) is asked every time: the consent page; bearers are ignored",
    "POST /authorize/consent": "the consent page's JSON approval of an apes-cli request, with the page's one-time ticket: a person's session only",
    "POST /token": "public; a fresh code of the `person` column exchanged by apes-cli (the column's credential is ignored)",
    "POST /revoke": "public; an unknown token (RFC 7009: 200)",
    "GET /.well-known/oauth-authorization-server": "public: RFC 8414 metadata (D17)",
    "POST /introspect": "only a configured MCP resource's HTTP Basic credential (its URI and `credential`): every column's credential is refused (`{error}` with `WWW-Authenticate: Basic`)",
    "GET /authorize/poll/:secret": "an unknown poll secret: a person's session only (a grant-gated authorization is polled by the person who consented, D17)",
    "GET /userinfo": "only OAuth access tokens: every column's credential is refused (`{error}`, not problem+json)",
    "POST /userinfo": "the same, POST",
    "GET /api/account/consents": "the signed-in person's remembered consents",
    "GET /api/account/notifications": "the signed-in person's own notification settings",
    "PUT /api/account/notifications": "`{channels: {}}`: the signed-in person's own settings (no channel is configured here)",
    "GET /api/push/vapid": "no webpush channel is configured on the matrix server: 404 for everyone",
    "POST /api/push/subscriptions": "a subscription body; without a webpush channel a person gets 404 (tests/server/test_notify_push.py covers the rest)",
    "DELETE /api/push/subscriptions/:subscription_id": "an id that is nobody's: 404 for a person, refused before for others",
    "GET /r/:token": "a review link to a pending grant of the requesting agent, sent to the `owner` column's person (D15)",
    "POST /r/:token/options": "that link: only its person may ask (the owner has a passkey here)",
    "POST /r/:token": "that link, `{decision: approve}` without a passkey assertion: 403 `fresh passkey required` even for its person",
    "POST /r/:token/deny": "a fresh single-use deny link (`deny_from_chat`) to a pending grant: the token is the authority, no session",
    "DELETE /api/account/consents/:client_id": "withdraw the person's consent to apes-cli (given just before)",
}

AUTHZ_LEGEND: dict[str, str] = {
    "none": "no bearer (consume) / no `token` (verify)",
    "garbage": "`not-a-token`",
    "expired": "an approved grant's claims re-signed by the server's key with `exp` in the past",
    "forged": "an approved grant's claims signed by a foreign key under our `kid`",
    "disabled": "the AuthZ-JWT of the disabled agent's approved `timed` grant, fetched before it was disabled",
    "deleted": "the same for the deleted agent",
    "reenrolled": "the same for the agent deleted and re-enrolled",
    "rekeyed": "the same for the re-keyed agent: a new key ends identity tokens, not grants",
    "self": "the AuthZ-JWT of an approved `once` grant, at that grant",
    "other": "another agent's AuthZ-JWT, presented at the requesting agent's grant (verify: on its own)",
    "foreign": "the same with the foreign-owned agent's AuthZ-JWT",
    "mgmt": "the management token",
    **{
        c: "no bearer; the column's session cookie (consume) / no `token` (verify)"
        for c in (*PERSON_COLUMNS, "guest")
    },
}


def parse_table(text: str = TABLE) -> tuple[list[str], dict[str, dict[str, str]]]:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    header = [c.strip() for c in lines[0].split("|")]
    columns = header[1:]
    rows: dict[str, dict[str, str]] = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.split("|")]
        assert len(cells) == len(header), f"row has {len(cells)} cells, the header {len(header)}: {line}"
        assert cells[0] not in rows, f"route listed twice: {cells[0]}"
        rows[cells[0]] = dict(zip(columns, cells[1:], strict=True))
    return columns, rows


COLUMNS, ROWS = parse_table()


def render_doc() -> str:
    """docs/authorization.md, from the table."""
    out = [
        "# Who may call what",
        "",
        "<!-- Generated from tests/system/test_authz_matrix.py (TABLE); do not edit by hand. Regenerate with",
        "     `.venv/bin/python tests/system/test_authz_matrix.py` after changing the table. -->",
        "",
        "Every route of the server against every kind of caller, with the HTTP status a representative",
        "valid request answers. The test suite sends each of these requests to a real server",
        "(tests/system/test_authz_matrix.py) and fails when an answer differs, or when the server has a route",
        "this table does not list.",
        "",
        "Rules (spec/decisions.md D2, D6, D7, D11): no credential -> 401 with `WWW-Authenticate: Bearer`;",
        "an invalid, expired or forged token, or the token of a disabled, deleted, re-enrolled or",
        "re-keyed agent -> 401; a valid credential without the right -> 403; a grant or delegation the",
        "caller may not see -> 404 (it learns nothing, not even that it exists). Public routes ignore",
        "whatever credential is sent. A guest of SP login (D9, docs/sp.md) is a 403 everywhere else but",
        "`/api/me` and `/api/logout`, whatever e-mail another IdP vouched for.",
        "",
        "## Callers",
        "",
        "| column | caller |",
        "|---|---|",
    ]
    out += [f"| `{key}` | {legend} |" for key, legend in CALLERS.items()]
    out += [
        "",
        "`POST /api/grants/:grant_id/consume` and `POST /api/grants/verify` take AuthZ-JWTs, not callers;",
        "in their rows the column names the token presented:",
        "",
        "| column | token presented |",
        "|---|---|",
    ]
    out += [f"| `{key}` | {legend} |" for key, legend in AUTHZ_LEGEND.items()]
    out += [
        "",
        "Cells: the status; `valid`/`invalid` is verify's `valid`; `consumed`/`valid`/`revoked` is",
        "consume's `status` or `error` (D2: a known grant that cannot be used answers 200 with `error`);",
        "`op:ok`/`op:4xx` is the outcome of the batch's one operation (the batch itself answers 200).",
        "",
        "## The matrix",
        "",
        "| route | " + " | ".join(f"`{c}`" for c in COLUMNS) + " | request |",
        "|---|" + "---|" * len(COLUMNS) + "---|",
    ]
    for route, cells in ROWS.items():
        note = ROUTE_NOTES.get(route) or ROUTE_NOTES.get(route.replace("/api/auth/", "/api/agent/"), "")
        out.append(f"| `{route}` | " + " | ".join(cells[c] for c in COLUMNS) + f" | {note} |")
    out.append("")
    return "\n".join(out)


# -- the world the requests run in ------------------------------------------------------------------


def new_public_key() -> tuple[Ed25519PrivateKey, str]:
    private = Ed25519PrivateKey.generate()
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return private, public.decode() + " matrix"


_serial = itertools.count()


def fresh_email(prefix: str) -> str:
    return f"{prefix}+{os.getpid()}-{next(_serial)}-{time.monotonic_ns() % 1_000_000}@example.com"


@dataclass
class Enrolled:
    email: str
    agent_id: str
    key: Ed25519PrivateKey
    token: str = ""


def b64url_json(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).rstrip(b"=").decode()


def unverified(token: str) -> dict[str, Any]:
    return jwt.decode(token, options={"verify_signature": False})


@dataclass
class World:
    """A running in-process server with one agent of every kind the columns name."""

    srv: Any
    kid: str = ""
    agents: dict[str, Enrolled] = field(default_factory=dict)
    authz_tokens: dict[str, tuple[str, str]] = field(default_factory=dict)  # column -> (AuthZ-JWT, grant id)
    bearers: dict[str, str | None] = field(default_factory=dict)
    cookies: dict[str, str] = field(default_factory=dict)  # column -> session cookie (the person columns)
    persons: dict[str, dict[str, Any]] = field(default_factory=dict)

    # -- plumbing
    def http(self, bearer: str | None = None) -> httpx.Client:
        return self.srv.client(bearer)

    def http_for(self, column: str) -> httpx.Client:
        """A client presenting the column's credential: its bearer, or its session cookie."""
        if column in self.cookies:
            return httpx.Client(
                base_url=self.srv.url, cookies={SESSION_COOKIE: self.cookies[column]}, timeout=10
            )
        return self.http(self.bearer(column))

    def person(self, prefix: str, *, admin: bool = False, email: str | None = None) -> dict[str, Any]:
        r = self.admin(
            "POST", "/api/admin/users", json={"email": email or fresh_email(prefix), "admin": admin}
        )
        assert r.status_code == 201, r.text
        return r.json()  # type: ignore[no-any-return]

    def throwaway_session_family(self) -> str:
        person = self.person("throwaway")
        self.session(person)
        r = self.admin("GET", "/api/admin/sessions", params={"user": person["email"]})
        return str(r.json()["data"][0]["family_id"])

    def throwaway_registration(self) -> str:
        r = self.admin("POST", "/api/admin/registration-urls", json={"email": fresh_email("throwaway")})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def guest_session(self) -> str:
        """A guest session of SP login whose IdP vouched for the ``admin`` column's e-mail."""
        from grantd.services import sessions

        value, _ = self.srv.call(
            sessions.start_guest(
                self.srv.services,
                idp="https://idp.elsewhere.example",
                email=self.persons["admin"]["email"],
                name="Guest",
                user_agent="authz-matrix",
            )
        )
        return str(value)

    def session(self, person: dict[str, Any]) -> str:
        """A signed-in session of the person (started on the server's loop: no WebAuthn needed)."""
        from grantd.services import sessions

        record = self.srv.call(self.srv.services.store.people.get(person["person_id"]))
        value, _ = self.srv.call(sessions.start(self.srv.services, record, "authz-matrix"))
        return str(value)

    def admin(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        with self.srv.admin() as http:
            return http.request(method, path, **kwargs)

    def sign(self, claims: dict[str, Any]) -> str:
        """Any claims, signed with the server's own key (to forge what a test needs)."""
        return self.srv.call(self.srv.services.tokens._sign(claims))  # type: ignore[no-any-return]

    def foreign_sign(self, claims: dict[str, Any]) -> str:
        return jwt.encode(
            claims, Ed25519PrivateKey.generate(), algorithm="EdDSA", headers={"kid": self.kid, "typ": "JWT"}
        )

    def enroll(self, prefix: str, **fields: Any) -> Enrolled:
        key, public = new_public_key()
        email = fields.pop("email", None) or fresh_email(prefix)
        r = self.admin(
            "POST", "/api/agent/enroll", json={"email": email, "name": prefix, "publicKey": public, **fields}
        )
        assert r.status_code == 201, r.text
        return Enrolled(email, r.json()["agent_id"], key)

    def sign_in(self, agent: Enrolled) -> str:
        with self.http() as http:
            challenge = http.post("/api/agent/challenge", json={"agent_id": agent.agent_id}).json()[
                "challenge"
            ]
            signature = base64.b64encode(agent.key.sign(challenge.encode())).decode()
            r = http.post(
                "/api/agent/authenticate",
                json={"agent_id": agent.agent_id, "challenge": challenge, "signature": signature},
            )
        assert r.status_code == 200, r.text
        agent.token = r.json()["token"]
        return agent.token

    def signed_in(self, prefix: str, **fields: Any) -> Enrolled:
        agent = self.enroll(prefix, **fields)
        self.sign_in(agent)
        return agent

    def grant(self, agent: Enrolled, **fields: Any) -> dict[str, Any]:
        body = {
            "target_host": "web-1",
            "audience": "escapes",
            "command": ["systemctl", "restart", "nginx"],
            "grant_type": "once",
            **fields,
        }
        with self.http(agent.token) as http:
            r = http.post("/api/grants", json=body)
        assert r.status_code in (200, 201), r.text
        return r.json()  # type: ignore[no-any-return]

    def approved(self, agent: Enrolled, **fields: Any) -> tuple[str, str]:
        """(AuthZ-JWT, grant id) of a freshly approved grant of the agent."""
        grant = self.grant(agent, **fields)
        r = self.admin("POST", f"/api/grants/{grant['id']}/approve")
        assert r.status_code == 200, r.text
        return r.json()["authz_jwt"], grant["id"]

    def delegation(self, delegate: Enrolled) -> dict[str, Any]:
        r = self.admin(
            "POST",
            "/api/delegations",
            json={
                "delegate": delegate.email,
                "audience": "matrix-only",
                "approval": "once",
                "duration": 3600,
            },
        )
        assert r.status_code == 201, r.text
        return r.json()  # type: ignore[no-any-return]

    # -- the columns
    def bearer(self, column: str) -> str | None:
        return self.bearers[column]

    def authz(self, column: str) -> tuple[str | None, str]:
        """(token presented, grant id of the path) for consume and verify."""
        self_token, self_grant = self.approved(self.agents["self"])
        if column == "self":
            return self_token, self_grant
        if column in self.authz_tokens:
            token, grant_id = self.authz_tokens[column]
            return token, (self_grant if column in ("other", "foreign") else grant_id)
        if column == "expired":
            claims = unverified(self_token)
            return self.sign({**claims, "iat": claims["iat"] - 7200, "exp": claims["iat"] - 3600}), self_grant
        if column == "forged":
            return self.foreign_sign(unverified(self_token)), self_grant
        return self.bearers[column], self_grant  # none, garbage, mgmt: what they would send anyway


def build_world(srv: Any) -> World:
    w = World(srv)
    with w.http() as http:
        w.kid = http.get("/.well-known/jwks.json").json()["keys"][0]["kid"]
    w.persons = {
        "person": w.person("person"),
        "owner": w.person("owner"),
        "approver": w.person("approver"),
        "admin": w.person("admin", admin=True),
        "otherperson": w.person("carol", email="carol@example.com"),
    }
    w.cookies = {column: w.session(person) for column, person in w.persons.items()}
    w.cookies["guest"] = w.guest_session()
    parties = {"owner": w.persons["owner"]["email"], "approver": w.persons["approver"]["email"]}
    requester = w.signed_in("self", **parties)
    w.agents["self"] = requester
    w.agents["other"] = w.signed_in("other", **parties)
    w.agents["foreign"] = w.signed_in("foreign", owner="carol@example.com", approver="carol@example.com")
    for column in ("other", "foreign"):
        w.authz_tokens[column] = w.approved(w.agents[column], grant_type="timed", duration=3600)

    def doomed(column: str) -> Enrolled:
        agent = w.signed_in(column)
        w.agents[column] = agent
        w.authz_tokens[column] = w.approved(agent, grant_type="timed", duration=3600)
        return agent

    agent = doomed("disabled")
    assert (
        w.admin("PUT", f"/api/admin/agents/{agent.agent_id}", json={"status": "disabled"}).status_code == 200
    )
    agent = doomed("deleted")
    assert w.admin("DELETE", f"/api/admin/agents/{agent.agent_id}").status_code == 200
    agent = doomed("reenrolled")
    assert w.admin("DELETE", f"/api/admin/agents/{agent.agent_id}").status_code == 200
    w.signed_in("reenrolled", email=agent.email)
    agent = doomed("rekeyed")
    _, public = new_public_key()
    assert (
        w.admin("PUT", f"/api/admin/agents/{agent.agent_id}", json={"publicKey": public}).status_code == 200
    )

    now = srv.clock.now_s()
    identity = unverified(requester.token)
    w.bearers = {
        "none": None,
        "garbage": "not-a-token",
        "expired": w.sign({**identity, "iat": now - 7200, "exp": now - 3600}),
        "forged": w.foreign_sign(identity),
        "mgmt": srv.token,
        **{
            c: w.agents[c].token
            for c in ("disabled", "deleted", "reenrolled", "rekeyed", "self", "other", "foreign")
        },
        **dict.fromkeys(PERSON_COLUMNS),
        "guest": None,
    }
    assert set(w.bearers) == set(CALLERS), "every column needs a credential"
    return w


# -- one representative request per route -----------------------------------------------------------

Request = Callable[[World, str], httpx.Response]


SESSION_ENDING = ("/api/logout", "/api/webauthn/register/verify", "/api/webauthn/login/verify")


def _call(
    w: World, column: str, method: str, path: str, *, binding: str | None = None, **kwargs: Any
) -> httpx.Response:
    """``binding``: the passkey ceremony's browser binding (the ``grantd_passkey`` cookie of the
    options answer), which a browser sends back with verify (D8)."""
    with w.http_for(column) as http:
        if binding is not None:
            http.cookies.set("grantd_passkey", binding)
        response = http.request(method, path, **kwargs)
    if column in w.cookies and path in SESSION_ENDING:  # logout or a new sign-in ended the column's
        # session: the next cell gets a fresh one
        w.cookies[column] = w.guest_session() if column == "guest" else w.session(w.persons[column])
    return response


def _get(path: str) -> Request:
    return lambda w, c: _call(w, c, "GET", path)


def _challenge(path: str) -> Request:
    return lambda w, c: _call(w, c, "POST", path, json={"agent_id": w.agents["self"].email})


def _authenticate(path: str) -> Request:
    def run(w: World, c: str) -> httpx.Response:
        agent = w.agents["self"]
        with w.http() as http:
            challenge = http.post("/api/agent/challenge", json={"agent_id": agent.email}).json()["challenge"]
        signature = base64.b64encode(agent.key.sign(challenge.encode())).decode()
        return _call(
            w, c, "POST", path, json={"agent_id": agent.email, "challenge": challenge, "signature": signature}
        )

    return run


def _enroll(path: str) -> Request:
    def run(w: World, c: str) -> httpx.Response:
        _, public = new_public_key()
        return _call(
            w, c, "POST", path, json={"email": fresh_email("agent"), "name": "new", "publicKey": public}
        )

    return run


def _pending(w: World) -> str:
    return str(w.grant(w.agents["self"])["id"])


def _review_link(w: World, action: str = "review", *, passkey: bool = False) -> str:
    """A review link (D15) to a fresh pending grant of the requesting agent, for the `owner` column
    (``passkey``: who has a passkey here by then, whatever cells ran before)."""
    from grantd.services import review_links

    grant = w.srv.call(w.srv.services.store.grants.get(_pending(w)))
    owner = w.persons["owner"]
    if passkey and not w.srv.call(w.srv.services.store.credentials.list_for(owner["person_id"])):
        from people_support import add_passkey

        add_passkey(w.srv, owner["person_id"], str(w.srv.services.config.webauthn.rp_id))
    created = review_links.create(w.srv.services, grant, owner["email"], owner["person_id"], action)
    return str(w.srv.call(created))


def _on_pending(verb: str) -> Request:
    return lambda w, c: _call(w, c, "POST", f"/api/grants/{_pending(w)}/{verb}", json={})


def _consume(w: World, c: str) -> httpx.Response:
    token, grant_id = w.authz(c)
    with w.http_for(c) if c in w.cookies else w.http(token) as http:
        return http.post(f"/api/grants/{grant_id}/consume")


def _verify(w: World, c: str) -> httpx.Response:
    token, _ = w.authz(c)
    with w.http_for(c) if c in w.cookies else w.http() as http:
        return http.post("/api/grants/verify", json={"token": token} if token is not None else {})


def _events(w: World, c: str) -> httpx.Response:
    bearer = w.bearer(c)
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    if c in w.cookies:
        headers["Cookie"] = f"{SESSION_COOKIE}={w.cookies[c]}"
    with (
        httpx.Client(base_url=w.srv.url, timeout=10) as http,
        http.stream("GET", "/api/grants/events", headers=headers) as r,
    ):
        if r.status_code != 200:
            r.read()
        return r


def _new_grant(w: World, c: str) -> httpx.Response:
    body = {
        "target_host": "web-1",
        "audience": "escapes",
        "command": ["true"],
        "grant_type": "once",
        "requester": w.agents["self"].email,
    }
    return _call(w, c, "POST", "/api/grants", json=body)


def _logged(w: World) -> None:
    """Wait until a signed checkpoint covers at least one leaf (the sequencer works off the request path)."""
    deadline = time.monotonic() + 10
    with w.http() as http:
        while time.monotonic() < deadline:
            r = http.get("/api/audit/checkpoint")
            if r.status_code == 200 and int(r.text.split("\n")[1]) >= 1:
                return
            time.sleep(0.05)
    raise AssertionError("no checkpoint with a leaf")


def _audit(path: str) -> Request:
    def run(w: World, c: str) -> httpx.Response:
        _logged(w)
        return _call(w, c, "GET", path)

    return run


def _receipt(w: World, c: str) -> httpx.Response:
    from grantd.core.tlog.receipts import build_receipt

    token = build_receipt(
        Ed25519PrivateKey.generate(),
        host="never-enrolled",
        audience=w.srv.url,
        grant_id="gr_x",
        authz_jti="j",
        cmd_hash="sha256:00",
        run_as="root",
        result="refused",
        exit_code=None,
        started_at=1,
        ended_at=1,
        duration_ms=0,
        issued_at=int(time.time()),
    )
    return _call(w, c, "POST", "/api/audit/receipts", json={"receipt": token})


def _host(w: World, c: str) -> httpx.Response:
    from grantd.core.tlog.receipts import host_public_key_line

    name = "host-" + fresh_email("h").split("@")[0].replace("+", "-").replace(".", "-")[-40:]
    return _call(
        w,
        c,
        "POST",
        "/api/hosts",
        json={"host": name, "publicKey": host_public_key_line(Ed25519PrivateKey.generate())},
    )


REQUESTS: dict[str, Request] = {
    "GET /api/audit/checkpoint": _audit("/api/audit/checkpoint"),
    "GET /api/audit/key": _get("/api/audit/key"),
    "GET /api/audit/entries": _audit("/api/audit/entries?start=0"),
    "GET /api/audit/proof/inclusion": _audit("/api/audit/proof/inclusion?index=0&size=1"),
    "GET /api/audit/proof/consistency": _audit("/api/audit/proof/consistency?from=0&to=1"),
    "GET /api/audit/grants/:grant_id": lambda w, c: _call(w, c, "GET", f"/api/audit/grants/{_pending(w)}"),
    "POST /api/audit/receipts": _receipt,
    "POST /api/hosts": _host,
    "GET /healthz": _get("/healthz"),
    "GET /readyz": _get("/readyz"),
    "GET /.well-known/jwks.json": _get("/.well-known/jwks.json"),
    "GET /.well-known/openid-configuration": _get("/.well-known/openid-configuration"),
    "GET /api/federation/providers": _get("/api/federation/providers"),
    "GET /openapi.json": _get("/openapi.json"),
    "GET /metrics": _get("/metrics"),  # [metrics] is off on the matrix server: off is 404 for everyone
    "POST /api/agent/challenge": _challenge("/api/agent/challenge"),
    "POST /api/auth/challenge": _challenge("/api/auth/challenge"),
    "POST /api/agent/authenticate": _authenticate("/api/agent/authenticate"),
    "POST /api/auth/authenticate": _authenticate("/api/auth/authenticate"),
    "POST /api/agent/enroll": _enroll("/api/agent/enroll"),
    "POST /api/auth/enroll": _enroll("/api/auth/enroll"),
    "GET /api/me": _get("/api/me"),
    "GET /api/admin/agents": _get("/api/admin/agents"),
    "POST /api/admin/agents": _enroll("/api/admin/agents"),
    "GET /api/admin/agents/:ident": lambda w, c: _call(
        w, c, "GET", f"/api/admin/agents/{w.agents['self'].agent_id}"
    ),
    "PUT /api/admin/agents/:ident": lambda w, c: _call(
        w, c, "PUT", f"/api/admin/agents/{w.enroll('throwaway').agent_id}", json={"name": "renamed"}
    ),
    "DELETE /api/admin/agents/:ident": lambda w, c: _call(
        w, c, "DELETE", f"/api/admin/agents/{w.enroll('throwaway').agent_id}"
    ),
    "POST /api/grants": _new_grant,
    "GET /api/grants": _get("/api/grants"),
    "GET /api/grants/:grant_id": lambda w, c: _call(w, c, "GET", f"/api/grants/{_pending(w)}"),
    "POST /api/grants/:grant_id/approve": _on_pending("approve"),
    "POST /api/grants/:grant_id/deny": _on_pending("deny"),
    "GET /api/grants/:grant_id/notifications": lambda w, c: _call(
        w, c, "GET", f"/api/grants/{_pending(w)}/notifications"
    ),
    "GET /api/grants/:grant_id/reviewers": lambda w, c: _call(
        w, c, "GET", f"/api/grants/{_pending(w)}/reviewers"
    ),
    "POST /api/policies/evaluate": lambda w, c: _call(
        w,
        c,
        "POST",
        "/api/policies/evaluate",
        json={
            "requester": w.agents["self"].email,
            "target_host": "web-1",
            "audience": "escapes",
            "command": ["ls"],
        },
    ),
    "POST /api/grants/:grant_id/review": lambda w, c: _call(
        w, c, "POST", f"/api/grants/{_pending(w)}/review", json={"decision": "approve"}
    ),
    "POST /api/grants/:grant_id/revoke": _on_pending("revoke"),
    "POST /api/grants/:grant_id/token": lambda w, c: _call(
        w, c, "POST", f"/api/grants/{w.approved(w.agents['self'])[1]}/token"
    ),
    "POST /api/grants/:grant_id/consume": _consume,
    "POST /api/grants/verify": _verify,
    "POST /api/grants/batch": lambda w, c: _call(
        w, c, "POST", "/api/grants/batch", json={"operations": [{"id": _pending(w), "action": "approve"}]}
    ),
    "GET /api/grants/events": _events,
    "POST /api/delegations": lambda w, c: _call(
        w,
        c,
        "POST",
        "/api/delegations",
        json={
            "delegate": w.agents["self"].email,
            "audience": "matrix-only",
            "approval": "once",
            "duration": 600,
        },
    ),
    "GET /api/delegations": _get("/api/delegations"),
    "DELETE /api/delegations/:delegation_id": lambda w, c: _call(
        w, c, "DELETE", f"/api/delegations/{w.delegation(w.agents['self'])['id']}"
    ),
    "POST /api/delegations/:delegation_id/validate": lambda w, c: _call(
        w,
        c,
        "POST",
        f"/api/delegations/{w.delegation(w.agents['self'])['id']}/validate",
        json={"delegate": w.agents["self"].email, "audience": "matrix-only"},
    ),
    # people (docs/api.md): the admin API
    "GET /api/admin/users": _get("/api/admin/users"),
    "POST /api/admin/users": lambda w, c: _call(
        w, c, "POST", "/api/admin/users", json={"email": fresh_email("user")}
    ),
    "GET /api/admin/users/:ident": lambda w, c: _call(
        w, c, "GET", f"/api/admin/users/{w.persons['person']['email']}"
    ),
    "PATCH /api/admin/users/:ident": lambda w, c: _call(
        w, c, "PATCH", f"/api/admin/users/{w.person('throwaway')['email']}", json={"name": "renamed"}
    ),
    "DELETE /api/admin/users/:ident": lambda w, c: _call(
        w, c, "DELETE", f"/api/admin/users/{w.person('throwaway')['person_id']}"
    ),
    "GET /api/admin/users/:ident/credentials": lambda w, c: _call(
        w, c, "GET", f"/api/admin/users/{w.persons['person']['email']}/credentials"
    ),
    "GET /api/admin/sessions": _get("/api/admin/sessions"),
    "DELETE /api/admin/sessions/:family_id": lambda w, c: _call(
        w, c, "DELETE", f"/api/admin/sessions/{w.throwaway_session_family()}"
    ),
    "DELETE /api/admin/sessions/user/:ident": lambda w, c: _call(
        w, c, "DELETE", f"/api/admin/sessions/user/{w.person('throwaway')['email']}"
    ),
    "GET /api/admin/registration-urls": _get("/api/admin/registration-urls"),
    "POST /api/admin/registration-urls": lambda w, c: _call(
        w, c, "POST", "/api/admin/registration-urls", json={"email": fresh_email("invitee")}
    ),
    "DELETE /api/admin/registration-urls/:ident": lambda w, c: _call(
        w, c, "DELETE", f"/api/admin/registration-urls/{w.throwaway_registration()}"
    ),
}


def _registration_token(w: World) -> str:
    from support.soft_webauthn import make_registration

    return make_registration(w.srv, fresh_email("person"))


def _register_verify(w: World, c: str) -> httpx.Response:
    from support.soft_webauthn import SoftAuthenticator

    token = _registration_token(w)
    with w.http() as http:
        answer = http.post("/api/webauthn/register/options", json={"token": token})
    response = SoftAuthenticator().create(answer.json(), w.srv.url)
    return _call(
        w,
        c,
        "POST",
        "/api/webauthn/register/verify",
        json={"token": token, "response": response},
        binding=answer.cookies["grantd_passkey"],
    )


def _login_verify(w: World, c: str) -> httpx.Response:
    from support.soft_webauthn import SoftAuthenticator

    if "passkey" not in w.__dict__:
        authenticator, token = SoftAuthenticator(), _registration_token(w)
        with w.http() as http:
            options = http.post("/api/webauthn/register/options", json={"token": token}).json()
            r = http.post(
                "/api/webauthn/register/verify",
                json={"token": token, "response": authenticator.create(options, w.srv.url)},
            )
        assert r.status_code == 200, r.text
        w.__dict__["passkey"] = authenticator
    with w.http() as http:
        answer = http.post("/api/webauthn/login/options", json={})
    response = w.__dict__["passkey"].get(answer.json(), w.srv.url)
    return _call(
        w,
        c,
        "POST",
        "/api/webauthn/login/verify",
        json={"response": response},
        binding=answer.cookies["grantd_passkey"],
    )


REQUESTS.update(
    {
        # The browser pages (grantd.web.pages): read-only GETs; redirects are not followed.
        "GET /": _get("/"),
        "GET /login": _get("/login"),
        "GET /register": lambda w, c: _call(w, c, "GET", f"/register?token={_registration_token(w)}"),
        "GET /account": _get("/account"),
        "GET /grants": _get("/grants"),
        "GET /grant-approval": lambda w, c: _call(w, c, "GET", f"/grant-approval?grant_id={_pending(w)}"),
        "GET /enroll": _get("/enroll?name=bot&key=ssh-ed25519%20AAAA"),
        "GET /admin": _get("/admin"),
        "GET /static/:name": _get("/static/grantd.js"),
        "GET /sw.js": _get("/sw.js"),
    }
)


def _user_code(w: World) -> str:
    """A fresh pending device authorization's user code."""
    with w.http() as http:
        r = http.post("/device_authorization", data={"client_id": "grantd-cli"})
    assert r.status_code == 200, r.text
    return str(r.json()["user_code"])


def _bc_authorize(w: World) -> dict[str, str]:
    """A CIBA request of the `self` agent with a fresh client assertion (D16)."""
    import json as jsonlib
    import uuid

    agent = w.agents["self"]
    now = w.srv.clock.now_s()
    assertion = jwt.encode(
        {"iss": agent.email, "sub": agent.email, "aud": w.srv.url, "exp": now + 60, "jti": str(uuid.uuid4())},
        agent.key,
        algorithm="EdDSA",
    )
    detail = {
        "type": "grantd_command",
        "locations": ["web-1"],
        "actions": ["execute"],
        "command": ["true"],
        "audience": "escapes",
        "grant_type": "once",
    }
    return {
        "scope": "openid",
        "login_hint": "policy",
        "authorization_details": jsonlib.dumps([detail]),
        "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
        "client_assertion": assertion,
    }


REQUESTS.update(
    {
        # CIBA (grantd.web.api.ciba, D16).
        "POST /bc-authorize": lambda w, c: _call(w, c, "POST", "/bc-authorize", data=_bc_authorize(w)),
        # The device grant (grantd.web.api.device).
        "POST /device_authorization": lambda w, c: _call(
            w, c, "POST", "/device_authorization", data={"client_id": "grantd-cli"}
        ),
        "GET /device": lambda w, c: _call(w, c, "GET", f"/device?user_code={_user_code(w)}"),
        "POST /api/device/decide": lambda w, c: _call(
            w, c, "POST", "/api/device/decide", json={"user_code": _user_code(w), "approve": True}
        ),
    }
)


def _passkey_of(w: World, c: str) -> Any:
    """A SoftAuthenticator holding a passkey of the column's person (registered once through an
    ``add-device`` registration URL), or None for a column that is no person."""
    from support.soft_webauthn import SoftAuthenticator, make_registration

    if c not in w.persons:
        return None
    held = w.__dict__.setdefault("person_passkeys", {})
    if c not in held:
        authenticator, token = (
            SoftAuthenticator(),
            make_registration(w.srv, w.persons[c]["email"], purpose="add-device"),
        )
        with w.http() as http:
            options = http.post("/api/webauthn/register/options", json={"token": token}).json()
            r = http.post(
                "/api/webauthn/register/verify",
                json={"token": token, "response": authenticator.create(options, w.srv.url)},
            )
        assert r.status_code == 200, r.text
        held[c] = authenticator
    return held[c]


def _reauth(w: World, c: str) -> httpx.Response:
    _passkey_of(w, c)
    return _call(w, c, "POST", "/api/webauthn/credentials/add/reauth", json={})


def _confirmed_add_options(w: World, c: str) -> httpx.Response:
    """add/reauth, the person's passkey signs it (user verified), add/options with that assertion
    (a column refused the reauth posts an empty response: it is refused before the body is read)."""
    authenticator = _passkey_of(w, c)
    with w.http_for(c) as http:
        reauth = http.post("/api/webauthn/credentials/add/reauth", json={})
    assertion = authenticator.get(reauth.json(), w.srv.url) if reauth.status_code == 200 else {}
    return _call(w, c, "POST", "/api/webauthn/credentials/add/options", json={"response": assertion})


def _add_passkey(w: World, c: str) -> httpx.Response:
    """add/reauth, add/options, add/verify with a new software authenticator, as the column's caller."""
    from support.soft_webauthn import SoftAuthenticator

    options = _confirmed_add_options(w, c)
    response = SoftAuthenticator().create(options.json(), w.srv.url) if options.status_code == 200 else {}
    return _call(w, c, "POST", "/api/webauthn/credentials/add/verify", json={"response": response})


def _end_own_session(w: World, c: str) -> httpx.Response:
    """End another session of the column's person (a second browser), by its id from the list."""
    family = "fam_not-yours"
    if c in w.persons:
        other = w.session(w.persons[c])
        with httpx.Client(base_url=w.srv.url, cookies={SESSION_COOKIE: other}, timeout=10) as http:
            family = next(s["id"] for s in http.get("/api/sessions").json()["data"] if s["current"])
    return _call(w, c, "DELETE", f"/api/sessions/{family}")


def _spare_passkey(w: World, c: str) -> str:
    """A passkey of the column's person that is not their last one (two added if need be)."""
    if c not in w.cookies or c == "guest":
        return "some-credential"
    for _ in range(2):
        r = _add_passkey(w, c)
        assert r.status_code == 201, r.text
    return str(r.json()["credential"]["id"])


REQUESTS.update(
    {
        "POST /api/webauthn/register/options": lambda w, c: _call(
            w, c, "POST", "/api/webauthn/register/options", json={"token": _registration_token(w)}
        ),
        "POST /api/webauthn/register/verify": _register_verify,
        "POST /api/webauthn/login/options": lambda w, c: _call(
            w, c, "POST", "/api/webauthn/login/options", json={}
        ),
        "POST /api/webauthn/login/verify": _login_verify,
        "GET /api/webauthn/credentials": _get("/api/webauthn/credentials"),
        "POST /api/webauthn/credentials/add/reauth": _reauth,
        "POST /api/webauthn/credentials/add/options": _confirmed_add_options,
        "GET /api/sessions": _get("/api/sessions"),
        "DELETE /api/sessions/:session_id": _end_own_session,
        "POST /api/webauthn/credentials/add/verify": lambda w, c: _add_passkey(w, c),
        "DELETE /api/webauthn/credentials/:credential_id": lambda w, c: _call(
            w, c, "DELETE", f"/api/webauthn/credentials/{_spare_passkey(w, c)}"
        ),
        "POST /api/logout": lambda w, c: _call(w, c, "POST", "/api/logout", json={}),
    }
)

REQUESTS.update(
    {
        # SP login (D9): the matrix server is its own IdP for matrix.test (a DDISA record on a local DNS server)
        "POST /api/login": lambda w, c: _call(
            w, c, "POST", "/api/login", json={"email": "someone@matrix.test"}
        ),
        "GET /api/callback": _get("/api/callback?code=not-a-code&state=not-a-state"),  # -> /?error=...
        "GET /auth/federated/:provider_id": _get("/auth/federated/self?next=/account"),
        "GET /auth/federated/:provider_id/callback": _get(
            "/auth/federated/self/callback?code=x&state=not-a-state"
        ),
        "GET /.well-known/oauth-client-metadata": _get("/.well-known/oauth-client-metadata"),
        "GET /.well-known/auth.md": _get("/.well-known/auth.md"),
        "GET /.well-known/grantd.json": _get("/.well-known/grantd.json"),
        "GET /.well-known/service.json": _get("/.well-known/service.json"),
    }
)


def _remember_consent(w: World, c: str) -> None:
    """The column's person has consented to apes-cli before (so /authorize answers with a code)."""
    if c in w.persons:
        now = w.srv.clock.now_ms()
        w.srv.call(
            w.srv.services.store.consents.remember(
                {
                    "person_id": w.persons[c]["person_id"],
                    "client_id": "apes-cli",
                    "scope": "openid email profile offline_access",
                    "created_at": now,
                    "updated_at": now,
                }
            )
        )


def _apes_authorize(challenge: str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM") -> str:
    from urllib.parse import urlencode

    return urlencode(
        {
            "response_type": "code",
            "client_id": "apes-cli",
            "redirect_uri": "http://localhost:9876/callback",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": "matrix",
            "scope": "openid email profile offline_access",
        }
    )


def _consent_ticket(w: World, c: str) -> str | None:
    """The one-time ticket of the consent page the column's person is shown for apes-cli (None for
    columns without a session: their POST is refused before any ticket is looked at)."""
    if c not in w.cookies:
        return None
    from oauth_support import ticket_of

    with httpx.Client(base_url=w.srv.url, cookies={SESSION_COOKIE: w.cookies[c]}, timeout=10) as http:
        return ticket_of(http.get("/authorize?" + _apes_authorize()).text)


def _consent(w: World, c: str) -> httpx.Response:
    return _call(
        w,
        c,
        "POST",
        "/authorize/consent",
        json={"request": _apes_authorize(), "approve": True, "ticket": _consent_ticket(w, c)},
    )


def _code_exchange(w: World) -> dict[str, str]:
    """A fresh code of the `person` column for apes-cli, as /token form fields."""
    from urllib.parse import parse_qs, urlsplit

    verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    _remember_consent(w, "person")
    with httpx.Client(base_url=w.srv.url, cookies={SESSION_COOKIE: w.cookies["person"]}, timeout=10) as http:
        # apes-cli is asked every time (RFC 8252 §8.6): the consent page's approval gives the code
        ticket = _consent_ticket(w, "person")
        location = http.post(
            "/authorize/consent",
            json={"request": _apes_authorize(), "approve": True, "ticket": ticket},
            headers={"Origin": w.srv.url},
        ).json()["location"]
    code = parse_qs(urlsplit(location).query)["code"][0]
    return {
        "grant_type": "authorization_code",
        "code": code,
        "code_verifier": verifier,
        "client_id": "apes-cli",
        "redirect_uri": "http://localhost:9876/callback",
    }


def _withdraw_consent(w: World, c: str) -> httpx.Response:
    _remember_consent(w, c)
    return _call(w, c, "DELETE", "/api/account/consents/apes-cli")


REQUESTS.update(
    {
        # The OAuth provider (grantd.web.api.oauth)
        "GET /authorize": lambda w, c: (
            _remember_consent(w, c),
            _call(w, c, "GET", "/authorize?" + _apes_authorize()),
        )[1],
        "POST /authorize/consent": _consent,
        "POST /token": lambda w, c: _call(w, c, "POST", "/token", data=_code_exchange(w)),
        "POST /revoke": lambda w, c: _call(w, c, "POST", "/revoke", data={"token": "not-a-token-of-ours"}),
        "GET /.well-known/oauth-authorization-server": _get("/.well-known/oauth-authorization-server"),
        "POST /introspect": lambda w, c: _call(w, c, "POST", "/introspect", data={"token": "not-a-token"}),
        "GET /authorize/poll/:secret": _get("/authorize/poll/" + "p" * 43),
        "GET /userinfo": _get("/userinfo"),
        "POST /userinfo": lambda w, c: _call(w, c, "POST", "/userinfo"),
        "GET /api/account/consents": _get("/api/account/consents"),
        "GET /api/account/notifications": _get("/api/account/notifications"),
        "GET /r/:token": lambda w, c: _call(w, c, "GET", f"/r/{_review_link(w)}"),
        "GET /api/push/vapid": _get("/api/push/vapid"),
        "GET /api/push/subscriptions": _get("/api/push/subscriptions"),
        "POST /api/push/subscriptions": lambda w, c: _call(
            w,
            c,
            "POST",
            "/api/push/subscriptions",
            json={"endpoint": "https://fcm.googleapis.com/x", "keys": {"p256dh": "A", "auth": "A"}},
        ),
        "DELETE /api/push/subscriptions/:subscription_id": lambda w, c: _call(
            w, c, "DELETE", "/api/push/subscriptions/sub_nobodys"
        ),
        "POST /r/:token/options": lambda w, c: _call(
            w, c, "POST", f"/r/{_review_link(w, passkey=True)}/options", json={}
        ),
        "POST /r/:token": lambda w, c: _call(
            w, c, "POST", f"/r/{_review_link(w)}", json={"decision": "approve"}
        ),
        "POST /r/:token/deny": lambda w, c: _call(w, c, "POST", f"/r/{_review_link(w, 'deny')}/deny"),
        "PUT /api/account/notifications": lambda w, c: _call(
            w, c, "PUT", "/api/account/notifications", json={"channels": {}}
        ),
        "DELETE /api/account/consents/:client_id": _withdraw_consent,
    }
)


def check(response: httpx.Response, expected: str) -> None:
    status_text, _, marker = expected.partition(" ")
    status = int(status_text)
    body = response.text if response.is_stream_consumed or response.status_code != 200 else ""
    assert response.status_code == status, f"expected {expected}, got {response.status_code}: {body[:300]}"
    if marker == "login":  # a page (or /) sends a visitor without a session to sign in
        assert response.headers["location"].startswith("/login"), response.headers
        return
    if marker == "page":  # an HTML page (errors too: pages never answer problem+json)
        assert response.headers["content-type"].startswith("text/html"), response.headers
        return
    if marker in ("oauth", "basic"):  # /token, /revoke, /userinfo, /introspect errors: {error,
        # error_description} (D2), not problem+json; /introspect asks for HTTP Basic
        assert response.headers["content-type"].startswith("application/json"), response.headers
        assert "error" in response.json() and response.headers["cache-control"].startswith("no-store")
        if status == 401:
            scheme = "Basic" if marker == "basic" else "Bearer"
            assert response.headers.get("www-authenticate", "").startswith(scheme), response.headers
        return
    if status == 401:
        assert response.headers.get("www-authenticate", "").startswith("Bearer"), response.headers
    if status >= 400:
        assert response.headers["content-type"].startswith("application/problem+json"), response.headers
        assert json.loads(body)["status"] == status
    if not marker:
        return
    answer = response.json()
    if marker in ("valid", "invalid") and "valid" in answer:
        assert answer["valid"] is (marker == "valid"), answer
    elif marker in ("consumed", "valid"):
        assert answer.get("status") == marker and "error" not in answer, answer
    elif marker == "revoked":
        assert answer.get("error") == "revoked", answer
    elif marker.startswith("op:"):
        [result] = answer["results"]
        if marker == "op:ok":
            assert result["success"] is True, result
        else:
            assert result["success"] is False and result["error"]["status"] == int(marker[3:]), result
    else:
        raise AssertionError(f"unknown marker {marker!r} in the table")


def route_keys(app: Any) -> set[str]:
    """Every (method, path) the app's router serves, in the table's spelling (`:name` parameters)."""
    import re

    keys = set()
    for route in app.router.routes:
        path = "/" + re.sub(r"<([A-Za-z_][A-Za-z0-9_]*)(?::[^>]*)?>", r":\1", route.path)
        for method in route.methods:
            if method not in ("HEAD", "OPTIONS"):
                keys.add(f"{method} {path}")
    return keys


# -- the tests ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    from inproc import InProcessServer

    from dns_server import TxtDnsServer

    with TxtDnsServer({}) as dns:
        sp = f'\n[sp]\nenabled = true\nallow_http_idp = true\nnameservers = ["{dns.address}"]\n'
        srv = InProcessServer(tmp_path_factory.mktemp("authz"), extra=NO_LIMITS + sp)
        federate_to_itself(srv)
        srv.start()
        dns.records["_ddisa.matrix.test"] = [f"v=ddisa1 idp={srv.url}"]
        try:
            yield build_world(srv)
        finally:
            srv.stop()


def federate_to_itself(srv: Any) -> None:
    """A [[federation.providers]] table "self" whose upstream is the server itself (federated sign-in)."""
    (srv.directory / "self-client-secret").write_text("matrix-client-secret\n")
    (srv.directory / "self-client-secret").chmod(0o600)
    with srv.config_path.open("a") as config:
        config.write(
            f'\n[[federation.providers]]\nid = "self"\ntype = "oidc"\nissuer = "{srv.url}"\n'
            'client_id = "matrix"\nclient_secret = "file:self-client-secret"\n'
        )


CELLS = [(route, column) for route in ROWS for column in COLUMNS]


@pytest.mark.parametrize(("route", "column"), CELLS, ids=[f"{r} | {c}" for r, c in CELLS])
def test_cell(world: World, route: str, column: str) -> None:
    check(REQUESTS[route](world, column), ROWS[route][column])


def test_every_route_is_in_the_table(world: World) -> None:
    served = route_keys(world.srv.app)
    assert served - set(ROWS) == set(), "routes missing from the authorisation matrix (add a row to TABLE)"
    assert set(ROWS) - served == set(), "rows for routes the server does not have"
    assert set(REQUESTS) == set(ROWS), "every row needs a representative request in REQUESTS"


def test_every_column_has_a_legend() -> None:
    assert COLUMNS == list(CALLERS) == list(AUTHZ_LEGEND)


def test_docs_match_the_table() -> None:
    expected = render_doc()
    if os.environ.get("GRANTD_WRITE_AUTHZ_DOC"):
        DOC.write_text(expected)
    assert DOC.exists() and DOC.read_text() == expected, (
        "docs/authorization.md is out of date: run `.venv/bin/python tests/system/test_authz_matrix.py`"
    )


if __name__ == "__main__":
    DOC.write_text(render_doc())
    print(f"wrote {DOC}")

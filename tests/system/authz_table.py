"""The authorisation matrix's table: every route x every kind of caller -> the expected answer, the
callers' legends, and docs/authorization.md rendered from them. tests/system/test_authz_matrix.py
checks every cell against a real server and that the page matches."""

from __future__ import annotations

from pathlib import Path

from authz_world import PERSON_COLUMNS

DOC = Path(__file__).resolve().parents[2] / "docs" / "authorization.md"

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
POST /api/grants/:grant_id/consume             | 401 | 401 | 401 | 401 | 200 revoked | 200 revoked | 200 revoked | 200 valid | 200 consumed | 403 | 403 | 401 | 401 | 401 | 401 | 401 | 401 | 401
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
        "<!-- Generated from tests/system/authz_table.py (TABLE); do not edit by hand. Regenerate with",
        "     `.venv/bin/python tests/system/test_authz_matrix.py` after changing the table. -->",
        "",
        "Every route of the server against every kind of caller, with the HTTP status a representative",
        "valid request answers. The test suite sends each of these requests to a real server",
        "(tests/system/test_authz_matrix.py) and fails when an answer differs, or when the server has a route",
        "this table does not list.",
        "",
        "Rules (decisions D2, D6, D7, D11): no credential -> 401 with `WWW-Authenticate: Bearer`;",
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

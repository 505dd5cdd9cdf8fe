"""grantd as an OAuth 2.0 authorization server and OpenID provider (D3, D9).

Laid out the way authlib splits an authorization server — clients, grants, endpoints — but async
and on grantd's own store, clock and token module (authlib's server parts are synchronous and
bound to their own request and model classes). See docs/oauth.md.
"""

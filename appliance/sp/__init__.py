"""Service-provider login: people of other domains sign in here through their own IdP.

Only DDISA discovery (`grantd.sp.ddisa`) exists so far, as a plain library; the login endpoints
and their `[sp]` config arrive with SP login.
"""

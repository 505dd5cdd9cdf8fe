"""Service-provider login (D9, docs/sp.md): people of other domains sign in here through the
identity provider their e-mail domain names in DNS (``grantd.sp.ddisa``), as guests
(``grantd.sp.login``; routes in ``grantd.web.api.sp``; config ``[sp]``)."""

"""The storage contract suite and the in-memory example backend, shipped with grantd.

``python -m pytest --pyargs grantd.testing`` (from any directory, with pytest, anyio and, for
PostgreSQL, psycopg installed) checks every guarantee of ``grantd.store`` against the built-in
SQLite backend, the in-memory example (``memory_store``) and, given
``GRANTD_CONTRACT_POSTGRES_DSN``, PostgreSQL; ``GRANTD_CONTRACT_STORE=module:factory`` runs it
against a third-party backend instead (conftest.py, docs/plugins.md). The server never imports
this package.
"""

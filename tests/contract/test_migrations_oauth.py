"""grantd.testing.test_migrations_oauth, run in grantd's own suite (tests/contract/conftest.py)."""

from grantd.testing.test_migrations_oauth import *  # noqa: F403

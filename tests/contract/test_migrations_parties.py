"""grantd.testing.test_migrations_parties, run in grantd's own suite (tests/contract/conftest.py)."""

from grantd.testing.test_migrations_parties import *  # noqa: F403

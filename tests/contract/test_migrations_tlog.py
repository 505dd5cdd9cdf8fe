"""grantd.testing.test_migrations_tlog, run in grantd's own suite (tests/contract/conftest.py)."""

from grantd.testing.test_migrations_tlog import *  # noqa: F403

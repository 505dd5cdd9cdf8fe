"""grantd.testing.test_migrations_reviews_due, run in grantd's own suite (tests/contract/conftest.py)."""

from grantd.testing.test_migrations_reviews_due import *  # noqa: F403

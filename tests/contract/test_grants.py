"""grantd.testing.test_grants, run in grantd's own suite (tests/contract/conftest.py)."""

from grantd.testing.test_grants import *  # noqa: F403

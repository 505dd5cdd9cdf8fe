"""grantd.testing.test_challenges, run in grantd's own suite (tests/contract/conftest.py)."""

from grantd.testing.test_challenges import *  # noqa: F403

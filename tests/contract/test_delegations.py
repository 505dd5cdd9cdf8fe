"""grantd.testing.test_delegations, run in grantd's own suite (tests/contract/conftest.py)."""

from grantd.testing.test_delegations import *  # noqa: F403

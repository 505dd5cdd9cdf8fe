"""grantd.testing.test_rates, run in grantd's own suite (tests/contract/conftest.py)."""

from grantd.testing.test_rates import *  # noqa: F403

"""grantd.testing.test_ciba, run in grantd's own suite (tests/contract/conftest.py)."""

from grantd.testing.test_ciba import *  # noqa: F403

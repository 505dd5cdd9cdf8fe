"""grantd.testing.test_keys, run in grantd's own suite (tests/contract/conftest.py)."""

from grantd.testing.test_keys import *  # noqa: F403

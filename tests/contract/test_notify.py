"""grantd.testing.test_notify, run in grantd's own suite (tests/contract/conftest.py)."""

from grantd.testing.test_notify import *  # noqa: F403

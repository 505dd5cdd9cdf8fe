"""grantd.testing.test_grant_summary, run in grantd's own suite (tests/contract/conftest.py)."""

from grantd.testing.test_grant_summary import *  # noqa: F403

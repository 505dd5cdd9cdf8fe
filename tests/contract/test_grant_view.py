"""grantd.testing.test_grant_view, run in grantd's own suite (tests/contract/conftest.py)."""

from grantd.testing.test_grant_view import *  # noqa: F403

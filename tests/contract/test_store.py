"""grantd.testing.test_store, run in grantd's own suite (tests/contract/conftest.py)."""

from grantd.testing.test_store import *  # noqa: F403

"""grantd.testing.test_processes, run in grantd's own suite (tests/contract/conftest.py)."""

from grantd.testing.test_processes import *  # noqa: F403

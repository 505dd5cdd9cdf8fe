"""grantd.testing.test_restore_contract, run in grantd's own suite (tests/contract/conftest.py)."""

from grantd.testing.test_restore_contract import *  # noqa: F403

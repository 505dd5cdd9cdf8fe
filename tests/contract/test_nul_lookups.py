"""grantd.testing.test_nul_lookups, run in grantd's own suite (tests/contract/conftest.py)."""

from grantd.testing.test_nul_lookups import *  # noqa: F403

"""grantd.testing.test_people, run in grantd's own suite (tests/contract/conftest.py)."""

from grantd.testing.test_people import *  # noqa: F403

"""grantd.testing.test_person_lifecycle, run in grantd's own suite (tests/contract/conftest.py)."""

from grantd.testing.test_person_lifecycle import *  # noqa: F403

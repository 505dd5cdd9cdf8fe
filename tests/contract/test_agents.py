"""grantd.testing.test_agents, run in grantd's own suite (tests/contract/conftest.py)."""

from grantd.testing.test_agents import *  # noqa: F403

"""grantd: identity provider and human-in-the-loop grant service for AI agents."""

__version__ = "0.1.0"

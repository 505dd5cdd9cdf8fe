"""grantd's built-in plugins: each is an ordinary pluggy plugin module, registered by import."""

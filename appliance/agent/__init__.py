"""The agent's side of grantd: `grantd agent`, `grantd grant` and `grantd run` (grantd.agent.cli).

A client of the HTTP interface only: httpx and cryptography, never a server module (tests/test_layers.py).
"""

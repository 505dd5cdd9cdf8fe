"""The elevation tool, `grantd elevate` (grantd.elevate.cli), and its hook spec (grantd.elevate.hookspecs).

It runs as root on target hosts, so it imports only itself, its hook spec and its plugins: no server
module, no agent or console code (tests/test_layers.py, tests/test_elevate.py). Keep this file empty
of imports: the server's plugin manager imports grantd.elevate.hookspecs, and with it this package.
"""

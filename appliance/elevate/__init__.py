"""The elevation tool, `grantd elevate`, and its hook spec (grantd.elevate.hookspecs).

It runs as root on target hosts, so it imports only itself, its hook spec and its plugins: no server
module, no agent or console code (tests/unit/test_layers.py, tests/system/test_elevate.py). Keep this file empty
of imports: the server's plugin manager imports grantd.elevate.hookspecs, and with it this package.

One small module per step, each readable on its own (they import only downward, in this order):

  errors    how an attempt ends: exit codes, Stop, the JSON line on stderr; the deadline on blocking work
  config    elevate.toml: root-owned, every key typed and bounded
  audit     the audit log (one JSON line per attempt, a second when an allowed command ends)
  caller    who called: through sudo or not, the caller's ids, acting with their permissions
  grant     reading the token (never from argv under sudo; a --grant-file must be the caller's, 0600)
  net       one bounded HTTP exchange; which failures mean "the issuer cannot be connected to at all"
  jwks      the issuer's keys, cached on disk with a bound
  checks    shape, signature, times, then the elevate_verify hook (plugins/elevate_default.py, site plugins)
  consume   consuming the grant at the issuer
  env       the command's environment (an allow-list)
  run       finding the program, fork, dropping to the run_as user, exec, forwarding signals, waiting
  hostkey   this host's key: --init-host makes it (root 0600, never overwritten), receipts load it
  receipts  a signed receipt after every attempt (D14 "Hosts"), the spool, --flush-receipts
  cli       `grantd elevate` itself: the arguments and the order of the steps above
"""

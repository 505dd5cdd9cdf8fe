"""A plugin that cannot load in the other server processes of a ``workers`` > 1 server (those
``grantd serve`` starts as ``python -m grantd.web.processes``), and loads in the first: how
tests/system/test_server_processes.py makes one process fail while it starts."""

import sys

if sys.argv and sys.argv[0].endswith("processes.py"):
    raise RuntimeError("refuse_in_peer_processes: this plugin does not load in the other server processes")

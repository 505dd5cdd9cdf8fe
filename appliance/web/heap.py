"""The start-up heap of a serving process, out of the garbage collector's way (issues 23 and 27).

Once a server process has started (the app, its routes, the configuration, the plugins, the opened
services: several hundred thousand objects that live as long as the process), CPython's cyclic
collector still walks them again and again: every collection of the oldest generation visits all
of them, and the young ones a request or a sequencer step makes get promoted and walked with them.
``gc.freeze()`` moves every object alive at that moment into a permanent generation the collector
never visits; objects made later are collected as before.

Measured (docs/performance.md, "Stop 18"): the decision log's sequencer, 1 worker, 16 clients,
3 interleaved rounds: 0.023 → 0.019 ms CPU per create, 0.026 → 0.021 per consume. Disabling the
collector altogether saved nothing more, so nothing else is changed (thresholds included).

The price: a start-up object that becomes cyclic garbage later is never freed. Start-up objects
live as long as the process, so that is at most a few objects once. Only processes of
``grantd serve`` freeze (not an app built in a test process, whose later garbage it would keep).
"""

from __future__ import annotations

import gc
from typing import Any

# after grantd's and plugins' own after-start listeners (priority 0: the services' background tasks
# are started), before the stopper's marker that the last one has returned (-10_000, web.stopping)
AFTER_START_PRIORITY = -5_000


def freeze_start_up_heap() -> None:
    """Collect what start-up left behind, then move everything alive into the permanent generation."""
    gc.collect()
    gc.freeze()


def freeze_after_start(app: Any) -> None:
    """Freeze the heap of a ``grantd serve`` process once its app has started."""

    async def freeze(app: Any) -> None:
        freeze_start_up_heap()

    app.after_server_start(freeze, priority=AFTER_START_PRIORITY)

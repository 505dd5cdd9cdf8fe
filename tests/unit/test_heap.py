"""grantd.web.heap: a serving process freezes its start-up heap once its app has started."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from grantd.web import heap


class _App:
    def __init__(self) -> None:
        self.listeners: list[tuple[Any, int]] = []

    def after_server_start(self, listener: Any, *, priority: int = 0) -> None:
        self.listeners.append((listener, priority))


def test_the_start_up_heap_goes_into_the_permanent_generation():
    gc.unfreeze()
    alive = [[i] for i in range(1000)]  # objects the collector tracks, alive at the freeze
    try:
        heap.freeze_start_up_heap()
        assert gc.get_freeze_count() >= len(alive)
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0


def test_a_serve_app_freezes_after_every_other_start_listener():
    app = _App()
    heap.freeze_after_start(app)
    [(listener, priority)] = app.listeners
    assert priority < 0  # Sanic runs lower priorities later: grantd's own listeners have 0 or more
    gc.unfreeze()
    try:
        asyncio.run(listener(app))
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()

"""The store's own event loop, in a thread: the pool outlives the callers' loops."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any

from .constants import CLOSE_TIMEOUT, R


# -- the store's own event loop ---------------------------------------------------------------------------
class _LoopThread:
    """An asyncio loop in a daemon thread: the store's connections for callers on any loop but the
    one it serves on (the CLI's several ``asyncio.run``, tests), and the LISTEN connection."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._main, name="grantd-postgres", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, R]) -> Future[R]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def run(self, coro: Coroutine[Any, Any, R]) -> R:
        """Await ``coro`` on the store's loop from any other loop (cancelling the caller cancels it)."""
        return await asyncio.wrap_future(self.submit(coro))

    def run_sync(self, coro: Coroutine[Any, Any, R], timeout: float | None = None) -> R:
        return self.submit(coro).result(timeout)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=CLOSE_TIMEOUT)
        if not self.thread.is_alive():
            self.loop.close()

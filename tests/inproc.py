"""A real grantd HTTP server on a free port, served from a thread of the test process, with a clock
the test moves (``ManualClock``): time-dependent rules are tested without sleeping.

It is the same app ``grantd serve`` runs (``grantd.web.app.create_app``) with the same config,
storage and plugins; only the process model differs (one process, one event loop in a thread).
It offers the attributes of ``conftest.Server`` that HTTP tests use (url, token, client, admin,
config_path, directory), so a test can take either.
"""

from __future__ import annotations

import asyncio
import base64
import os
import threading
from pathlib import Path
from typing import Any

import httpx
from sanic import Sanic
from support import postgres as pg

from grantd.config import load
from grantd.core.clock import ManualClock
from grantd.web.app import create_app

from conftest import free_port, toml_config

Sanic.test_mode = True  # several apps named "grantd" may live in one test process


class InProcessServer:
    def __init__(
        self,
        directory: Path,
        *,
        extra: str = "",
        clock: ManualClock | None = None,
        storage: str | None = None,
    ):
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.port = free_port()
        self.token = base64.urlsafe_b64encode(os.urandom(24)).decode()
        token_file = directory / "management-token"
        token_file.write_text(self.token + "\n")
        token_file.chmod(0o600)
        if storage is None:  # GRANTD_TEST_STORAGE=postgres: a fresh PostgreSQL database
            storage = pg.storage_for(directory)
        self.config_path.write_text(toml_config(self.port, extra=extra, storage=storage))
        self.clock = clock or ManualClock()
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._server: Any = None
        self._ready = threading.Event()
        self._failed: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.directory / "grantd.toml"

    @property
    def app(self) -> Sanic:
        return self._app

    @property
    def services(self) -> Any:
        return self._app.ctx.services

    def start(self) -> InProcessServer:
        config = load(self.config_path)
        self._app = create_app(config, clock=self.clock)
        self._thread = threading.Thread(target=self._run, name=f"grantd-{self.port}", daemon=True)
        self._thread.start()
        if not self._ready.wait(30) or self._failed is not None:
            raise RuntimeError(f"in-process grantd did not start: {self._failed!r}")
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            self._failed = exc
            self._ready.set()

    async def _serve(self) -> None:
        server = await self._app.create_server(
            host="127.0.0.1", port=self.port, return_asyncio_server=True, access_log=False
        )
        assert server is not None
        self._server = server
        await server.startup()
        await server.before_start()
        await server.after_start()
        self._ready.set()
        try:
            await server.serve_forever()
        except asyncio.CancelledError:
            pass

    def stop(self) -> None:
        if self._server is None:
            return
        server = self._server
        self._server = None

        async def shut() -> None:
            await server.before_stop()
            server.close()
            await server.wait_closed()
            await server.after_stop()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(15)
        if self._thread is not None:
            self._thread.join(10)

    def call(self, coroutine: Any) -> Any:
        """Run a coroutine on the server's loop (to reach its services directly)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(15)

    def log(self) -> str:
        return ""

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=10)

    def admin(self) -> httpx.Client:
        return self.client(self.token)

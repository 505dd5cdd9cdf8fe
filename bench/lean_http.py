"""A minimal HTTP/1.1 keep-alive client for the load generator.

Why it exists: httpx spends about a millisecond of CPU per request (measured: ~900 GET /healthz
a second with one core fully busy, and ~100/s when 64 requests share one AsyncClient pool, whose
connection assignment is quadratic). On a 2-core machine that shares its cores with the server,
the client then caps every figure far below the server's capacity. This client does only what the
benchmark needs - one connection, one request at a time, JSON bodies, Content-Length or chunked
answers - at a small fraction of the cost, and offers the subset of httpx's interface the
operations use (`get`, `post`, `status_code`, `headers`, `content`, `text`, `json()`)."""

from __future__ import annotations

import asyncio
import json as jsonlib
from typing import Any
from urllib.parse import urlsplit

MAX_HEADER_BYTES = 64 * 1024
TIMEOUT_S = 30.0  # a stuck server must end as an error, not hang the benchmark


class Response:
    def __init__(self, method: str, status_code: int, headers: dict[str, str], content: bytes):
        self.method = method
        self.status_code = status_code
        self.headers = headers  # names in lower case
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")

    def json(self) -> Any:
        return jsonlib.loads(self.content)


class LeanClient:
    """One keep-alive connection to one server; reconnects after an error or a `Connection: close`."""

    def __init__(self, base_url: str):
        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self._host_header = parts.netloc
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def get(self, path: str, *, headers: dict[str, str] | None = None) -> Response:
        return await self.request("GET", path, headers=headers)

    async def post(self, path: str, *, json: Any = None, headers: dict[str, str] | None = None) -> Response:
        return await self.request("POST", path, json=json, headers=headers)

    async def request(
        self, method: str, path: str, *, json: Any = None, headers: dict[str, str] | None = None
    ) -> Response:
        body = b"" if json is None else jsonlib.dumps(json).encode()
        head = [f"{method} {path} HTTP/1.1", f"Host: {self._host_header}"]
        if method != "GET":  # like curl and browsers: no Content-Length on a GET without a body
            head.append(f"Content-Length: {len(body)}")
        if json is not None:
            head.append("Content-Type: application/json")
        head.extend(f"{name}: {value}" for name, value in (headers or {}).items())
        message = ("\r\n".join(head) + "\r\n\r\n").encode() + body
        reused = self._writer is not None
        try:
            async with asyncio.timeout(TIMEOUT_S):
                return await self._exchange(method, message)
        except (ConnectionResetError, BrokenPipeError, asyncio.IncompleteReadError) as error:
            await self.aclose()  # the connection's state is unknown: never reuse it
            if not reused or (isinstance(error, asyncio.IncompleteReadError) and error.partial):
                raise
            # A kept-alive connection the server had already closed (Node closes idle ones after
            # 5 s: the peer between two windows), reset before any answer: the request was not
            # read, so it is sent once more on a new connection, as HTTP clients do.
            try:
                async with asyncio.timeout(TIMEOUT_S):
                    return await self._exchange(method, message)
            except BaseException:
                await self.aclose()
                raise
        except BaseException:
            await self.aclose()  # the connection's state is unknown: never reuse it
            raise

    async def _exchange(self, method: str, message: bytes) -> Response:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        self._writer.write(message)
        status, headers = self._parse_head(await self._reader.readuntil(b"\r\n\r\n"))
        content = await self._read_body(method, status, headers)
        if headers.get("connection", "").lower() == "close":
            await self.aclose()
        return Response(method, status, headers, content)

    @staticmethod
    def _parse_head(raw: bytes) -> tuple[int, dict[str, str]]:
        if len(raw) > MAX_HEADER_BYTES:
            raise ConnectionError("response head too large")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        return status, headers

    async def _read_body(self, method: str, status: int, headers: dict[str, str]) -> bytes:
        assert self._reader is not None
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return b""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            return await self._read_chunked()
        if "content-length" not in headers:
            raise ConnectionError("answer without a length (a benchmark client needs one)")
        return await self._reader.readexactly(int(headers["content-length"]))

    async def _read_chunked(self) -> bytes:
        assert self._reader is not None
        chunks: list[bytes] = []
        while True:
            size = int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self._reader.readuntil(b"\r\n")  # no trailers expected: the final empty line
                return b"".join(chunks)
            chunks.append(await self._reader.readexactly(size))
            await self._reader.readexactly(2)

    async def aclose(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass

    async def __aenter__(self) -> LeanClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

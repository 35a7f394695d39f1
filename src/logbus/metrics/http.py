"""The `/metrics` endpoint: a small HTTP/1.x server on the broker's event loop.

Not prometheus_client's own server: that one starts a thread per connection with no timeout, so
idle or slow clients would pile up threads, and its collectors would read broker state from
another thread. Here every request is hostile until parsed: the request head is read within
REQUEST_TIMEOUT_S and MAX_HEAD_BYTES, at most MAX_CONNECTIONS are open at once (more are closed
at once), only `GET` and `HEAD` of `/metrics` are served, and each connection closes after one
answer. The families are collected on the event loop (state read between callbacks, no lock)
and formatted by prometheus_client's encoder in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator

from prometheus_client.core import Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 8192  # request line and headers
REQUEST_TIMEOUT_S = 10.0  # to receive the request head, and again to send the answer
MAX_CONNECTIONS = 16
PATH = "/metrics"


class _Collected(Collector):
    """Families already collected, for the encoder to format off the event loop."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


class MetricsServer:
    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self.registry = registry
        self.host = host
        self.port = port  # 0 until bound when asked for any free port
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task] = set()

    async def start(self) -> int:
        """Bind and serve; returns the bound port. A failed bind names the endpoint as the OSError's filename."""
        try:
            self._server = await asyncio.start_server(self._accept, self.host, self.port, limit=MAX_HEAD_BYTES)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, f"metrics endpoint {self.host}:{self.port}") from exc
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._connections):
            task.cancel()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= MAX_CONNECTIONS:
            writer.transport.abort()
            return
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
            status, content_type, body, send_body = await self._answer(head)
            writer.write(_response_head(status, content_type, len(body)) + (body if send_body else b""))
            writer.close()
            await asyncio.wait_for(writer.wait_closed(), REQUEST_TIMEOUT_S)
        except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError, ConnectionError) as exc:
            log.debug("metrics: dropping a connection: %r", exc)
        except Exception:  # a collector failed: the scrape fails, the broker goes on
            log.exception("metrics: collecting failed")
        finally:
            writer.transport.abort()  # a no-op once closed; drops what a slow reader left unsent

    async def _answer(self, head: bytes) -> tuple[str, str, bytes, bool]:
        """(status, content type, body, whether to send the body) for a request head."""
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return "400 Bad Request", "text/plain", b"bad request\n", True
        method, target, _ = parts
        if target.split("?", 1)[0] != PATH:
            return "404 Not Found", "text/plain", b"not found: try /metrics\n", method != "HEAD"
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"GET or HEAD only\n", True
        encoder, content_type = choose_encoder(_header(head, b"accept"))
        collected = _Collected(self.registry.collect())
        body = await asyncio.get_running_loop().run_in_executor(None, encoder, collected)
        return "200 OK", content_type, body, method == "GET"


def _header(head: bytes, name: bytes) -> str:
    """A header's value (the first), or ""."""
    for line in head.split(b"\r\n")[1:]:
        key, sep, value = line.partition(b":")
        if sep and key.strip().lower() == name:
            return value.strip().decode("latin-1")
    return ""


def _response_head(status: str, content_type: str, length: int) -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n"
            f"Connection: close\r\n\r\n").encode("latin-1")

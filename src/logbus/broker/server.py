"""The network server: Kafka frames in, responses out, one connection at a time in order.

Each connection receives into a reusable buffer (BufferedProtocol, i.e. `recv_into`), splits
frames, and processes them one after another, as Kafka does (a client's responses must come
back in request order). A frame over socket.request.max.bytes, an unknown API key or a
request that does not decode closes that connection only; everyone else keeps being served.

Responses are written through the transport, except the file regions of a fetch response:
once everything before a region has left the transport's buffer (the write buffer limit is
0, so `resume_writing` says exactly that), the region goes from the segment file to the
socket with `sendfile` (uvloop has no `loop.sendfile`; readiness is polled on a `dup` of the
socket, as libuv allows one handle per descriptor).

Which connections get file regions is `socket.sendfile`; by default only readers that are not
on loopback. sendfile spares the broker two copies, but a reader on the same host must copy
the bytes out of the socket anyway, and copying them out of page-cache pages costs it about
twice the CPU of copying freshly written ones: a loopback consumer of 1 KB records reads
~1.45 GB/s with sendfile and ~2.0 GB/s without (docs/architecture.md, where the time goes).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
from collections import deque
from typing import TYPE_CHECKING

from ..protocol import codec
from ..protocol.frames import (
    FrameError,
    FrameSplitter,
    MalformedRequestError,
    frame_chunks,
    parse_request_header,
    peek_api,
    response_header,
)
from ..storage.segment import FileRegion
from .apis import ApiSpec, registry
from .apis.api_versions import unsupported_version_response
from .context import RawResponse, RequestContext

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)

API_VERSIONS_KEY = 18
MAX_QUEUED_FRAMES = 64


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.apis = registry()
        self.splitter = FrameSplitter(broker.socket_request_max_bytes)
        self.transport: asyncio.Transport | None = None
        self.client_host = "?"
        self.sendfile = False
        self._frames: deque[bytes] = deque()
        self._worker: asyncio.Task | None = None
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._reading_paused = False
        self._closed = False

    # ------------------------------------------------------------------ transport callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.set_write_buffer_limits(high=0)  # resume_writing: the buffer is empty
        peer = transport.get_extra_info("peername")
        self.client_host = peer[0] if peer else "?"
        self.sendfile = _uses_sendfile(self.broker.socket_sendfile, self.client_host)
        self.broker.connections.add(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.splitter.writable(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self.splitter.received(nbytes)
        except FrameError as exc:
            log.warning("closing connection from %s: %s", self.client_host, exc)
            self.close()
            return
        if not frames:
            return
        self._frames.extend(frames)
        if len(self._frames) >= MAX_QUEUED_FRAMES and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._process())

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._can_write.set()
        self.broker.connections.discard(self)
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()

    def close(self) -> None:
        self._closed = True
        self._frames.clear()
        if self.transport is not None:
            self.transport.close()

    # ------------------------------------------------------------------ request processing

    async def _process(self) -> None:
        while self._frames and not self._closed:
            frame = self._frames.popleft()
            if self._reading_paused and len(self._frames) < MAX_QUEUED_FRAMES // 2:
                self._reading_paused = False
                self.transport.resume_reading()
            try:
                chunks = await self._respond(frame)
            except MalformedRequestError as exc:
                log.warning("closing connection from %s: %s", self.client_host, exc)
                self.close()
                return
            except Exception:
                log.exception("request failed; closing connection from %s", self.client_host)
                self.close()
                return
            if chunks is not None and not self._closed:
                try:
                    await self._send(chunks)
                except ConnectionError as exc:  # the client went away mid-response, as consumers do
                    log.debug("connection from %s gone while sending: %s", self.client_host, exc)
                    self.close()
                    return
                except OSError as exc:  # reading the segment file failed
                    log.warning("closing connection from %s while sending: %s", self.client_host, exc)
                    self.close()
                    return

    async def _send(self, chunks: list[bytes | memoryview | FileRegion]) -> None:
        """Write one response in order; each file region once everything before it is out."""
        try:
            start = 0
            for i, chunk in enumerate(chunks):
                if isinstance(chunk, FileRegion):
                    self.transport.writelines(chunks[start:i])
                    await self._can_write.wait()
                    await self._send_region(chunk)
                    start = i + 1
            self.transport.writelines(chunks[start:])
            await self._can_write.wait()
        finally:
            for chunk in chunks:
                if isinstance(chunk, FileRegion):
                    chunk.close()

    async def _send_region(self, region: FileRegion) -> None:
        """sendfile the region to the socket, waiting for room whenever the socket is full."""
        socket_fd = os.dup(self.transport.get_extra_info("socket").fileno())
        try:
            position, end = region.position, region.position + region.size
            while position < end and not self._closed:
                try:
                    sent = os.sendfile(socket_fd, region.file.fileno(), position, end - position)
                except BlockingIOError:
                    await _writable(socket_fd)
                    continue
                if sent == 0:
                    raise OSError(f"segment file ends {end - position} bytes before the region does")
                position += sent
        finally:
            os.close(socket_fd)

    async def _respond(self, frame: bytes) -> list[bytes | memoryview | FileRegion] | None:
        api_key, api_version, correlation_id = peek_api(frame)
        spec = self.apis.get(api_key)
        if spec is None:
            raise MalformedRequestError(f"unknown API key {api_key}")
        if not spec.serves(api_version):
            if api_key == API_VERSIONS_KEY:
                body = codec.encode(unsupported_version_response())
                return frame_chunks([response_header(correlation_id, False), *body])
            raise MalformedRequestError(f"{spec.name} v{api_version} is not supported")
        flexible = codec.is_flexible(api_key, api_version)
        header = parse_request_header(frame, flexible)
        request = codec.decode_request(api_key, api_version, frame, header.body_offset)
        ctx = RequestContext(
            self.broker, api_key, api_version, correlation_id, header.client_id, self.client_host,
            self.sendfile,
        )
        response = await spec.handle(ctx, request)
        if response is None:
            return None
        return frame_chunks(
            [response_header(correlation_id, _flexible_response(spec, api_version, flexible)),
             *_body(response)]
        )


def _uses_sendfile(policy: str, host: str) -> bool:
    """`socket.sendfile`: always, never, or remote (for peers not on loopback)."""
    if policy != "remote":
        return policy == "always"
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:  # not an IP peer (e.g. a Unix socket): nothing to save
        return False


async def _writable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_writer(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await ready
    finally:
        loop.remove_writer(fd)


def _flexible_response(spec: ApiSpec, version: int, flexible: bool) -> bool:
    """ApiVersions answers with response header v0 whatever its version, so clients can parse it."""
    return flexible and spec.key != API_VERSIONS_KEY


def _body(response: object) -> list[bytes | memoryview]:
    if isinstance(response, RawResponse):
        return response.chunks
    return codec.encode(response)

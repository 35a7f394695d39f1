"""The network server: Kafka frames in, responses out, one connection at a time in order.

Each connection receives into a reusable buffer (BufferedProtocol, i.e. `recv_into`), splits
frames, and processes them one after another, as Kafka does (a client's responses must come
back in request order). A frame over socket.request.max.bytes, an unknown API key or a
request that does not decode closes that connection only; everyone else keeps being served.
A request whose handler raises is answered: its exception's code (errors.error_code_for;
UNKNOWN_SERVER_ERROR and one logged traceback for a bug) in every error code of its response
(protocol/error_response.py), and the connection goes on.

Responses are written through the transport, except the file regions of a fetch response:
once everything before a region has left the transport's buffer (the write buffer limit is
0, so `resume_writing` says exactly that), the region goes from the segment file to the
socket with `sendfile` (uvloop has no `loop.sendfile`; readiness is polled on a `dup` of the
socket, as libuv allows one handle per descriptor).

On a SASL listener each connection holds a `SaslSession` (security/sasl_session.py) that every
frame is checked against before dispatch: until the client has authenticated, only what Kafka
allows at that step is served, and anything else closes the connection.

Which connections get file regions is `socket.sendfile`; by default only readers that are not
on loopback. sendfile spares the broker two copies, but a reader on the same host must copy
the bytes out of the socket anyway, and copying them out of page-cache pages costs it about
twice the CPU of copying freshly written ones: a loopback consumer of 1 KB records reads
~1.45 GB/s with sendfile and ~2.0 GB/s without (docs/architecture.md, where the time goes).

There is one `Listener` per configured listener; each connection knows its listener's name and
security protocol. On SSL and SASL_SSL listeners the event loop's TLS transport wraps the
connection (handshake bounded by HANDSHAKE_TIMEOUT_S; a failed one closes that connection
only), a client certificate sets the connection's principal, and fetched bytes are never
sendfile'd: they must pass through user-space encryption.

While client quotas are configured, each request is metered (broker/throttling.py); a request
that earns a throttle time is answered with it, and the connection is muted for that long: no
more bytes read from it and no queued request processed (KIP-219).
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import os
import socket
import time
from collections import Counter, deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import KafkaApiError, error_code_for
from ..protocol import codec
from ..protocol.error_response import error_response
from ..protocol.frames import (
    FrameError,
    FrameSplitter,
    MalformedRequestError,
    frame_chunks,
    parse_request_header,
    peek_api,
    response_header,
)
from ..security.listeners import ListenerEndpoint
from ..security.principal import ANONYMOUS
from ..security.sasl import AuthenticationFailed
from ..security.sasl_session import SASL_PROTOCOLS, SaslSession
from ..security.tls import HANDSHAKE_TIMEOUT_S, ListenerTls, peer_principal
from ..storage.segment import FileRegion
from .apis import ApiSpec, registry
from .apis.api_versions import unsupported_version_response
from .context import DeferredResponse, RawResponse, RequestContext
from .throttling import RequestMeter, response_size, throttled_response

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from .broker import Broker

log = logging.getLogger(__name__)

API_VERSIONS_KEY = 18
MAX_QUEUED_FRAMES = 64  # per connection: received, waiting to be processed, before reading pauses
MAX_QUEUED_BYTES = 16 << 20  # per connection: the same in bytes (a frame in progress always completes)
# A refused SASL client closes on reading the refusal; the broker closes a moment later if it has not.
# Closing at once lets the close arrive with the response, and kafka-python 3 drops data read
# together with EOF: its users would see "socket disconnected" instead of the error.
CLOSE_AFTER_REFUSAL_S = 0.5
# Kafka's message for UNKNOWN_SERVER_ERROR; the traceback stays in the broker's log.
UNEXPECTED_ERROR_MESSAGE = "The server experienced an unexpected error when processing the request."


class Connections:
    """Every open connection, and the limits that apply across them.

    `max.connections` and `max.connections.per.ip`: a connection over either is closed as soon
    as it is accepted. `connections.max.idle.ms`: a connection with no request in progress and no
    bytes in either direction for that long is closed (swept a few times per period).
    `queued.max.request.bytes`: the bytes received and not yet answered, summed over connections;
    above it, connections stop reading at their next frame boundary (a frame in progress is read
    to its end, so the bound can be passed by at most one frame per connection) and resume as
    requests complete. -1, Kafka's default, sets no bound: memory then follows the bytes clients
    actually send (receive buffers grow as bytes arrive, see FrameSplitter).
    """

    def __init__(self, config: BrokerConfig) -> None:
        self._config = config
        self.idle_seconds: float | None = None if config["connections.max.idle.ms"] < 0 \
            else config["connections.max.idle.ms"] / 1000
        bound = config["queued.max.request.bytes"]
        self.queued_max: int | None = None if bound < 0 else bound
        self.queued_bytes = 0
        self._open: set[KafkaConnection] = set()
        self._per_ip: Counter[str] = Counter()
        self._waiting: set[KafkaConnection] = set()  # paused until queued bytes drain
        self._sweeper: asyncio.TimerHandle | None = None

    @property
    def max_connections(self) -> int:
        """Read at each accept: a dynamic broker config (docs/configuration.md) may change it."""
        return self._config["max.connections"]  # type: ignore[return-value]

    @property
    def max_per_ip(self) -> int:
        return self._config["max.connections.per.ip"]  # type: ignore[return-value]

    def __iter__(self) -> Iterator[KafkaConnection]:
        return iter(list(self._open))

    def __len__(self) -> int:
        return len(self._open)

    def admit(self, connection: KafkaConnection) -> bool:
        """Register a new connection; False (it is to be closed) when a limit is reached."""
        host = connection.client_host
        if len(self._open) >= self.max_connections:
            log.info("refusing connection from %s: max.connections=%d reached", host, self.max_connections)
            return False
        if self._per_ip[host] >= self.max_per_ip:
            log.info("refusing connection from %s: max.connections.per.ip=%d reached", host, self.max_per_ip)
            return False
        self._open.add(connection)
        self._per_ip[host] += 1
        if self.idle_seconds is not None and self._sweeper is None:
            self._schedule_sweep()
        return True

    def discard(self, connection: KafkaConnection) -> None:
        if connection in self._open:
            self._open.discard(connection)
            self._per_ip[connection.client_host] -= 1
            if not self._per_ip[connection.client_host]:
                del self._per_ip[connection.client_host]
        self._waiting.discard(connection)

    def close_all(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for connection in list(self._open):
            connection.close()

    # ------------------------------------------------------------------ queued.max.request.bytes

    def over_bound(self) -> bool:
        return self.queued_max is not None and self.queued_bytes > self.queued_max

    def queued(self, delta: int) -> None:
        """Account for request bytes received (+) or answered (-)."""
        self.queued_bytes += delta
        if delta < 0 and self._waiting and not self.over_bound():
            waiting, self._waiting = self._waiting, set()
            for connection in waiting:
                connection.update_reading()

    def wait_for_room(self, connection: KafkaConnection) -> None:
        self._waiting.add(connection)

    # ------------------------------------------------------------------ connections.max.idle.ms

    def _schedule_sweep(self) -> None:
        interval = min(max(self.idle_seconds / 4, 0.01), 10.0)
        self._sweeper = asyncio.get_running_loop().call_later(interval, self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        now = asyncio.get_running_loop().time()
        for connection in list(self._open):
            if connection.idle_since(now) > self.idle_seconds:
                log.debug("closing connection from %s: idle over connections.max.idle.ms", connection.client_host)
                connection.close()
        if self._open:
            self._schedule_sweep()


class Listener:
    """The listening socket and its accept loop, in place of the event loop's server.

    uvloop closes its server for good, without a log line, when an accept fails with EMFILE
    (libuv passes the error to the listen callback and uvloop treats it as fatal): one burst of
    connections while partitions hold most descriptors, and the broker never accepts again.
    Here accept runs in Python and keeps one spare descriptor for that moment: on EMFILE/ENFILE
    the spare is closed, the pending connection accepted and closed at once (its client sees a
    close, not a hang), and the spare reopened. Without a spare, accepting pauses briefly
    instead of spinning on a readable socket it cannot accept from.

    Connection creation rates (KIP-612, security/connection_quotas.py): a connection over the
    broker's or the listener's rate makes the accept loop wait its throttle time before it serves
    that connection and accepts more; a connection over its address's rate is held unserved and
    closed once its throttle time has passed, as Kafka's acceptor does.
    """

    ACCEPTS_PER_WAKEUP = 128  # then other callbacks get a turn
    RETRY_WITHOUT_SPARE_S = 0.1

    def __init__(self, broker: Broker, endpoint: ListenerEndpoint, sockets: list[socket.socket],
                 tls: ListenerTls | None = None) -> None:
        """`endpoint`: the listener as configured; `self.endpoint` holds the port actually bound.
        `tls`: for SSL and SASL_SSL listeners, every connection is TLS from its first byte."""
        self.broker = broker
        self.sockets = sockets
        self.endpoint = endpoint.at(endpoint.host, sockets[0].getsockname()[1])
        self.tls = tls
        self._loop = asyncio.get_running_loop()
        self._spare: int | None = None
        self._serving = False
        self._starting: set[asyncio.Task] = set()  # connections being set up (strong references)
        self._waiting = False  # the accept loop waits out a connection creation rate
        self._throttled: dict[socket.socket, asyncio.TimerHandle] = {}  # over their address's rate, to close
        self._reopen_spare()

    @classmethod
    def bind(cls, broker: Broker, endpoint: ListenerEndpoint, backlog: int, tls: ListenerTls | None = None) -> Listener:
        """Listen on every address the endpoint's host resolves to (all interfaces for ""), as
        `loop.create_server` does; with port 0, all on the port the first one got."""
        sockets: list[socket.socket] = []
        try:
            for family, kind, proto, _name, address in socket.getaddrinfo(
                    endpoint.host or None, endpoint.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE):
                sock = socket.socket(family, kind, proto)
                sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                if sockets[0] is not sock:
                    address = (address[0], sockets[0].getsockname()[1], *address[2:])
                sock.bind(address)
                sock.listen(backlog)
                sock.setblocking(False)
        except OSError:
            for sock in sockets:
                sock.close()
            raise
        return cls(broker, endpoint, sockets, tls)

    def start_serving(self) -> None:
        self._serving = True
        for sock in self.sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def close(self) -> None:
        self._serving = False
        for sock in self.sockets:
            self._loop.remove_reader(sock.fileno())
            sock.close()
        for client, timer in self._throttled.items():
            timer.cancel()
            client.close()
        self._throttled.clear()
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(self.ACCEPTS_PER_WAKEUP):
            try:
                client, _address = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                if exc.errno not in (errno.EMFILE, errno.ENFILE):
                    log.warning("accept failed: %s", exc)
                    return
                if not self._shed_one(sock):
                    return
                continue
            wait_ms = self.broker.connection_quotas.record_accept(self.endpoint.name)
            if wait_ms > 0:
                self._wait_then_admit(client, wait_ms)
                return
            self._admit(client)

    def _wait_then_admit(self, client: socket.socket, wait_ms: int) -> None:
        """Over the broker's or the listener's connection creation rate: accept nothing for
        `wait_ms`, then serve `client` and accept again."""
        self._waiting = True
        for sock in self.sockets:
            self._loop.remove_reader(sock.fileno())
        self._loop.call_later(wait_ms / 1000, self._end_wait, client)

    def _end_wait(self, client: socket.socket) -> None:
        self._waiting = False
        if not self._serving:
            client.close()
            return
        self._admit(client)
        for sock in self.sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _admit(self, client: socket.socket) -> None:
        """Serve `client`, unless its address is over its connection_creation_rate: then it is held
        unserved and closed when its throttle time has passed."""
        try:
            host = client.getpeername()[0] if client.family in (socket.AF_INET, socket.AF_INET6) else ""
        except OSError:  # gone already
            client.close()
            return
        throttle_ms = self.broker.connection_quotas.record_ip(self.endpoint.name, host)
        if throttle_ms > 0:
            log.debug("closing a connection from %s in %d ms: over its connection_creation_rate", host, throttle_ms)
            self._throttled[client] = self._loop.call_later(throttle_ms / 1000, self._close_throttled, client)
            return
        task = self._loop.create_task(self._serve(client))
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)

    def _close_throttled(self, client: socket.socket) -> None:
        self._throttled.pop(client, None)
        client.close()

    def _shed_one(self, sock: socket.socket) -> bool:
        """Out of descriptors: accept one pending connection on the spare and close it."""
        if self._spare is None:
            log.warning("out of file descriptors; not accepting for %.1f s", self.RETRY_WITHOUT_SPARE_S)
            self._loop.remove_reader(sock.fileno())
            self._loop.call_later(self.RETRY_WITHOUT_SPARE_S, self._resume_accepting, sock)
            return False
        os.close(self._spare)
        self._spare = None
        try:
            client, address = sock.accept()
        except OSError:
            pass
        else:
            client.close()
            log.warning("out of file descriptors; closed a new connection from %s", address[0])
        self._reopen_spare()
        return True

    def _resume_accepting(self, sock: socket.socket) -> None:
        if self._serving and not self._waiting:  # else the end of the wait resumes it
            self._reopen_spare()
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _reopen_spare(self) -> None:
        if self._spare is None:
            try:
                self._spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self._spare = None

    async def _serve(self, client: socket.socket) -> None:
        try:
            client.setblocking(False)
            if client.family in (socket.AF_INET, socket.AF_INET6):
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls is None:
                await self._loop.connect_accepted_socket(lambda: KafkaConnection(self.broker, self.endpoint), client)
                return
            await self._loop.connect_accepted_socket(
                lambda: KafkaConnection(self.broker, self.endpoint, self.tls), client,
                ssl=self.tls.context, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
        except OSError as exc:  # also ssl.SSLError and TimeoutError: a failed or slow handshake
            # (not TLS, a certificate refused, silence) ends that connection only
            log.info("closing a new %s connection: %s", self.endpoint.name, exc)
            client.close()


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, broker: Broker, listener: ListenerEndpoint, tls: ListenerTls | None = None) -> None:
        """`listener`: the listener this connection came in on; Metadata answers its addresses.
        `tls`: set on TLS listeners, whose client certificate (if any) names the principal."""
        self.broker = broker
        self.listener_name = listener.name
        self.security_protocol = listener.security_protocol
        self.tls = tls
        self.apis = registry()
        self.splitter = FrameSplitter(broker.socket_request_max_bytes)
        self.transport: asyncio.Transport | None = None
        self.client_host = "?"
        self.principal = ANONYMOUS  # until TLS or SASL authenticates the client
        self.sasl = _sasl_session(broker, listener.name) if self.security_protocol in SASL_PROTOCOLS else None
        if self.sasl is not None:  # sasl.server.max.receive.size bounds frames until authenticated
            self.splitter.max_size = min(self.splitter.max_size, broker.config["sasl.server.max.receive.size"])
        self.sendfile = False
        self._frames: deque[bytes] = deque()
        self._deferred: deque[tuple[bytes, asyncio.Future]] = deque()  # answered later, in this order
        self._deferred_sender: asyncio.Task | None = None
        self._queued_bytes = 0  # received and not yet answered: partial frame, queued frames, the one in work
        self._worker: asyncio.Task | None = None
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._reading_paused = False
        self._muted = False  # throttled by a quota (KIP-219): neither reading nor processing
        self._unmuted = asyncio.Event()
        self._unmuted.set()
        self._unmute_timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._last_active = 0.0

    # ------------------------------------------------------------------ transport callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.client_host = peer[0] if peer else "?"
        self._last_active = asyncio.get_running_loop().time()
        if not self.broker.connections.admit(self):
            self._closed = True
            transport.abort()
            return
        if self.tls is None:
            self.transport.set_write_buffer_limits(high=0)  # resume_writing: the buffer is empty
            self.sendfile = _uses_sendfile(self.broker.socket_sendfile, self.client_host)
            return
        # TLS encrypts in user space: fetched bytes are copied through it, never sendfile'd, so
        # there is no file region to wait for an empty buffer before, and the transport keeps its
        # default write limits (uvloop's TLS transport with high=0 calls pause_writing after a
        # write that left nothing buffered, and resume_writing only on the next event: a response
        # would wait for the client's next request).
        try:
            self.principal = peer_principal(transport.get_extra_info("ssl_object"), self.tls.principal)
        except ValueError as exc:
            log.warning("closing TLS connection from %s: %s", self.client_host, exc)
            self.close()
            return
        if self.principal is not ANONYMOUS:
            log.info("TLS connection from %s on %s authenticated as %s", self.client_host, self.listener_name,
                     self.principal)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.splitter.writable(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self._last_active = asyncio.get_running_loop().time()
        self._account(nbytes)
        try:
            frames = self.splitter.received(nbytes)
        except FrameError as exc:
            log.warning("closing connection from %s: %s", self.client_host, exc)
            self.close()
            return
        self._frames.extend(frames)
        self.update_reading()
        if frames and (self._worker is None or self._worker.done()):
            self._worker = asyncio.get_running_loop().create_task(self._process())

    def update_reading(self) -> None:
        """Pause reading while this connection has too much queued (resume at half), or while the
        broker is over queued.max.request.bytes and this connection has requests in work or sits
        between frames. A connection in the middle of a frame with nothing else in work reads on,
        so the memory it holds is always on its way to being released: no wedge."""
        if self._closed or self.transport is None:
            return
        connections = self.broker.connections
        limit = 2 if self._reading_paused else 1
        queued_frame_bytes = self._queued_bytes - self.splitter.pending
        queued_frames = len(self._frames) + len(self._deferred)
        too_much = queued_frames >= MAX_QUEUED_FRAMES // limit or queued_frame_bytes >= MAX_QUEUED_BYTES // limit
        wait_for_memory = connections.over_bound() and bool(self._frames or not self.splitter.pending)
        if wait_for_memory:
            connections.wait_for_room(self)
        pause = too_much or wait_for_memory or self._muted
        if pause != self._reading_paused:
            self._reading_paused = pause
            if pause:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    def _account(self, delta: int) -> None:
        self._queued_bytes += delta
        self.broker.connections.queued(delta)

    def idle_since(self, now: float) -> float:
        """Seconds without bytes in either direction and with no request in progress."""
        if self._frames or (self._worker is not None and not self._worker.done()):
            return 0.0
        return now - self._last_active

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._can_write.set()
        self.broker.connections.discard(self)
        self.broker.share_sessions.disconnected(self.close)  # KIP-932: its share sessions end with it
        self._account(-self._queued_bytes)
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()
        if self._deferred_sender is not None and not self._deferred_sender.done():
            self._deferred_sender.cancel()
        if self._unmute_timer is not None:
            self._unmute_timer.cancel()

    def close(self) -> None:
        self._closed = True
        self._frames.clear()
        if self.transport is not None:
            self.transport.close()

    # ------------------------------------------------------------------ request processing

    def mute(self, throttle_ms: int) -> None:
        """Stop reading and processing for `throttle_ms` (a quota's throttle; a longer one wins)."""
        if self._closed or throttle_ms <= 0:
            return
        loop = asyncio.get_running_loop()
        if self._unmute_timer is not None:
            if self._unmute_timer.when() >= loop.time() + throttle_ms / 1000:
                return
            self._unmute_timer.cancel()
        self._muted = True
        self._unmuted.clear()
        self._unmute_timer = loop.call_later(throttle_ms / 1000, self._unmute)
        self.update_reading()

    def _unmute(self) -> None:
        self._unmute_timer = None
        self._muted = False
        self._unmuted.set()
        self.update_reading()

    async def _process(self) -> None:
        while self._frames and not self._closed:
            if self._muted:
                await self._unmuted.wait()
                continue
            frame = self._frames[0]
            try:
                chunks = await self._respond(frame)
            except MalformedRequestError as exc:
                log.warning("closing connection from %s: %s", self.client_host, exc)
                self.close()
                return
            except Exception:  # before there was a request to answer (a handler's failure is answered)
                log.exception("cannot read a request; closing connection from %s", self.client_host)
                self.close()
                return
            if isinstance(chunks, asyncio.Future) or self._deferred:
                self._defer(frame, chunks)
                continue
            if not await self._send_or_close(chunks):
                return
            self._done(frame)

    async def _send_or_close(self, chunks: list[bytes | memoryview | FileRegion] | None) -> bool:
        """Send a response (None: there is none); False when the connection had to close."""
        if chunks is None or self._closed:
            return not self._closed
        try:
            await self._send(chunks)
        except ConnectionError as exc:  # the client went away mid-response, as consumers do
            log.debug("connection from %s gone while sending: %s", self.client_host, exc)
            self.close()
            return False
        except OSError as exc:  # reading the segment file failed
            log.warning("closing connection from %s while sending: %s", self.client_host, exc)
            self.close()
            return False
        return True

    def _defer(self, frame: bytes, chunks: asyncio.Future | list | None) -> None:
        """Answer `frame` after the deferred responses before it (`_send_deferred`), in order."""
        if not isinstance(chunks, asyncio.Future):
            ready = asyncio.get_running_loop().create_future()
            ready.set_result(chunks)
            chunks = ready
        self._frames.popleft()
        self._deferred.append((frame, chunks))
        if self._deferred_sender is None or self._deferred_sender.done():
            self._deferred_sender = asyncio.get_running_loop().create_task(self._send_deferred())

    async def _send_deferred(self) -> None:
        while self._deferred and not self._closed:
            frame, pending = self._deferred[0]
            try:
                chunks = await pending
            except Exception:  # _encode_later answers a handler's failure; this is a bug of the server's own
                log.exception("request failed; closing connection from %s", self.client_host)
                self.close()
                return
            if not await self._send_or_close(chunks):
                return
            self._deferred.popleft()
            self._done(frame)

    def _done(self, frame: bytes) -> None:
        """A request answered: its bytes no longer count as queued."""
        if self._closed:  # connection_lost accounts for everything still queued
            return
        if self._frames and self._frames[0] is frame:
            self._frames.popleft()
        self._last_active = asyncio.get_running_loop().time()
        self._account(-(4 + len(frame)))
        self.update_reading()
        if self.sasl is not None and self.sasl.failed:  # answered; Kafka closes after a refusal
            asyncio.get_running_loop().call_later(CLOSE_AFTER_REFUSAL_S, self.close)

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
        if self.sasl is not None and self.sasl.expects_raw_token:
            return await self._legacy_sasl_token(frame)
        api_key, api_version, correlation_id = peek_api(frame)
        if self.sasl is not None and not self.sasl.admits(api_key):
            raise MalformedRequestError(f"API key {api_key} is not allowed in SASL state {self.sasl.stage.value}")
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
        meter = RequestMeter(self.broker.quotas, self.principal.name, header.client_id or "", api_key, api_version,
                             len(frame)) if self.broker.quotas.enabled() else None
        ctx = RequestContext(
            self.broker, api_key, api_version, correlation_id, header.client_id, self.client_host,
            self.sendfile, self.close, self.principal, self.listener_name, self.sasl,
            meter.mutation if meter is not None else None,
        )
        started = time.perf_counter()
        try:
            if meter is not None and meter.times_handler(request):
                response = await meter.timed(spec.handle(ctx, request))
            else:
                response = await spec.handle(ctx, request)
            if self.sasl is not None:
                self._follow_sasl()
            if isinstance(response, DeferredResponse):
                return asyncio.ensure_future(
                    self._encode_later(response, spec, api_version, correlation_id, flexible, request, meter, started))
            chunks = self._encode_metered(response, spec, api_version, correlation_id, flexible, request, meter)
        except Exception as exc:  # noqa: BLE001 - answered with its error code: see _answer_failed
            return self._answer_failed(exc, spec, api_version, correlation_id, flexible, request)
        self._timed(spec, request, started)
        return chunks

    def _encode_metered(self, response: Any, spec: ApiSpec, api_version: int, correlation_id: int, flexible: bool,
                        request: Any, meter: RequestMeter | None) -> list[bytes | memoryview | FileRegion] | None:
        """The encoded response, with the throttle time its quotas give (and the connection muted)."""
        chunks = self._encode(response, spec, api_version, correlation_id, flexible)
        if meter is None:
            return chunks
        throttle_ms, empty_fetch = meter.throttle_ms(request, response_size(chunks))
        if throttle_ms <= 0:
            return chunks
        self.mute(throttle_ms)
        if response is None or isinstance(response, RawResponse):
            return chunks
        for chunk in chunks:
            if isinstance(chunk, FileRegion):
                chunk.close()
        return self._encode(throttled_response(response, throttle_ms, empty_fetch), spec, api_version,
                            correlation_id, flexible)

    async def _legacy_sasl_token(self, frame: bytes) -> list[bytes | memoryview | FileRegion] | None:
        """After SaslHandshake v0 a frame is a bare token and so is the answer. A refusal cannot
        be told in this flow: the connection closes after connection.failed.authentication.delay.ms."""
        try:
            answer = await asyncio.to_thread(self.sasl.exchange, bytes(frame))  # PBKDF2 off the loop
        except AuthenticationFailed as refused:
            log.info("closing connection from %s: %s", self.client_host, refused)
            await asyncio.sleep(self.broker.config["connection.failed.authentication.delay.ms"] / 1000)
            self.close()
            return None
        self._follow_sasl()
        return frame_chunks([answer])

    def _follow_sasl(self) -> None:
        """Take the principal SASL authenticated, and the full frame size once it has."""
        self.principal = self.sasl.principal
        if self.sasl.authenticated:
            self.splitter.max_size = self.broker.socket_request_max_bytes

    async def _encode_later(self, deferred: DeferredResponse, spec: ApiSpec, api_version: int, correlation_id: int,
                            flexible: bool, request: Any, meter: RequestMeter | None,
                            started: float) -> list[bytes | memoryview | FileRegion] | None:
        try:
            chunks = self._encode_metered(await deferred.result, spec, api_version, correlation_id, flexible, request,
                                          meter)
        except Exception as exc:  # noqa: BLE001 - answered with its error code: see _answer_failed
            return self._answer_failed(exc, spec, api_version, correlation_id, flexible, request)
        self._timed(spec, request, started)
        return chunks

    def _answer_failed(self, exc: Exception, spec: ApiSpec, api_version: int, correlation_id: int, flexible: bool,
                       request: Any) -> list[bytes | memoryview | FileRegion] | None:
        """A request whose handler (or the encoding of its response) raised: answered with the
        exception's code in every error code of its response (errors.error_code_for; a bug is
        UNKNOWN_SERVER_ERROR, with one traceback in the log), as Kafka's handleError answers
        with getErrorResponse. The connection stays open; Produce with acks=0 has no response to
        carry the error, so that connection closes, as in Kafka."""
        code = error_code_for(exc)
        if isinstance(exc, KafkaApiError):
            log.debug("%s v%d from %s refused: %s", spec.name, api_version, self.client_host, exc)
            message = exc.message
        else:
            log.error("%s v%d from %s failed; answered %s", spec.name, api_version, self.client_host, code.name,
                      exc_info=exc)
            message = UNEXPECTED_ERROR_MESSAGE
        response = error_response(spec.key, codec.response_class(spec.key, api_version), request, code, message)
        if response is None:
            self.close()
            return None
        return self._encode(response, spec, api_version, correlation_id, flexible)

    def _timed(self, spec: ApiSpec, request: Any, started: float) -> None:
        """Count an answered request in the request metrics, when they are on."""
        if self.broker.metrics is not None:
            self.broker.metrics.request_times.record(spec.metric_names(request), (time.perf_counter() - started) * 1000)

    @staticmethod
    def _encode(response: Any, spec: ApiSpec, api_version: int, correlation_id: int,
                flexible: bool) -> list[bytes | memoryview | FileRegion] | None:
        if response is None:
            return None
        return frame_chunks(
            [response_header(correlation_id, _flexible_response(spec, api_version, flexible)),
             *_body(response)]
        )


def _sasl_session(broker: Broker, listener_name: str) -> SaslSession:
    """A new connection's SASL state, checking passwords against the store's SCRAM credentials; the
    listener's mechanisms (`listener.name.<l>.sasl.enabled.mechanisms`, else `sasl.enabled.mechanisms`)."""
    def lookup(user: str, mechanism: str) -> Any:
        return broker.metadata.scram_credentials().get(user, {}).get(mechanism)

    config = broker.config
    return SaslSession(config.for_listener(listener_name, "sasl.enabled.mechanisms"), lookup,
                       config["connections.max.reauth.ms"])


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

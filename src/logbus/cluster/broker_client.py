"""Requests from this broker to another over one persistent connection: WriteTxnMarkers from a
transaction coordinator to partition leaders, and later KIP-890's AddPartitionsToTxn verification
from partition leaders to transaction coordinators.

Requests may overlap on the connection: each gets a correlation id and a future, which one reader
task completes when the response with that id arrives. The peer's bytes are network bytes like any
other: a frame larger than `max_response_bytes` ends the connection, and a response is bounded by
the schema walk of `protocol.bounds` before kio decodes it (as the replica fetcher does). Any
failure (connecting, sending, a malformed or unexpected response, a request outliving `timeout`,
as Kafka's NetworkClient disconnects then) closes the connection and fails every request in
flight on it with an OSError (ConnectionError, or TimeoutError); the next request connects again.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from functools import cache
from typing import TYPE_CHECKING, Any

from kio.serial import entity_reader

from ..protocol import bounds
from ..protocol.codec import encode, request_class, response_class
from .frame_stream import FrameStream, open_frame_stream
from .metadata import BrokerInfo, MetadataStore

if TYPE_CHECKING:
    from .sasl_login import InterBrokerLogin

MAX_RESPONSE_BYTES = 100 << 20  # Kafka's socket.request.max.bytes default: no peer answer is larger
_SIZE = struct.Struct(">i")
_CORRELATION_MASK = 0x7FFFFFFF


@cache
def _reader(cls: type) -> Any:
    return entity_reader(cls)


def decode_response(cls: type, frame: bytes, correlation_id: int) -> Any:
    """A response frame (without its size) of kio response class `cls`, bounded before kio decodes
    it; ConnectionError for anything that is not a well-formed answer to request `correlation_id`."""
    try:
        header, used = _reader(cls.__header_schema__)(frame, 0)
        bounds.check_request(cls, frame, used)
        body, _ = _reader(cls)(frame, used)
    except Exception as exc:  # noqa: BLE001 - kio raises many kinds on a malformed frame
        raise ConnectionError(f"malformed {cls.__name__}: {exc}") from None
    if header.correlation_id != correlation_id:
        raise ConnectionError(f"correlation id {header.correlation_id}, expected {correlation_id}")
    return body


class _Connection:
    """One TCP connection and the requests awaiting an answer on it."""

    def __init__(self, stream: FrameStream) -> None:
        self.stream = stream
        self.pending: dict[int, tuple[asyncio.Future, type]] = {}
        self.failed = False
        self.task = asyncio.get_running_loop().create_task(self._read_responses())

    def send(self, correlation_id: int, payload: list[bytes], cls: type) -> asyncio.Future:
        """Queue one request frame; the future its response completes."""
        future = asyncio.get_running_loop().create_future()
        self.pending[correlation_id] = (future, cls)
        self.stream.write(b"".join([_SIZE.pack(sum(len(chunk) for chunk in payload)), *payload]))
        return future

    async def _read_responses(self) -> None:
        try:
            while True:
                frame = await self.stream.read_frame()
                if len(frame) < 4:
                    raise ConnectionError(f"a response frame of {len(frame)} bytes")
                (correlation_id,) = _SIZE.unpack_from(frame)
                if correlation_id not in self.pending:
                    raise ConnectionError(f"a response to no request (correlation id {correlation_id})")
                response = decode_response(self.pending[correlation_id][1], frame, correlation_id)
                future, _ = self.pending.pop(correlation_id)
                if not future.done():  # (a request cancelled meanwhile)
                    future.set_result(response)
        except OSError as exc:  # ConnectionError: the peer closed, or sent what no answer is
            self.fail(exc)

    def fail(self, exc: OSError) -> None:
        """Close the connection; every request awaiting an answer gets `exc`."""
        if self.failed:
            return
        self.failed = True
        self.stream.close()
        if self.task is not asyncio.current_task():
            self.task.cancel()
        for future, _ in self.pending.values():
            if not future.done():
                future.set_exception(exc)
        self.pending.clear()


class BrokerClient:
    """A client of one other broker: `request` sends a kio request and returns its response."""

    def __init__(self, address: tuple[str, int], client_id: str, timeout: float,
                 max_response_bytes: int = MAX_RESPONSE_BYTES, tls: ssl.SSLContext | None = None,
                 sasl: InterBrokerLogin | None = None) -> None:
        """`tls`: connect with TLS (the peer's listener is an SSL one); `sasl`: log in first (a SASL one)."""
        self.address = address
        self.tls = tls
        self.sasl = sasl
        self.client_id = client_id
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self._connection: _Connection | None = None
        self._connecting = asyncio.Lock()
        self._correlation = 0
        self._closed = False

    async def request(self, api_key: int, version: int, request: Any) -> Any:
        """The peer's response to `request` (a kio entity of that API and version). Raises an
        OSError when the connection fails or the answer takes longer than `timeout`."""
        connection = None
        try:
            async with asyncio.timeout(self.timeout):
                connection = await self._connect()
                return await self._exchange(connection, api_key, version, request)
        except TimeoutError:
            error = TimeoutError(f"no answer from {self._where()} within {self.timeout} s")
            if connection is not None:
                connection.fail(error)
            raise error from None
        except OSError as exc:
            if connection is not None:
                connection.fail(exc)
            raise

    async def _exchange(self, connection: _Connection, api_key: int, version: int, request: Any) -> Any:
        self._correlation = (self._correlation + 1) & _CORRELATION_MASK
        header = request_class(api_key, version).__header_schema__(
            request_api_key=api_key, request_api_version=version, correlation_id=self._correlation,
            client_id=self.client_id)
        future = connection.send(self._correlation, [*encode(header), *encode(request)],
                                 response_class(api_key, version))
        try:
            await connection.stream.drain()
            return await future
        finally:
            future.cancel()  # no-op once answered; a request given up leaves nothing to complete

    async def _connect(self) -> _Connection:
        async with self._connecting:
            self._refuse_if_closed()
            if self._connection is None or self._connection.failed:
                stream = await open_frame_stream(*self.address, self.max_response_bytes, self.tls)
                try:
                    if self.sasl is not None:
                        await self.sasl.authenticate(stream, self.client_id)
                    self._refuse_if_closed()  # closed while connecting
                except BaseException:
                    stream.close()
                    raise
                self._connection = _Connection(stream)
            return self._connection

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise ConnectionError(f"the client of {self._where()} is closed")

    def close(self) -> None:
        """Close the connection for good: requests in flight and later ones fail (ConnectionError)."""
        self._closed = True
        if self._connection is not None:
            self._connection.fail(ConnectionError(f"the client of {self._where()} is closed"))
            self._connection = None

    def _where(self) -> str:
        return f"broker at {self.address[0]}:{self.address[1]}"


class BrokerClients:
    """One `BrokerClient` per other live broker, as the metadata store lists them: made on first
    use, replaced when a broker's address changes, closed when it leaves. Shared by everything
    that sends inter-broker requests (markers, KIP-890 verification), so each peer gets one
    connection from this broker."""

    def __init__(self, broker_id: int, metadata: MetadataStore, timeout: float,
                 listener_name: str = "PLAINTEXT", tls: ssl.SSLContext | None = None,
                 sasl: InterBrokerLogin | None = None) -> None:
        """`listener_name`: the listener of other brokers to connect to (inter.broker.listener.name),
        with TLS context `tls` when it is an SSL listener, logging in with `sasl` on a SASL one."""
        self.broker_id = broker_id
        self.metadata = metadata
        self.listener_name = listener_name
        self.tls = tls
        self.sasl = sasl
        self.timeout = timeout
        self._clients: dict[int, BrokerClient] = {}

    def start(self) -> None:
        self.metadata.add_broker_listener(self._brokers_changed)

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def get(self, broker_id: int) -> BrokerClient | None:
        """The client of a live broker (a new one when its address changed); None when it is not
        live or has no endpoint on the inter-broker listener."""
        info = next((b for b in self.metadata.brokers() if b.broker_id == broker_id), None)
        endpoint = None if info is None else info.endpoint(self.listener_name)
        if endpoint is None:
            return None
        address = (endpoint.host, endpoint.port)
        client = self._clients.get(broker_id)
        if client is not None and client.address != address:
            client.close()
            client = None
        if client is None:
            client = self._clients[broker_id] = BrokerClient(
                address, f"logbus-broker-{self.broker_id}", self.timeout, tls=self.tls if endpoint.tls else None,
                sasl=self.sasl)
        return client

    def _brokers_changed(self, live: list[BrokerInfo]) -> None:
        """Close the connections to brokers that left (requests in flight on them fail)."""
        alive = {b.broker_id for b in live}
        for broker_id in [b for b in self._clients if b not in alive]:
            self._clients.pop(broker_id).close()

"""One blocking socket to one broker, requests strictly one after the other.

It speaks the wire protocol through `logbus.protocol` (framing) and kio (typed bodies); a
response kio's own reader refuses is decoded again by `protocol/tolerant.py`. A peer's announced
response size is bounded, and the receive buffer grows only as bytes arrive. TLS and the SASL
login (`security.py`) happen when the connection opens.
"""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any

from kio.serial.errors import SerialError

from ..protocol import tolerant
from ..protocol.codec import ChunkSink, make, request_class
from ..protocol.frames import MalformedRequestError
from ..security.sasl_client import SaslLogin, SaslLoginError
from .apis import ApiModule, api_module
from .errors import AuthenticationError, KafkaError
from .security import ClientSecurity

CLIENT_ID = "logbus-spark"
_SIZE = struct.Struct(">i")


def _read_body(module: ApiModule, frame: bytes, offset: int) -> Any:
    """kio's native reader refuses an unknown tagged field (a newer broker may add one) and a
    timestamp of -1 (Kafka's "none"); such a response is decoded again by `tolerant.decode`."""
    try:
        return module.read_body(frame, offset)[0]
    except (SerialError, KeyError):
        pass
    try:
        return tolerant.decode(module.response_cls, frame, offset)
    except MalformedRequestError as exc:
        raise KafkaError(f"undecodable response to API {module.api_key} v{module.version}: {exc}") from None


FIRST_READ_BYTES = 1 << 20
MAX_RESPONSE_BYTES = 1 << 30  # far above any answer this client asks for: a larger size is a broken peer


class Connection:
    """One blocking socket to one broker; requests are strictly one after the other."""

    def __init__(self, host: str, port: int, timeout: float, security: ClientSecurity | None = None) -> None:
        self.address = (host, port)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation = 0
        security = security or ClientSecurity()
        try:
            if security.tls is not None:
                self.sock = security.tls.wrap_socket(self.sock, server_hostname=host)
            if security.sasl is not None:
                self._log_in(security.sasl)
        except (ssl.SSLError, SaslLoginError) as exc:
            self.sock.close()
            raise AuthenticationError(f"{host}:{port}: {exc}") from None

    def _log_in(self, login: SaslLogin) -> None:
        steps = login.steps()
        request = next(steps)
        while True:
            api_key, version, fields = request
            answer = self.call(api_key, make(request_class(api_key, version), **fields), version)
            try:
                request = steps.send(answer)
            except StopIteration:
                return

    def call(self, api_key: int, body: Any, version: int | None = None) -> Any:
        """Send `body` (a kio request of `version`, by default VERSIONS') and return the answer."""
        module = api_module(api_key, version)
        self.correlation += 1
        sink = ChunkSink()
        module.write_header(sink, module.request.RequestHeader(
            request_api_key=api_key, request_api_version=module.version,
            correlation_id=self.correlation, client_id=CLIENT_ID,
        ))
        module.write_body(sink, body)
        payload = b"".join(sink)
        self.sock.sendall(_SIZE.pack(len(payload)) + payload)
        frame = self._receive_frame()
        header, used = module.read_header(frame, 0)
        if header.correlation_id != self.correlation:
            raise KafkaError(f"correlation id {header.correlation_id}, expected {self.correlation}")
        return _read_body(module, frame, used)

    def _receive_frame(self) -> bytes:
        (size,) = _SIZE.unpack(self._receive_exactly(4))
        if not 0 <= size <= MAX_RESPONSE_BYTES:
            raise KafkaError(f"{self.address[0]}:{self.address[1]} announced a response of {size} bytes")
        return bytes(self._receive_exactly(size))

    def _receive_exactly(self, size: int) -> bytearray:
        """`size` bytes. The buffer grows (doubling) as they arrive, so a peer that announces more
        than it sends costs no more memory than it sent."""
        buffer = bytearray(min(size, FIRST_READ_BYTES))
        received = 0
        while received < size:
            if received == len(buffer):
                buffer.extend(bytes(min(len(buffer), size - received)))
            count = self.sock.recv_into(memoryview(buffer)[received:])
            if count == 0:
                raise KafkaError(f"connection to {self.address[0]}:{self.address[1]} closed")
            received += count
        return buffer

    def close(self) -> None:
        self.sock.close()

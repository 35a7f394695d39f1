"""A blocking Kafka connection that sends kio requests and reads the answers whole, for benches
that time one request against the broker (no client library in between)."""

from __future__ import annotations

import socket
import struct

from logbus.protocol import codec


class Client:
    """One loopback connection; `call` sends a request (header v2) and returns its answer's bytes
    after the size prefix (correlation id, header tags, body)."""

    def __init__(self, port: int, timeout: float = 30) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation = 0

    def call(self, api_key: int, version: int, request: object) -> bytes:
        self.correlation += 1
        header = struct.pack(">hhih", api_key, version, self.correlation, 5) + b"bench\x00"
        body = header + b"".join(codec.encode(request))
        self.sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", self._exactly(4))[0]
        return self._exactly(size)

    def close(self) -> None:
        self.sock.close()

    def _exactly(self, count: int) -> bytes:
        data = bytearray()
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                raise ConnectionError("broker closed the control connection")
            data += chunk
        return bytes(data)

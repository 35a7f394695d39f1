"""Kafka framing, sans I/O: a 4-byte big-endian size, then the request or response.

`FrameSplitter` takes bytes as they arrive and hands out whole frames; it refuses a frame over
`max_size` before buffering it (the connection is then closed, as Kafka does), and allocates
for the bytes that arrived, never for the size a frame announces. Request
headers are parsed here (v1 fields; v2 adds tagged fields, which are skipped) and response
headers written (v0: correlation id; v1: plus an empty tagged-field section).
"""

from __future__ import annotations

import struct
from collections.abc import Sized
from dataclasses import dataclass

_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_CORRELATION = struct.Struct(">i")
_API = struct.Struct(">hhi")  # api key, api version, correlation id
_KEEP_CAPACITY = 4 << 20  # an idle connection keeps at most this much receive buffer
_MIN_READ, _MAX_READ = 4096, 1 << 20  # free room offered to a read (the event loop's hint, bounded)


class FrameError(ValueError):
    """The byte stream cannot be framed (negative or oversized frame)."""

    def __init__(self, size: int, max_size: int) -> None:
        super().__init__(f"frame of {size} bytes (socket.request.max.bytes={max_size})")
        self.size = size
        self.max_size = max_size


class MalformedRequestError(ValueError):
    """A frame that does not decode as the request its header names."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # where the body starts within the frame


class FrameSplitter:
    """Accumulates received bytes into a reusable buffer and yields whole frames.

    Memory follows what has arrived, not what a size prefix announces: the buffer is allocated
    when the first bytes come and grows geometrically with the bytes actually received (a
    connection that announces 100 MB and sends a trickle holds about 64 KB), and an empty
    buffer larger than `_KEEP_CAPACITY` is given back.
    """

    def __init__(self, max_size: int, initial: int = 1 << 16) -> None:
        self.max_size = max_size
        self._initial = initial
        self._buffer = bytearray(0)  # allocated when the first bytes arrive
        self._start = 0
        self._end = 0

    @property
    def pending(self) -> int:
        """Bytes received and not yet handed out as frames (a partial frame)."""
        return self._end - self._start

    @property
    def capacity(self) -> int:
        return len(self._buffer)

    def writable(self, hint: int = 0) -> memoryview:
        """Room to receive into (for `recv_into` / BufferedProtocol.get_buffer); never empty."""
        if self._start == self._end:
            self._start = self._end = 0
            if len(self._buffer) > _KEEP_CAPACITY:  # give back the room a huge frame needed
                self._buffer = bytearray(_KEEP_CAPACITY)
        room = min(max(hint, _MIN_READ), _MAX_READ)
        if len(self._buffer) - self._end < room:
            self._make_room(self._grown_capacity(room))
        return memoryview(self._buffer)[self._end :]

    def _grown_capacity(self, room: int) -> int:
        """`room` past what is pending, and twice what is pending (at least `initial`) while
        the frame in progress needs that much: growth is paid for by bytes received."""
        pending = self._end - self._start
        capacity = max(self._initial, 2 * pending, pending + room)
        if pending >= 4:
            (size,) = _SIZE.unpack_from(self._buffer, self._start)
            capacity = min(capacity, max(pending + room, 4 + size))
        return capacity

    def _make_room(self, capacity: int) -> None:
        """Move pending bytes to the front of a buffer of at least `capacity` bytes.

        A new bytearray rather than a resize: the event loop may still hold a memoryview of
        the old one (from `writable`), and a bytearray with exports cannot change size.
        """
        pending = self._end - self._start
        if capacity > len(self._buffer):
            buffer = bytearray(capacity)
            buffer[:pending] = self._buffer[self._start : self._end]
            self._buffer = buffer
        elif self._start:
            self._buffer[:pending] = self._buffer[self._start : self._end]
        self._start, self._end = 0, pending

    def received(self, count: int) -> list[bytes]:
        """Account for `count` new bytes; return the frames now complete (without size)."""
        self._end += count
        frames = []
        while self._end - self._start >= 4:
            (size,) = _SIZE.unpack_from(self._buffer, self._start)
            if size < 0 or size > self.max_size:
                raise FrameError(size, self.max_size)
            if self._end - self._start < 4 + size:
                break
            begin = self._start + 4
            frames.append(bytes(memoryview(self._buffer)[begin : begin + size]))  # one copy, not two
            self._start = begin + size
        return frames


def parse_request_header(frame: bytes, flexible: bool) -> RequestHeader:
    """Read the request header; `flexible` (header v2) also skips its tagged fields."""
    if len(frame) < _HEADER_FIXED.size:
        raise MalformedRequestError("request shorter than its header")
    api_key, api_version, correlation_id, client_len = _HEADER_FIXED.unpack_from(frame, 0)
    offset = _HEADER_FIXED.size
    client_id = None
    if client_len >= 0:
        if offset + client_len > len(frame):
            raise MalformedRequestError("client id runs past the frame")
        client_id = frame[offset : offset + client_len].decode("utf-8", "replace")
        offset += client_len
    if flexible:
        offset = skip_tagged_fields(frame, offset)
    return RequestHeader(api_key, api_version, correlation_id, client_id, offset)


def peek_api(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id) without parsing further."""
    if len(frame) < 8:
        raise MalformedRequestError("request shorter than its header")
    return _API.unpack_from(frame, 0)


def read_uvarint(buf: bytes, offset: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if offset >= len(buf) or shift > 28:
            raise MalformedRequestError("bad unsigned varint")
        byte = buf[offset]
        offset += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, offset
        shift += 7


def skip_tagged_fields(buf: bytes, offset: int) -> int:
    count, offset = read_uvarint(buf, offset)
    for _ in range(count):
        _tag, offset = read_uvarint(buf, offset)
        size, offset = read_uvarint(buf, offset)
        offset += size
    if offset > len(buf):
        raise MalformedRequestError("tagged fields run past the frame")
    return offset


def response_header(correlation_id: int, flexible: bool) -> bytes:
    header = _CORRELATION.pack(correlation_id)
    return header + b"\x00" if flexible else header


def frame_chunks(chunks: list[Sized]) -> list[Sized]:
    """Prefix a response (given as chunks: bytes, or file regions to send later) with its size;
    nothing is joined or copied."""
    size = sum(len(chunk) for chunk in chunks)
    return [_SIZE.pack(size), *chunks]

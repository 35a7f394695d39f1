"""FrameSplitter, sans I/O: frames come out whole however the bytes arrive."""

from __future__ import annotations

import random
import struct

import pytest

from logbus.protocol.frames import FrameError, FrameSplitter


def feed(splitter: FrameSplitter, data: bytes, chunk_sizes: list[int]) -> list[bytes]:
    """Deliver `data` the way an event loop does: into `writable()` views it keeps alive."""
    frames: list[bytes] = []
    views = []
    position = 0
    for size in chunk_sizes:
        view = splitter.writable(size)
        views.append(view)  # uvloop may hold the view while buffer_updated runs
        piece = data[position : position + min(size, len(view))]
        view[: len(piece)] = piece
        position += len(piece)
        frames += splitter.received(len(piece))
    assert position == len(data)
    return frames


def framed(payloads: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


def test_frames_larger_than_the_buffer_arrive_whole_while_views_are_held() -> None:
    payloads = [bytes([i % 256]) * size for i, size in enumerate([10, 70_000, 3, 1_000_000, 0, 5])]
    data = framed(payloads)
    rng = random.Random(7)
    chunks: list[int] = []
    while sum(chunks) < len(data):
        chunks.append(rng.choice([1, 3, 4096, 65_536, 300_000]))
    chunks[-1] -= sum(chunks) - len(data)
    assert feed(FrameSplitter(max_size=2_000_000), data, chunks) == payloads


def test_an_oversized_frame_is_refused_before_it_is_buffered() -> None:
    splitter = FrameSplitter(max_size=100)
    with pytest.raises(FrameError, match="101 bytes"):
        feed(splitter, struct.pack(">i", 101), [4])


def test_a_negative_size_is_refused() -> None:
    with pytest.raises(FrameError):
        feed(FrameSplitter(max_size=100), struct.pack(">i", -1), [4])


def test_memory_follows_the_bytes_received_not_the_announced_size() -> None:
    """A 100 MB size prefix and a trickle of bytes cost about one read's worth of buffer (issue 11 item 4)."""
    splitter = FrameSplitter(max_size=200 << 20)
    assert splitter.capacity == 0  # nothing allocated before the first byte
    assert feed(splitter, struct.pack(">i", 100 << 20), [4]) == []
    for _ in range(1000):
        assert feed(splitter, b"x" * 10, [10]) == []
    assert splitter.pending == 4 + 10_000
    assert splitter.capacity <= 128 << 10


def test_the_buffer_grows_geometrically_with_what_arrived() -> None:
    splitter = FrameSplitter(max_size=200 << 20)
    frame_size = 10 << 20
    feed(splitter, struct.pack(">i", frame_size), [4])
    received = 0
    while received < frame_size - 65_536:
        feed(splitter, bytes(65_536), [65_536])
        received += 65_536
        assert splitter.capacity <= 2 * splitter.pending + 65_536
    frames = feed(splitter, bytes(frame_size - received), [frame_size - received])
    assert [len(frame) for frame in frames] == [frame_size]

"""FrameSplitter fed any byte stream in any chunking: frames come out whole and in order, exactly
as a plain reading of the stream gives them; a negative or oversized size is FrameError; and the
buffer never holds much more than the bytes received (never what a size prefix announces).

Input layout: byte 0 picks max_size, bytes 1..8 seed the chunking, the rest is the stream.
"""

from __future__ import annotations

import random
import struct

from logbus.protocol.frames import FrameError, FrameSplitter

MAX_SIZES = [0, 1, 4, 100, 4096, 70_000, 1 << 20, 100 << 20]
SEEDS = [
    bytes([3]) + bytes(8) + struct.pack(">i", 3) + b"abc" + struct.pack(">i", 0),
    bytes([7]) + bytes(range(8)) + struct.pack(">i", 100 << 20) + b"x" * 200,
    bytes([5]) + bytes(8) + b"".join(struct.pack(">i", n) + b"y" * n for n in (5, 70_000 // 10, 1)),
    bytes([2]) + bytes(8) + struct.pack(">i", -1),
]
_SLACK = 2 << 20  # room a read may be offered beyond what is pending (the loop's hint, bounded)


def expected_frames(stream: bytes, max_size: int) -> tuple[list[bytes], bool]:
    """The frames a plain reading of the whole stream finds, and whether it hits a bad size."""
    frames, at = [], 0
    while len(stream) - at >= 4:
        (size,) = struct.unpack_from(">i", stream, at)
        if size < 0 or size > max_size:
            return frames, True
        if len(stream) - at - 4 < size:
            break
        frames.append(stream[at + 4:at + 4 + size])
        at += 4 + size
    return frames, False


def fuzz_one(data: bytes) -> None:
    if len(data) < 9:
        return
    max_size = MAX_SIZES[data[0] % len(MAX_SIZES)]
    rng = random.Random(data[1:9])
    stream = data[9:]
    splitter = FrameSplitter(max_size)
    frames: list[bytes] = []
    refused = False
    views = []
    at = 0
    while at < len(stream):
        hint = rng.choice((1, 7, 4096, 65_536, 300_000))
        view = splitter.writable(hint)
        views.append(view)  # the event loop may hold a view while the splitter moves on
        assert len(view) > 0, "an empty buffer offered to a read"
        piece = stream[at:at + min(len(view), rng.choice((1, 3, 4, 100, 65_536)))]
        view[:len(piece)] = piece
        at += len(piece)
        try:
            frames += splitter.received(len(piece))
        except FrameError:
            refused = True
            break
        assert splitter.capacity <= max(2 * splitter.pending, 1 << 16) + _SLACK, \
            f"{splitter.capacity} bytes of buffer for {splitter.pending} pending"
    expected, bad = expected_frames(stream[:at] if refused else stream, max_size)
    assert refused == bad, "FrameError where the stream is fine, or none where it is not"
    # on FrameError the connection closes: frames completed in that last read may be dropped
    assert frames == (expected[:len(frames)] if refused else expected), "frames differ from a plain reading"

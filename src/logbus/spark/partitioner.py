"""Java's default partitioner for keyed records, over a whole Arrow column at once.

A keyed record goes to `toPositive(murmur2(key)) % partitions`, as Kafka's Java producer (and
librdkafka's `murmur2_random`) place it, so that readers keyed by the same rule, compacted
topics and joins see each key in one partition whichever client wrote it. murmur2 walks the
key in 4-byte little-endian words; here every key of a column advances one word per step in
numpy, over the keys copied into a zero-padded matrix (bounded in size by taking the keys in
slices), so no Python code runs per key.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_M = np.uint32(0x5BD1E995)
_SEED = 0x9747B28C
_MATRIX_BYTES = 4 << 20  # bytes of padded keys hashed at a time


def murmur2(keys: pa.Array) -> np.ndarray:
    """Kafka's murmur2 (Utils.murmur2) of every key, as uint32; nulls hash as empty keys."""
    keys = pc.cast(keys, pa.binary()) if not pa.types.is_binary(keys.type) else keys
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32)[keys.offset : keys.offset + len(keys) + 1]
    data_buffer = keys.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    starts, lengths = offsets[:-1].astype(np.int64), np.diff(offsets).astype(np.int64)
    width = (int(lengths.max(initial=0)) // 4 + 1) * 4  # room for the tail word of the longest key
    step = max(1, _MATRIX_BYTES // width)
    return np.concatenate([_murmur2_rows(data, starts[i : i + step], lengths[i : i + step], width)
                           for i in range(0, len(keys), step)] or [np.zeros(0, np.uint32)])


def _murmur2_rows(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, width: int) -> np.ndarray:
    columns = np.arange(width)
    inside = columns[None, :] < lengths[:, None]
    positions = np.minimum(starts[:, None] + columns[None, :], max(len(data) - 1, 0))
    padded = np.where(inside, data[positions] if len(data) else 0, 0).astype(np.uint8)
    words = np.ascontiguousarray(padded).view("<u4")
    blocks = lengths // 4
    h = (np.uint32(_SEED) ^ lengths.astype(np.uint32)).astype(np.uint32)
    for j in range(int(blocks.max(initial=0))):
        k = words[:, j] * _M
        k ^= k >> np.uint32(24)
        k *= _M
        h = np.where(j < blocks, (h * _M) ^ k, h)
    tail = words[np.arange(len(lengths)), blocks]  # the 1-3 bytes past the last whole word, zero-padded
    h = np.where(lengths % 4 != 0, (h ^ tail) * _M, h)
    h ^= h >> np.uint32(13)
    h *= _M
    h ^= h >> np.uint32(15)
    return h


def partition_for(hashes: np.ndarray, partitions: int | np.ndarray) -> np.ndarray:
    """Java's `toPositive(hash) % partitions` (Utils.toPositive drops the sign bit)."""
    return ((hashes & np.uint32(0x7FFFFFFF)).astype(np.int64) % partitions).astype(np.int32)

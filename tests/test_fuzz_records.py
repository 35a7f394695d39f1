"""The record and recovery fuzz targets (bench/fuzz/target_batches.py, target_recovery.py) over
their seeds and a bounded number of deterministic mutations of them: every input ends in a clean
rejection or a valid result (until the shared fuzz runner takes them over)."""

from __future__ import annotations

import os
import random
import struct
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.fuzz import target_batches, target_recovery  # noqa: E402

INT32_MAX = (1 << 31) - 1


def mutations(seeds: list[bytes], count: int, seed: int) -> list[bytes]:
    """Byte flips, header field overwrites with edge values, cuts, duplications and splices."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            kind = rng.randrange(5)
            if kind == 0 and data:
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            elif kind == 1 and len(data) >= 61:  # an int32 header field: length, delta, count, ...
                field = rng.choice((8, 23, 53, 57))
                struct.pack_into(">i", data, field, rng.choice((-1, 0, 1, 2, 4, 64, INT32_MAX, -INT32_MAX)))
            elif kind == 2 and data:
                del data[rng.randrange(len(data)):]
            elif kind == 3:
                data += rng.choice(seeds)
            elif data:
                at = rng.randrange(len(data))
                data[at:at] = os.urandom(rng.randint(1, 16))
        out.append(bytes(data))
    return out


@pytest.mark.parametrize("target", [target_batches, target_recovery], ids=["batches", "recovery"])
def test_seeds_are_accepted_whole(target) -> None:
    for seed in target.SEEDS:
        target.fuzz_one(seed)


def test_batch_target_over_mutations() -> None:
    for data in mutations(target_batches.SEEDS, 3000, seed=11):
        target_batches.fuzz_one(data)


def test_recovery_target_over_mutations() -> None:
    for data in mutations(target_recovery.SEEDS, 300, seed=6):
        target_recovery.fuzz_one(data)


def test_issue_11_lying_batch_in_both_targets() -> None:
    lying = bytearray(target_batches.SEEDS[0])
    struct.pack_into(">i", lying, 23, INT32_MAX)
    target_batches.fuzz_one(bytes(lying))
    target_recovery.fuzz_one(bytes(lying) * 2)

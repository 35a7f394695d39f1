"""The reset arithmetic `logbus groups reset-offsets` and the console share, in process."""

from __future__ import annotations

import pytest

from logbus.client.offset_reset import Key, reset_targets

KEYS: list[Key] = [("t", 0), ("t", 1)]
EARLIEST = {("t", 0): 10, ("t", 1): 0}
LATEST = {("t", 0): 50, ("t", 1): 7}
AT_TIME = {("t", 0): 30, ("t", 1): -1}  # partition 1 has no record that late


def lookup(keys: list[Key], spec: str | int) -> dict[Key, int]:
    table = EARLIEST if spec == "earliest" else LATEST if spec == "latest" else AT_TIME
    return {key: table[key] for key in keys}


def test_ends_of_the_log() -> None:
    assert reset_targets(KEYS, "earliest", None, lookup) == EARLIEST
    assert reset_targets(KEYS, "latest", None, lookup) == LATEST


def test_an_offset_is_kept_within_each_partitions_log() -> None:
    assert reset_targets(KEYS, "offset", 20, lookup) == {("t", 0): 20, ("t", 1): 7}
    assert reset_targets(KEYS, "offset", 5, lookup) == {("t", 0): 10, ("t", 1): 5}


def test_a_timestamp_later_than_every_record_goes_to_the_log_end() -> None:
    assert reset_targets(KEYS, "timestamp", 1_700_000_000_000, lookup) == {("t", 0): 30, ("t", 1): 7}


def test_an_offset_or_timestamp_needs_a_value() -> None:
    with pytest.raises(ValueError, match="needs a value"):
        reset_targets(KEYS, "offset", None, lookup)

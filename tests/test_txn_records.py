"""`__transaction_state` keys and values, against bytes laid out by hand from Kafka's schemas
(TransactionLogKey v0, TransactionLogValue v0 and v1) and against hostile bytes."""

from __future__ import annotations

import contextlib
import random

import pytest

from logbus.coordinator.records import RecordFormatError, coordinator_partition
from logbus.coordinator.txn_records import (
    TxnStatus,
    TxnValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

VALUE = TxnValue(producer_id=4000, producer_epoch=3, timeout_ms=60_000, status=TxnStatus.ONGOING,
                 partitions=(("orders", (0, 2)),), last_update_ms=1_700_000_000_123, start_ms=1_700_000_000_000)

# version, producer id, epoch, timeout, status
HEAD = "0000" "0000000000000fa0" "0003" "0000ea60" "01"
TIMESTAMPS = "0000018bcfe5687b" "0000018bcfe56800"


def test_key_is_version_0_and_the_id() -> None:
    assert encode_key("txn-1").hex() == "0000" "0005" + b"txn-1".hex()
    assert decode_key(encode_key("txn-é")) == "txn-é"


def test_value_v0_layout() -> None:
    expected = HEAD + "00000001" "0006" + b"orders".hex() + "00000002" "00000000" "00000002" + TIMESTAMPS
    assert encode_value(VALUE, 0).hex() == expected
    assert decode_value(bytes.fromhex(expected)) == VALUE


def test_value_v1_layout_writes_only_tags_that_differ_from_their_default() -> None:
    head = "0001" + HEAD[4:]
    plain = head + "02" "07" + b"orders".hex() + "03" "00000000" "00000002" "00" + TIMESTAMPS + "00"
    assert encode_value(VALUE, 1).hex() == plain
    assert decode_value(bytes.fromhex(plain)) == VALUE
    tagged = TxnValue(**{**{f: getattr(VALUE, f) for f in VALUE.__slots__}, "next_producer_id": 4001,
                         "client_version": 2})
    encoded = encode_value(tagged, 1).hex()
    assert encoded == plain[:-2] + "02" "01" "08" "0000000000000fa1" "02" "02" "0002"
    assert decode_value(bytes.fromhex(encoded)) == tagged


def test_empty_and_null_partitions_decode_as_no_partitions() -> None:
    empty = TxnValue(7, 0, 1000, TxnStatus.EMPTY, (), 5, -1)
    for version in (0, 1):
        assert decode_value(encode_value(empty, version)) == empty
    null_v0 = bytes.fromhex("0000" "0000000000000007" "0000" "000003e8" "00" "ffffffff" + "00" * 7 + "05" + "ff" * 8)
    assert decode_value(null_v0).partitions == ()


def test_transactional_ids_spread_as_kafka_spreads_them() -> None:
    assert coordinator_partition("hello", 50) == 99162322 % 50


@pytest.mark.parametrize("version", [0, 1])
def test_truncated_or_mangled_values_raise_only_format_errors(version: int) -> None:
    good = encode_value(VALUE, version)
    for cut in range(len(good)):
        with pytest.raises(RecordFormatError):
            decode_value(good[:cut])
    rng = random.Random(version)
    for _ in range(3000):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        with contextlib.suppress(RecordFormatError, UnicodeDecodeError):  # anything else fails the test
            decode_value(bytes(data))


def test_unknown_versions_and_statuses_are_refused() -> None:
    with pytest.raises(RecordFormatError):
        decode_key(b"\x00\x01\x00\x00")
    with pytest.raises(RecordFormatError):
        decode_value(b"\x00\x02" + encode_value(VALUE, 0)[2:])
    with pytest.raises(RecordFormatError):
        decode_value(bytes.fromhex(HEAD[:-2] + "09") + encode_value(VALUE, 0)[17:])
    with pytest.raises(ValueError):
        encode_value(VALUE, 2)

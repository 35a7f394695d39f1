"""Fuzz target: the keys and values of the coordinators' internal topics (`__consumer_offsets`,
with its KIP-848 consumer group and KIP-932 share group records, and `__transaction_state`), which a coordinator reads
back from a log that may hold anything.

Any input must end in RecordFormatError (or UnicodeDecodeError, which the loaders treat the
same) or in a record that re-encodes to a value that decodes equal to it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid

from logbus.coordinator import consumer_records as consumer
from logbus.coordinator import records, txn_records
from logbus.coordinator import share_group_records as share
from logbus.coordinator.records import GroupValue, MemberValue, OffsetKey, OffsetValue, RecordFormatError

REJECTIONS = (RecordFormatError, UnicodeDecodeError)
_TXN = txn_records.TxnValue(4000, 3, 60_000, txn_records.TxnStatus.ONGOING, (("t", (0, 1)),), 5, 4,
                            next_producer_id=4001)
_GROUP = GroupValue("consumer", 2, "range", "m-1", 7, (MemberValue("m-1", None, "c", "/127.0.0.1", 3000, 1000,
                                                                   b"sub", b"assign"),))
_TOPIC_ID = uuid.UUID(int=7)
SEEDS: list[bytes] = [
    txn_records.encode_value(_TXN, 0), txn_records.encode_value(_TXN, 1), txn_records.encode_key("txn"),
    records.encode_offset_key(OffsetKey("g", "t", 0)), records.encode_offset_value(OffsetValue(5, 1, "m", 9, -1)),
    records.encode_group_value(_GROUP),
    consumer.encode_consumer_key(consumer.ConsumerGroupKey(consumer.CURRENT_MEMBER_ASSIGNMENT, "g", "m")),
    consumer.encode_consumer_value(consumer.MemberMetadataValue("i", None, "c", "/h", ("t",), "t.*", 30_000, None)),
    consumer.encode_consumer_value(
        consumer.CurrentAssignmentValue(3, 2, 1, ((_TOPIC_ID, (0, 1)),), ((_TOPIC_ID, (2,)),))),
    consumer.encode_consumer_value(consumer.PartitionMetadataValue((consumer.TopicMetadataValue(_TOPIC_ID, "t", 3),))),
    share.encode_share_key(share.ShareGroupKey(share.SHARE_STATE_PARTITION_METADATA, "g")),
    share.encode_share_value(share.ShareGroupEpochValue(4)),
    share.encode_share_value(share.StatePartitionMetadataValue(
        initialized=(share.StateTopic(_TOPIC_ID, "t", (0, 1), 9),), deleting=(share.StateTopic(_TOPIC_ID, "u"),))),
]


def fuzz_one(data: bytes) -> None:
    for decode in (txn_records.decode_key, records.decode_key, records.decode_offset_value,
                   records.decode_group_value):
        with contextlib.suppress(REJECTIONS):
            decode(data)
    with contextlib.suppress(REJECTIONS):
        consumer.decode_consumer_key(data)
    for kind in sorted(consumer.KINDS):
        with contextlib.suppress(REJECTIONS):
            value = consumer.decode_consumer_value(kind, data)
            assert consumer.decode_consumer_value(kind, consumer.encode_consumer_value(value)) == value, value
    with contextlib.suppress(REJECTIONS):
        share.decode_share_key(data)
    for kind in sorted(share.KINDS):
        with contextlib.suppress(REJECTIONS):
            value = share.decode_share_value(kind, data)
            assert share.decode_share_value(kind, share.encode_share_value(value)) == value, value
    try:
        value = txn_records.decode_value(data)
    except REJECTIONS:
        return
    for version in (0, 1):
        again = txn_records.decode_value(txn_records.encode_value(value, version))
        expected = value if version == 1 else dataclasses.replace(  # v0 has no tagged fields
            value, previous_producer_id=-1, next_producer_id=-1, client_version=0)
        assert again == expected, (version, value, again)

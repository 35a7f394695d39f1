"""Consumer groups against a real broker with real clients (confluent-kafka, kafka-python,
aiokafka, kcat), raw protocol exchanges for the error codes, and the `logbus groups` CLI.

Session timeouts are small (6 s, the broker's minimum) and `group.initial.rebalance.delay.ms`
is 0 so that rebalances finish quickly; everything else waits on conditions (`wait_until`).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import QUIET, produce_all, wait_until
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from logbus.coordinator.records import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    java_string_hash,
    partition_for_group,
)
from logbus.protocol import codec
from logbus.testing import BrokerProcess, running_broker

SESSION_MS = 6000
GROUP_CONFIG = {"group.initial.rebalance.delay.ms": "0", "offsets.retention.check.interval.ms": "1000"}


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker(config=GROUP_CONFIG) as process:
        yield process


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, partitions: int = 6) -> str:
    name = unique("topic")
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
    return name


def fill(bootstrap: str, topic: str, count: int) -> list[bytes]:
    values = [f"record-{i}".encode() for i in range(count)]
    produce_all(bootstrap, topic, [(str(i).encode(), value) for i, value in enumerate(values)])
    return values


def consumer(bootstrap: str, group: str, **config: Any) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest", "enable.auto.commit": False,
        **QUIET, **config,
    })


def poll_until_assigned(consumers: list[Consumer], partitions: int, timeout: float = 30.0) -> list[set[int]]:
    """Poll every consumer until their assignments together cover `partitions` partitions, disjointly."""
    def settled() -> list[set[int]] | None:
        for c in consumers:
            c.poll(0.05)
        owned = [{tp.partition for tp in c.assignment()} for c in consumers]
        covered = set().union(*owned)
        if sum(len(o) for o in owned) == partitions and covered == set(range(partitions)):
            return owned
        return None

    return wait_until(settled, timeout, interval=0.01, message=f"{partitions} partitions assigned")


# ---------------------------------------------------------------- records of __consumer_offsets


def test_java_hash_and_coordinator_partition() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("é€😀") == 16752006  # (Java says so) UTF-16 code units, surrogate pair included
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert partition_for_group("polygenelubricants", 50) == 0  # Kafka's Utils.abs(MIN_VALUE) is 0
    assert partition_for_group("hello", 50) == 99162322 % 50


def test_offset_records_are_kafkas_bytes() -> None:
    key = encode_offset_key(OffsetKey("g", "t", 3))
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    assert decode_key(key) == OffsetKey("g", "t", 3)
    value = OffsetValue(42, 7, "meta\x00data", 1_700_000_000_000)
    encoded = encode_offset_value(value)
    assert encoded[:2] == b"\x00\x03"
    assert encoded == (b"\x00\x03" + struct.pack(">qi", 42, 7) + b"\x00\x09meta\x00data"
                       + struct.pack(">q", 1_700_000_000_000))
    assert decode_offset_value(encoded) == value
    expiring = OffsetValue(42, -1, "", 1000, 5000)
    assert encode_offset_value(expiring)[:2] == b"\x00\x01"
    assert decode_offset_value(encode_offset_value(expiring)) == expiring


def test_group_records_are_kafkas_bytes() -> None:
    assert encode_group_key(GroupKey("grp")) == b"\x00\x02\x00\x03grp"
    assert decode_key(b"\x00\x02\x00\x03grp") == GroupKey("grp")
    member = MemberValue("m-1", "static-1", "client", "/127.0.0.1", 30000, 6000, b"\x00sub", b"\x00asg")
    value = GroupValue("consumer", 5, "range", "m-1", 123, (member,))
    encoded = encode_group_value(value)
    assert encoded.startswith(b"\x00\x03\x00\x08consumer\x00\x00\x00\x05\x00\x05range\x00\x03m-1")
    assert decode_group_value(encoded) == value
    assert decode_key(b"\x00\x09\x00\x01x") is None  # new-protocol records are not ours


# ---------------------------------------------------------------- confluent-kafka groups


def test_three_members_share_six_partitions(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap)
    group = unique("three")
    members = [consumer(broker.bootstrap, group) for _ in range(3)]
    try:
        for member in members:
            member.subscribe([topic])
        owned = poll_until_assigned(members, 6)
        assert all(len(o) == 2 for o in owned), owned
        assert set().union(*owned) == set(range(6))
    finally:
        for member in members:
            member.close()

"""Consumer groups against a real broker with real clients (confluent-kafka, kafka-python,
aiokafka, kcat), raw protocol exchanges for the error codes, and the `logbus groups` CLI.

Session timeouts are small (6 s, the broker's minimum) and `group.initial.rebalance.delay.ms`
is 0 so that rebalances finish quickly; everything else waits on conditions (`wait_until`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import QUIET, produce_all, wait_until
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v0.request import JoinGroupRequestProtocol as JoinGroupProtocolV0
from kio.schema.join_group.v9.request import JoinGroupRequestProtocol
from kio.schema.leave_group.v5.request import MemberIdentity
from kio.schema.offset_commit.v2.request import OffsetCommitRequestPartition as OffsetCommitV2Partition
from kio.schema.offset_commit.v2.request import OffsetCommitRequestTopic as OffsetCommitV2Topic
from kio.schema.offset_commit.v9.request import OffsetCommitRequestPartition, OffsetCommitRequestTopic
from kio.schema.offset_delete.v0.request import OffsetDeleteRequestPartition, OffsetDeleteRequestTopic
from kio.schema.offset_fetch.v1.request import OffsetFetchRequestTopic
from kio.schema.offset_fetch.v9.request import OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kio.schema.sync_group.v5.request import SyncGroupRequestAssignment
from kio.serial import entity_reader

from logbus.coordinator.records import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    coordinator_partition,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    java_string_hash,
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
    """Poll every consumer until together they cover all partitions, disjointly and evenly.

    Evenly, because a cooperative rebalance passes through disjoint covers that are not its
    end: a member can still hold a partition it is giving up while another member already
    owns the one given up before it (3, 2, 1 on the way from 3, 3 to 2, 2, 2).
    """
    def settled() -> list[set[int]] | None:
        for c in consumers:
            c.poll(0.05)
        owned = [{tp.partition for tp in c.assignment()} for c in consumers]
        covered = set().union(*owned)
        sizes = [len(o) for o in owned]
        even = max(sizes) - min(sizes) <= 1
        if even and sum(sizes) == partitions and covered == set(range(partitions)):
            return owned
        return None

    return wait_until(settled, timeout, interval=0.01, message=f"{partitions} partitions assigned")


# ---------------------------------------------------------------- records of __consumer_offsets


def test_java_hash_and_coordinator_partition() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("é€😀") == 16752006  # (Java says so) UTF-16 code units, surrogate pair included
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert coordinator_partition("polygenelubricants", 50) == 0  # Kafka's Utils.abs(MIN_VALUE) is 0
    assert coordinator_partition("hello", 50) == 99162322 % 50


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


def test_kafka_python_group(broker: BrokerProcess) -> None:
    """Each member polls in its own thread: kafka-python's poll blocks while its JoinGroup waits."""
    from kafka import KafkaConsumer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KafkaTopicPartition

    topic = create_topic(broker.bootstrap)
    group = unique("kafka-python")
    members = [KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group, session_timeout_ms=SESSION_MS,
                             heartbeat_interval_ms=500, enable_auto_commit=False, auto_offset_reset="earliest")
               for _ in range(3)]
    # kafka-python 3.0.12 strands a leader that assigned before it knew the topic's partitions: the
    # rejoin its new metadata triggers can finish inside a short poll's timeout, and the next poll
    # no longer sees a rejoin to complete, so it never applies its assignment nor heartbeats.
    # Members that know the partitions before their first poll never take that path.
    for member in members:
        wait_until(lambda m=member: m.partitions_for_topic(topic) == set(range(6)), 10,
                   message="kafka-python member sees the topic's partitions")
    stop = threading.Event()

    def poll_forever(member: Any) -> None:
        while not stop.is_set():
            member.poll(timeout_ms=50)

    threads = [threading.Thread(target=poll_forever, args=(m,), daemon=True) for m in members]
    for thread in threads:
        thread.start()
    try:
        def settled() -> list[set[int]] | None:
            owned = [{tp.partition for tp in m.assignment()} for m in members]
            return owned if sorted(p for o in owned for p in o) == list(range(6)) and all(owned) else None

        owned = wait_until(settled, 40, message="kafka-python members assigned")
        assert [len(o) for o in owned] == [2, 2, 2]
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    try:
        mine = KafkaTopicPartition(topic, min(owned[0]))
        members[0].commit({mine: OffsetAndMetadata(0, "from kafka-python", 0)})
        assert members[0].committed(mine, metadata=True) == OffsetAndMetadata(0, "from kafka-python", 0)
    finally:
        for member in members:
            member.close()


def test_aiokafka_group(broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer

    topic = create_topic(broker.bootstrap)
    values = fill(broker.bootstrap, topic, 60)
    group = unique("aiokafka")

    async def run() -> tuple[list[set[int]], list[bytes]]:
        members = [AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                                    session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500,
                                    auto_offset_reset="earliest", enable_auto_commit=False) for _ in range(3)]
        await asyncio.gather(*(m.start() for m in members))
        try:
            received: list[bytes] = []
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                batches = await asyncio.gather(*(m.getmany(timeout_ms=100) for m in members))
                received += [r.value for batch in batches for records in batch.values() for r in records]
                owned = [{tp.partition for tp in m.assignment()} for m in members]
                if len(received) >= 60 and sorted(p for o in owned for p in o) == list(range(6)) and all(owned):
                    await asyncio.gather(*(m.commit() for m in members))
                    return owned, received
            raise AssertionError(f"aiokafka group did not settle: {len(received)} records")
        finally:
            await asyncio.gather(*(m.stop() for m in members))

    owned, received = asyncio.run(run())
    assert [len(o) for o in owned] == [2, 2, 2]
    assert sorted(set(received)) == sorted(values)
    assert committed_total(broker.bootstrap, group, topic, 6) == 60


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


MEMBER_SCRIPT = r"""
import sys, json
from confluent_kafka import Consumer
bootstrap, group, topic = sys.argv[1:4]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 6000,
                     "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "log_level": 0})
def report(_consumer, partitions):
    print(json.dumps({"assigned": sorted(p.partition for p in partitions)}), flush=True)
consumer.subscribe([topic], on_assign=report, on_revoke=lambda c, p: None)
while True:
    message = consumer.poll(0.1)
    if message is None or message.error():
        continue
    print(json.dumps({"processed": message.value().decode()}), flush=True)
    consumer.commit(message, asynchronous=False)
"""


class MemberProcess:
    """A group member in its own process (so that it can be killed with SIGKILL)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", MEMBER_SCRIPT, bootstrap, group, topic],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        )
        self.processed: list[str] = []
        self.assigned: set[int] = set()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            event = json.loads(line)
            if "processed" in event:
                self.processed.append(event["processed"])
            else:
                self.assigned = set(event["assigned"])

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def test_killed_member_partitions_move_and_nothing_is_lost(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap)
    group = unique("kill")
    first = fill(broker.bootstrap, topic, 300)
    members = [MemberProcess(broker.bootstrap, group, topic) for _ in range(3)]
    try:
        wait_until(lambda: sorted(p for m in members for p in m.assigned) == list(range(6))
                   and all(m.assigned for m in members), 30, message="3 members assigned")
        wait_until(lambda: {v for m in members for v in m.processed} >= {v.decode() for v in first}, 30,
                   message="first batch processed")
        victim, survivors = members[0], members[1:]
        orphaned = set(victim.assigned)
        victim.kill()
        killed_at = time.monotonic()
        second = fill(broker.bootstrap, topic, 300)
        wait_until(lambda: set().union(*(m.assigned for m in survivors)) == set(range(6)), 30,
                   message="survivors own every partition")
        moved_after = time.monotonic() - killed_at
        assert moved_after >= SESSION_MS / 1000 - 1.0, f"moved after {moved_after:.1f}s, before the session timeout"
        assert orphaned <= set().union(*(m.assigned for m in survivors))
        everything = {v.decode() for v in first + second}
        wait_until(lambda: {v for m in members for v in m.processed} >= everything, 30,
                   message="every record processed")
    finally:
        for member in members:
            member.stop()


def test_broker_restart_keeps_committed_offsets() -> None:
    with running_broker(config=GROUP_CONFIG) as broker:
        topic = create_topic(broker.bootstrap, 3)
        fill(broker.bootstrap, topic, 30)
        group = unique("restart")
        member = consumer(broker.bootstrap, group)
        member.subscribe([topic])
        poll_until_assigned([member], 3)
        commits = [TopicPartition(topic, p, 4 + p, f"meta-{p}") for p in range(3)]
        member.commit(offsets=commits, asynchronous=False)
        member.close()
        broker.stop()
        broker.restart()
        again = consumer(broker.bootstrap, group)
        try:
            committed = again.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
            assert [(c.partition, c.offset, c.metadata) for c in committed] == [
                (p, 4 + p, f"meta-{p}") for p in range(3)]
            again.subscribe([topic])
            first: dict[int, int] = {}
            deadline = time.monotonic() + 20
            while len(first) < 3 and time.monotonic() < deadline:
                message = again.poll(0.2)
                if message is not None and message.error() is None:
                    first.setdefault(message.partition(), message.offset())
            assert first == {p: 4 + p for p in range(3)}
        finally:
            again.close()


def test_two_groups_read_the_same_topic_independently(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 2)
    values = fill(broker.bootstrap, topic, 40)
    seen: dict[str, list[bytes]] = {}
    for group in (unique("a"), unique("b")):
        member = consumer(broker.bootstrap, group)
        member.subscribe([topic])
        seen[group] = []
        deadline = time.monotonic() + 30
        try:
            while len(seen[group]) < 40 and time.monotonic() < deadline:
                message = member.poll(0.2)
                if message is not None and message.error() is None:
                    seen[group].append(message.value())
            member.commit(asynchronous=False)
        finally:
            member.close()
    assert all(sorted(v) == sorted(values) for v in seen.values())


def test_cooperative_sticky_rebalance_keeps_owned_partitions(broker: BrokerProcess) -> None:
    """A third member joins: the first two give up one partition each and keep the rest."""
    topic = create_topic(broker.bootstrap)
    group = unique("coop")
    settings = {"partition.assignment.strategy": "cooperative-sticky"}
    members = [consumer(broker.bootstrap, group, **settings) for _ in range(3)]
    try:
        for member in members[:2]:
            member.subscribe([topic])
        before = poll_until_assigned(members[:2], 6)
        assert [len(o) for o in before] == [3, 3]
        members[2].subscribe([topic])
        after = poll_until_assigned(members, 6)
        assert [len(o) for o in after] == [2, 2, 2]
        assert after[0] <= before[0] and after[1] <= before[1], (before, after)
        assert group_description(broker.bootstrap, group).partition_assignor == "cooperative-sticky"
    finally:
        for member in members:
            member.close()


def group_description(bootstrap: str, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    return admin.describe_consumer_groups([group])[group].result(10)


def test_static_member_rejoins_without_rebalance(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap)
    group = unique("static")
    members = [consumer(broker.bootstrap, group, **{"group.instance.id": f"instance-{i}"}) for i in range(2)]
    for member in members:
        member.subscribe([topic])
    owned = poll_until_assigned(members, 6)
    generation = group_generation(broker.bootstrap, group)
    members[0].close()  # a static member leaves no LeaveGroup behind: nobody rebalances
    again = consumer(broker.bootstrap, group, **{"group.instance.id": "instance-0"})
    again.subscribe([topic])
    try:
        rejoined = poll_until_assigned([again, members[1]], 6)
        assert rejoined == owned
        assert group_generation(broker.bootstrap, group) == generation
    finally:
        again.close()
        members[1].close()


def group_generation(bootstrap: str, group: str) -> int:
    """The generation of a Stable group. No API reports it, but a Heartbeat of the first member
    answers ILLEGAL_GENERATION for every generation but the current one."""
    described = raw_request(bootstrap, 15, 5, groups=(group,), include_authorized_operations=False)
    assert described.groups[0].group_state == "Stable", described.groups[0].group_state
    return generation_from_members(bootstrap, group)


def generation_from_members(bootstrap: str, group: str) -> int:
    member = raw_request(bootstrap, 15, 5, groups=(group,), include_authorized_operations=False).groups[0].members[0]
    reply = raw_request(bootstrap, 12, 4, group_id=group, generation_id=-1, member_id=member.member_id,
                        group_instance_id=member.group_instance_id)
    assert reply.error_code == ErrorCode.illegal_generation
    for generation in range(1, 50):
        reply = raw_request(bootstrap, 12, 4, group_id=group, generation_id=generation,
                            member_id=member.member_id, group_instance_id=member.group_instance_id)
        if reply.error_code == ErrorCode.none:
            return generation
    raise AssertionError("no generation found")


def test_seven_members_over_six_partitions_leave_one_idle(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap)
    group = unique("seven")
    members = [consumer(broker.bootstrap, group) for _ in range(7)]
    try:
        for member in members:
            member.subscribe([topic])

        def one_idle() -> list[set[int]] | None:
            for member in members:
                member.poll(0.02)
            owned = [{tp.partition for tp in m.assignment()} for m in members]
            described = group_description(broker.bootstrap, group)
            stable = str(described.state).endswith("STABLE") and len(described.members) == 7
            return owned if stable and sorted(len(o) for o in owned) == [0, 1, 1, 1, 1, 1, 1] else None

        owned = wait_until(one_idle, 40, interval=0.01, message="six busy members and one idle")
        assert set().union(*owned) == set(range(6))
    finally:
        for member in members:
            member.close()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_balanced_consumer(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 3)
    values = fill(broker.bootstrap, topic, 30)
    group = unique("kcat")
    result = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-G", group, "-o", "beginning", "-e", "-q",
         "-X", "session.timeout.ms=6000", "-f", "%s\n", topic],
        capture_output=True, text=True, timeout=60,
    )
    assert sorted(result.stdout.split()) == sorted(v.decode() for v in values), result.stderr
    wait_until(lambda: committed_total(broker.bootstrap, group, topic, 3) == 30, 20,
               message="kcat's committed offsets")


def committed_total(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    probe = consumer(bootstrap, group)
    try:
        committed = probe.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return sum(max(c.offset, 0) for c in committed)
    finally:
        probe.close()


# ---------------------------------------------------------------- raw protocol: error codes


class RawConnection:
    """One socket speaking kio-encoded requests, for the exchanges real clients never make."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.correlation = 0

    def call(self, api_key: int, version: int, **fields: Any) -> Any:
        self.correlation += 1
        flexible = codec.is_flexible(api_key, version)
        client_id = b"raw-groups"
        header = struct.pack(">hhih", api_key, version, self.correlation, len(client_id)) + client_id
        body = b"".join(codec.encode(codec.make(codec.request_class(api_key, version), **fields)))
        frame = header + (b"\x00" if flexible else b"") + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        response = self._exactly(struct.unpack(">i", self._exactly(4))[0])
        assert struct.unpack_from(">i", response)[0] == self.correlation
        value, _ = entity_reader(codec.response_class(api_key, version))(response, 5 if flexible else 4)
        return value

    def _exactly(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            assert chunk, "broker closed the connection"
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


def raw_request(bootstrap: str, api_key: int, version: int, **fields: Any) -> Any:
    connection = RawConnection(bootstrap)
    try:
        return connection.call(api_key, version, **fields)
    finally:
        connection.close()


def join_fields(group: str, member_id: str = "", instance_id: str | None = None, session_ms: int = SESSION_MS,
                protocol: str = "range", rebalance_ms: int = 10000) -> dict[str, Any]:
    return dict(
        group_id=group, session_timeout=datetime.timedelta(milliseconds=session_ms),
        rebalance_timeout=datetime.timedelta(milliseconds=rebalance_ms), member_id=member_id,
        group_instance_id=instance_id, protocol_type="consumer", reason=None,
        protocols=(_protocol(protocol, b"\x00\x01subscription"),),
    )


def _protocol(name: str, metadata: bytes) -> Any:
    return JoinGroupRequestProtocol(name=name, metadata=metadata)


def find_coordinator(bootstrap: str, group: str) -> None:
    reply = raw_request(bootstrap, 10, 3, key=group, key_type=0)
    assert reply.error_code == ErrorCode.none


def test_find_coordinator_batched_keys(broker: BrokerProcess) -> None:
    reply = raw_request(broker.bootstrap, 10, 4, key_type=0, coordinator_keys=("g1", "g2", ""))
    assert [c.key for c in reply.coordinators] == ["g1", "g2", ""]
    assert all(c.error_code == ErrorCode.none and c.port == broker.port for c in reply.coordinators)
    bad = raw_request(broker.bootstrap, 10, 4, key_type=5, coordinator_keys=("g1",))
    assert bad.coordinators[0].error_code == ErrorCode.invalid_request


def test_join_group_errors_and_member_id_required(broker: BrokerProcess) -> None:
    group = unique("raw")
    find_coordinator(broker.bootstrap, group)
    connection = RawConnection(broker.bootstrap)
    try:
        too_short = connection.call(11, 9, **join_fields(group, session_ms=1000))
        assert too_short.error_code == ErrorCode.invalid_session_timeout
        unknown = connection.call(11, 9, **join_fields(group, member_id="nobody"))
        assert unknown.error_code == ErrorCode.unknown_member_id
        first = connection.call(11, 9, **join_fields(group))
        assert first.error_code == ErrorCode.member_id_required and first.member_id.startswith("raw-groups-")
        joined = connection.call(11, 9, **join_fields(group, member_id=first.member_id))
        assert joined.error_code == ErrorCode.none
        assert (joined.generation_id, joined.leader, joined.protocol_name) == (1, first.member_id, "range")
        assert [(m.member_id, m.metadata) for m in joined.members] == [(first.member_id, b"\x00\x01subscription")]
        other = connection.call(11, 9, **join_fields(group, member_id="", protocol="roundrobin"))
        assert other.error_code == ErrorCode.inconsistent_group_protocol
        wrong_generation = connection.call(12, 4, group_id=group, generation_id=7, member_id=first.member_id,
                                           group_instance_id=None)
        assert wrong_generation.error_code == ErrorCode.illegal_generation
        synced = connection.call(14, 5, group_id=group, generation_id=1, member_id=first.member_id,
                                 group_instance_id=None, protocol_type="consumer", protocol_name="range",
                                 assignments=(SyncGroupRequestAssignment(member_id=first.member_id,
                                                                         assignment=b"\x00\x01mine"),))
        assert (synced.error_code, synced.assignment, synced.protocol_name) == (ErrorCode.none, b"\x00\x01mine",
                                                                                 "range")
        beat = connection.call(12, 4, group_id=group, generation_id=1, member_id=first.member_id,
                               group_instance_id=None)
        assert beat.error_code == ErrorCode.none
        left = connection.call(13, 5, group_id=group, members=(
            MemberIdentity(member_id=first.member_id, group_instance_id=None, reason="bye"),
            MemberIdentity(member_id="ghost", group_instance_id=None, reason=None),
        ))
        assert [m.error_code for m in left.members] == [ErrorCode.none, ErrorCode.unknown_member_id]
        after = connection.call(12, 4, group_id=group, generation_id=1, member_id=first.member_id,
                                group_instance_id=None)
        assert after.error_code == ErrorCode.unknown_member_id
    finally:
        connection.close()


def test_join_group_v0_needs_no_member_id_round_trip(broker: BrokerProcess) -> None:
    group = unique("v0")
    find_coordinator(broker.bootstrap, group)
    reply = raw_request(broker.bootstrap, 11, 0, group_id=group, session_timeout=datetime.timedelta(seconds=6),
                        member_id="", protocol_type="consumer",
                        protocols=(JoinGroupProtocolV0(name="range", metadata=b"x"),))
    assert reply.error_code == ErrorCode.none and reply.member_id and reply.generation_id == 1


def test_static_member_with_stale_member_id_is_fenced(broker: BrokerProcess) -> None:
    group = unique("fence")
    find_coordinator(broker.bootstrap, group)
    connection = RawConnection(broker.bootstrap)
    try:
        first = connection.call(11, 9, **join_fields(group, instance_id="box-1"))
        assert first.error_code == ErrorCode.none  # static members skip MEMBER_ID_REQUIRED
        second = connection.call(11, 9, **join_fields(group, instance_id="box-1"))
        assert second.error_code == ErrorCode.none and second.member_id != first.member_id
        stale = connection.call(12, 4, group_id=group, generation_id=first.generation_id,
                                member_id=first.member_id, group_instance_id="box-1")
        assert stale.error_code == ErrorCode.fenced_instance_id
    finally:
        connection.close()


def test_offset_commit_and_fetch_return_metadata_byte_for_byte(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 2)
    group, other = unique("meta"), unique("meta-other")
    find_coordinator(broker.bootstrap, group)
    find_coordinator(broker.bootstrap, other)
    metadata = "ünïcode \x00 nul and emoji 😀 " + "x" * 100
    partitions = (OffsetCommitRequestPartition(partition_index=0, committed_offset=17, committed_leader_epoch=3,
                                               committed_metadata=metadata),
                  OffsetCommitRequestPartition(partition_index=1, committed_offset=5, committed_leader_epoch=-1,
                                               committed_metadata=""),
                  OffsetCommitRequestPartition(partition_index=9, committed_offset=1, committed_leader_epoch=-1,
                                               committed_metadata=None))
    committed = raw_request(broker.bootstrap, 8, 9, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                            group_instance_id=None,
                            topics=(OffsetCommitRequestTopic(name=topic, partitions=partitions),))
    assert [p.error_code for p in committed.topics[0].partitions] == [
        ErrorCode.none, ErrorCode.none, ErrorCode.unknown_topic_or_partition]
    too_large = raw_request(broker.bootstrap, 8, 9, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                            group_instance_id=None, topics=(OffsetCommitRequestTopic(name=topic, partitions=(
                                OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                             committed_leader_epoch=-1,
                                                             committed_metadata="m" * 5000),)),))
    assert too_large.topics[0].partitions[0].error_code == ErrorCode.offset_metadata_too_large
    fetched = raw_request(broker.bootstrap, 9, 9, require_stable=False, groups=(
        OffsetFetchRequestGroup(group_id=group, member_id=None, member_epoch=-1, topics=None),
        OffsetFetchRequestGroup(group_id=other, member_id=None, member_epoch=-1, topics=(
            OffsetFetchRequestTopics(name=topic, partition_indexes=(0,)),)),
    ))
    mine, theirs = fetched.groups
    assert [(p.partition_index, p.committed_offset, p.committed_leader_epoch, p.metadata)
            for p in mine.topics[0].partitions] == [(0, 17, 3, metadata), (1, 5, -1, "")]
    assert [(p.committed_offset, p.metadata) for p in theirs.topics[0].partitions] == [(-1, "")]
    old = raw_request(broker.bootstrap, 9, 1, group_id=group, topics=(_fetch_topic_v1(topic, (0,)),))
    assert [(p.committed_offset, p.metadata) for p in old.topics[0].partitions] == [(17, metadata)]


def _fetch_topic_v1(topic: str, partitions: tuple[int, ...]) -> Any:
    return OffsetFetchRequestTopic(name=topic, partition_indexes=partitions)


def test_list_describe_delete_and_offset_delete(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 2)
    group = unique("admin")
    member = consumer(broker.bootstrap, group)
    member.subscribe([topic])
    poll_until_assigned([member], 2)
    member.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 4)], asynchronous=False)
    try:
        stable = raw_request(broker.bootstrap, 16, 5, states_filter=("stable",), types_filter=())
        assert (group, "Stable", "classic") in {(g.group_id, g.group_state, g.group_type) for g in stable.groups}
        empty_only = raw_request(broker.bootstrap, 16, 4, states_filter=("Empty",))
        assert group not in {g.group_id for g in empty_only.groups}
        described = raw_request(broker.bootstrap, 15, 5, groups=(group,), include_authorized_operations=False)
        assert described.groups[0].protocol_data == "range" and len(described.groups[0].members) == 1
        unknown = raw_request(broker.bootstrap, 15, 6, groups=("no-such-group",), include_authorized_operations=False)
        assert unknown.groups[0].error_code == ErrorCode.group_id_not_found
        busy = raw_request(broker.bootstrap, 42, 2, groups_names=(group,))
        assert busy.results[0].error_code == ErrorCode.non_empty_group
        subscribed = raw_request(broker.bootstrap, 47, 0, group_id=group, topics=(OffsetDeleteRequestTopic(
            name=topic, partitions=(OffsetDeleteRequestPartition(partition_index=0),)),))
        assert subscribed.topics[0].partitions[0].error_code == ErrorCode.group_subscribed_to_topic
    finally:
        member.close()
    wait_until(lambda: raw_request(broker.bootstrap, 15, 5, groups=(group,), include_authorized_operations=False)
               .groups[0].group_state == "Empty", 10, message="group empty after close")
    dropped = raw_request(broker.bootstrap, 47, 0, group_id=group, topics=(OffsetDeleteRequestTopic(
        name=topic, partitions=(OffsetDeleteRequestPartition(partition_index=0),)),))
    assert dropped.error_code == ErrorCode.none and dropped.topics[0].partitions[0].error_code == ErrorCode.none
    deleted = raw_request(broker.bootstrap, 42, 2, groups_names=(group, "no-such-group"))
    assert [r.error_code for r in deleted.results] == [ErrorCode.none, ErrorCode.group_id_not_found]
    listed = raw_request(broker.bootstrap, 16, 0)
    assert group not in {g.group_id for g in listed.groups}


def test_offsets_with_retention_time_expire_and_the_empty_group_goes(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 1)
    group = unique("expire")
    find_coordinator(broker.bootstrap, group)
    partition = OffsetCommitV2Partition(partition_index=0, committed_offset=9, committed_metadata="soon gone")
    committed = raw_request(broker.bootstrap, 8, 2, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                            retention_time=datetime.timedelta(milliseconds=500),
                            topics=(OffsetCommitV2Topic(name=topic, partitions=(partition,)),))
    assert committed.topics[0].partitions[0].error_code == ErrorCode.none

    def fetched_offset() -> int:
        reply = raw_request(broker.bootstrap, 9, 1, group_id=group, topics=(_fetch_topic_v1(topic, (0,)),))
        return reply.topics[0].partitions[0].committed_offset

    assert fetched_offset() == 9
    wait_until(lambda: fetched_offset() == -1, 10, message="offset expired")
    listed = raw_request(broker.bootstrap, 16, 0)
    assert group not in {g.group_id for g in listed.groups}


def test_restart_restores_group_metadata_and_deletions() -> None:
    with running_broker(config=GROUP_CONFIG) as broker:
        topic = create_topic(broker.bootstrap, 2)
        kept, deleted = unique("kept"), unique("deleted")
        member = consumer(broker.bootstrap, kept, **{"group.instance.id": "restart-1"})
        member.subscribe([topic])
        poll_until_assigned([member], 2)
        member.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        before = raw_request(broker.bootstrap, 15, 5, groups=(kept,), include_authorized_operations=False).groups[0]
        other = consumer(broker.bootstrap, deleted)
        other.commit(offsets=[TopicPartition(topic, 1, 2)], asynchronous=False)
        other.close()
        assert raw_request(broker.bootstrap, 42, 2, groups_names=(deleted,)).results[0].error_code == ErrorCode.none
        member.close()  # static: no LeaveGroup, the member stays until its session expires
        broker.stop()
        broker.restart()
        after = wait_until(lambda: _described_once_loaded(broker.bootstrap, kept), 15, message="the group's load")
        assert (after.group_state, after.protocol_data) == ("Stable", "range")
        assert [(m.member_id, m.group_instance_id, m.member_assignment) for m in after.members] == [
            (m.member_id, m.group_instance_id, m.member_assignment) for m in before.members]
        gone = wait_until(lambda: _described_once_loaded(broker.bootstrap, deleted, version=6), 15,
                          message="its partition's load")
        assert gone.error_code == ErrorCode.group_id_not_found
        wait_until(lambda: raw_request(broker.bootstrap, 15, 5, groups=(kept,), include_authorized_operations=False)
                   .groups[0].group_state == "Empty", 15, message="restored member expired")


def _described_once_loaded(bootstrap: str, group: str, version: int = 5) -> Any:
    """DescribeGroups' answer for `group`, or None while its __consumer_offsets partition loads
    (v6+ answers an unknown group GROUP_ID_NOT_FOUND, earlier versions a Dead group)."""
    described = raw_request(bootstrap, 15, version, groups=(group,), include_authorized_operations=False).groups[0]
    return None if described.error_code == ErrorCode.coordinator_load_in_progress else described


# ---------------------------------------------------------------- the `logbus groups` CLI


def logbus_groups(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "logbus", "groups", *args, "--bootstrap-server", broker.bootstrap],
                          capture_output=True, text=True, timeout=60)


def describe_rows(output: str) -> dict[int, list[str]]:
    """`groups describe` rows by partition: [topic, partition, current, log end, lag, consumer, host, client]."""
    rows = [line.split() for line in output.splitlines()[2:]]
    return {int(row[1]): row for row in rows if row[1] != "-"}


def test_groups_cli_list_describe_and_reset(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 3)
    fill(broker.bootstrap, topic, 30)
    log_end = high_watermarks(broker.bootstrap, topic, 3)
    group = unique("cli")
    member = consumer(broker.bootstrap, group, **{"client.id": "cli-test-client"})
    member.subscribe([topic])
    poll_until_assigned([member], 3)
    member.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    try:
        listed = logbus_groups(broker, "list")
        assert listed.returncode == 0 and group in listed.stdout.split(), listed.stderr
        described = logbus_groups(broker, "describe", group)
        assert described.returncode == 0, described.stderr
        assert described.stdout.splitlines()[0].startswith(f"Group: {group}\tState: STABLE\tAssignor: range")
        rows = describe_rows(described.stdout)
        assert rows[0][2:5] == ["2", str(log_end[0]), str(log_end[0] - 2)]
        assert rows[1][2:5] == ["-", str(log_end[1]), "-"]
        assert all(row[7] == "cli-test-client" for row in rows.values())
        refused = logbus_groups(broker, "reset-offsets", group, "--topic", topic, "--to-earliest")
        assert refused.returncode == 2 and "active member" in refused.stderr
    finally:
        member.close()
    to_offset = logbus_groups(broker, "reset-offsets", group, "--topic", topic, "--to-offset", "5")
    assert to_offset.returncode == 0, to_offset.stderr
    assert [c.offset for c in committed_offsets(broker.bootstrap, group, topic, 3)] == [5, 5, 5]
    latest = logbus_groups(broker, "reset-offsets", group, "--topic", topic, "--to-latest")
    assert latest.returncode == 0, latest.stderr
    assert [c.offset for c in committed_offsets(broker.bootstrap, group, topic, 3)] == [log_end[p] for p in range(3)]
    rows = describe_rows(logbus_groups(broker, "describe", group).stdout)
    assert [rows[p][4] for p in range(3)] == ["0", "0", "0"]
    past = logbus_groups(broker, "reset-offsets", group, "--topic", topic, "--to-datetime", "2000-01-01T00:00:00Z")
    assert past.returncode == 0, past.stderr
    assert [c.offset for c in committed_offsets(broker.bootstrap, group, topic, 3)] == [0, 0, 0]
    future = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1)
    logbus_groups(broker, "reset-offsets", group, "--topic", topic, "--to-earliest")
    later = logbus_groups(broker, "reset-offsets", group, "--topic", topic, "--to-datetime", future.isoformat())
    assert later.returncode == 0, later.stderr
    assert [c.offset for c in committed_offsets(broker.bootstrap, group, topic, 3)] == [log_end[p] for p in range(3)]
    missing = logbus_groups(broker, "describe", "no-such-group")
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    probe = consumer(bootstrap, unique("probe"))
    try:
        return {p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        probe.close()


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> list[TopicPartition]:
    probe = consumer(bootstrap, group)
    try:
        return probe.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        probe.close()


def test_compacted_consumer_offsets_keep_the_latest_commit_across_restart() -> None:
    config = {**GROUP_CONFIG, "offsets.topic.segment.bytes": "4096", "log.cleaner.backoff.ms": "100"}
    with running_broker(config=config) as broker:
        topic = create_topic(broker.bootstrap, 1)
        group = unique("compacted")
        member = consumer(broker.bootstrap, group)
        try:
            for offset in range(400):
                member.commit(offsets=[TopicPartition(topic, 0, offset, f"commit {offset}")], asynchronous=False)
        finally:
            member.close()
        directory = os.path.join(broker.data_dir, f"__consumer_offsets-{coordinator_partition(group, 50)}")

        def log_bytes() -> int:
            return sum(os.path.getsize(os.path.join(directory, name)) for name in os.listdir(directory)
                       if name.endswith(".log"))

        def compacted() -> bool:
            try:
                return log_bytes() < written / 4
            except FileNotFoundError:  # the cleaner swapped a segment between listing and sizing
                return False

        written = log_bytes()
        wait_until(compacted, 30, message="__consumer_offsets compacted")
        broker.stop()
        broker.restart()
        committed = committed_offsets(broker.bootstrap, group, topic, 1)
        assert [(c.offset, c.metadata) for c in committed] == [(399, "commit 399")]


def test_member_that_does_not_rejoin_is_dropped_after_the_rebalance_timeout(broker: BrokerProcess) -> None:
    group = unique("slow")
    find_coordinator(broker.bootstrap, group)
    slow, fresh = RawConnection(broker.bootstrap), RawConnection(broker.bootstrap)
    try:
        slow_id = slow.call(11, 9, **join_fields(group, rebalance_ms=2000)).member_id
        joined = slow.call(11, 9, **join_fields(group, member_id=slow_id, rebalance_ms=2000))
        assert (joined.error_code, joined.generation_id) == (ErrorCode.none, 1)
        fresh_id = fresh.call(11, 9, **join_fields(group, rebalance_ms=2000)).member_id
        result: list[Any] = []
        joiner = threading.Thread(target=lambda: result.append(
            fresh.call(11, 9, **join_fields(group, member_id=fresh_id, rebalance_ms=2000))))
        started = time.monotonic()
        joiner.start()

        def told_to_rejoin() -> bool:
            beat = slow.call(12, 4, group_id=group, generation_id=1, member_id=slow_id, group_instance_id=None)
            return beat.error_code == ErrorCode.rebalance_in_progress

        wait_until(told_to_rejoin, 5, message="REBALANCE_IN_PROGRESS for the slow member")
        while joiner.is_alive():  # the slow member stays alive by heartbeats but never rejoins
            assert time.monotonic() - started < 10, "the rebalance never completed"
            slow.call(12, 4, group_id=group, generation_id=1, member_id=slow_id, group_instance_id=None)
            joiner.join(0.2)
        waited = time.monotonic() - started
        (answer,) = result
        assert (answer.error_code, answer.generation_id, answer.leader) == (ErrorCode.none, 2, fresh_id)
        assert [m.member_id for m in answer.members] == [fresh_id]
        assert 1.5 <= waited < 8, waited
        dropped = slow.call(12, 4, group_id=group, generation_id=1, member_id=slow_id, group_instance_id=None)
        assert dropped.error_code == ErrorCode.unknown_member_id
    finally:
        slow.close()
        fresh.close()


def consumer_subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: the topics, no user data."""
    encoded = b"".join(struct.pack(">h", len(t)) + t.encode() for t in topics)
    return struct.pack(">hi", 0, len(topics)) + encoded + struct.pack(">i", -1)


def test_stable_group_loses_offsets_of_topics_it_left(broker: BrokerProcess) -> None:
    """KIP-496: in a Stable consumer group, expired offsets of unsubscribed topics go; subscribed ones stay."""
    subscribed, abandoned = create_topic(broker.bootstrap, 1), create_topic(broker.bootstrap, 1)
    group = unique("kip496")
    find_coordinator(broker.bootstrap, group)
    connection = RawConnection(broker.bootstrap)
    try:
        fields = join_fields(group)
        fields["protocols"] = (_protocol("range", consumer_subscription(subscribed)),)
        member_id = connection.call(11, 9, **fields).member_id
        joined = connection.call(11, 9, **{**fields, "member_id": member_id})
        connection.call(14, 5, group_id=group, generation_id=joined.generation_id, member_id=member_id,
                        group_instance_id=None, protocol_type="consumer", protocol_name="range",
                        assignments=(SyncGroupRequestAssignment(member_id=member_id, assignment=b""),))
        topics = tuple(OffsetCommitV2Topic(name=t, partitions=(OffsetCommitV2Partition(
            partition_index=0, committed_offset=3, committed_metadata=""),)) for t in (subscribed, abandoned))
        committed = connection.call(8, 2, group_id=group, generation_id_or_member_epoch=joined.generation_id,
                                    member_id=member_id, retention_time=datetime.timedelta(milliseconds=300),
                                    topics=topics)
        assert [t.partitions[0].error_code for t in committed.topics] == [ErrorCode.none, ErrorCode.none]

        def offsets() -> tuple[int, int]:
            connection.call(12, 4, group_id=group, generation_id=joined.generation_id, member_id=member_id,
                            group_instance_id=None)
            reply = connection.call(9, 1, group_id=group, topics=(_fetch_topic_v1(subscribed, (0,)),
                                                                  _fetch_topic_v1(abandoned, (0,))))
            return tuple(t.partitions[0].committed_offset for t in reply.topics)

        wait_until(lambda: offsets() == (3, -1), 10, message="the abandoned topic's offset expired")
    finally:
        connection.close()


# ---------------------------------------------------------------- loading __consumer_offsets at start-up


def _write_big_offsets_partition(data_dir: str, topic: str, group: str, copies: int) -> None:
    """A data dir whose one __consumer_offsets partition holds `copies` x 1000 commits of a bulk
    group, then one commit of `group` (offset 1234) at its very end; and a topic to produce to."""
    from test_group_state import coordinator_env  # the in-process coordinator over a real store

    from logbus.coordinator.offsets import OffsetCommit
    from logbus.coordinator.records import OffsetKey, OffsetValue
    from logbus.coordinator.store import encode_entry
    from logbus.protocol.records import build_batch, validate_batches

    async def write() -> None:
        async with coordinator_env(Path(data_dir)) as env:
            await env.coordinator.store.metadata.create_topic(topic, 1, 1, {})
            partition = env.coordinator.store.partition(0)
            bulk = build_batch([encode_entry(OffsetKey("bulk", topic, p), OffsetValue(p, -1, "", 0, -1))
                                for p in range(1000)], 0)
            for _ in range(copies):
                data = bytearray(bulk)
                partition.append_as_leader(data, validate_batches(data), acks=-1)
            errors = await env.coordinator.commit_offsets(group, -1, "", None, [OffsetCommit(topic, 0, 1234, -1, "")])
            assert errors == [ErrorCode.none]

    asyncio.run(write())


def test_big_consumer_offsets_loads_in_the_background_while_other_requests_are_served(tmp_path: Path) -> None:
    from helpers import RawConnection as Connection
    from helpers import raw_produce

    from logbus.protocol.records import build_batch

    topic, group = "load-topic", "load-group"
    data_dir = str(tmp_path / "data")
    _write_big_offsets_partition(data_dir, topic, group, copies=400)  # 400k records, ~20 MB
    with running_broker(config={"offsets.topic.num.partitions": "1"}, data_dir=data_dir) as process, \
            Connection(process.bootstrap) as connection:
        def join_error() -> int:
            return connection.call(11, 9, **join_fields(group)).error_code

        assert join_error() == ErrorCode.coordinator_load_in_progress
        began = time.monotonic()
        latencies = []
        for i in range(5):
            sent = time.monotonic()
            assert connection.call(3, 1, topics=None).brokers  # Metadata
            assert raw_produce(connection, topic, build_batch([(None, b"during the load")], 0)) == (0, i)
            latencies.append(time.monotonic() - sent)
        assert join_error() == ErrorCode.coordinator_load_in_progress  # so both were served during the load
        wait_until(lambda: join_error() == ErrorCode.member_id_required, 60, message="the load to finish")
        loaded_in = time.monotonic() - began
        reply = connection.call(9, 1, group_id=group, topics=(_fetch_topic_v1(topic, (0,)),))
        assert reply.topics[0].partitions[0].committed_offset == 1234  # the last record was loaded too
        print(f"Metadata + Produce answered in {[round(t * 1000) for t in latencies]} ms, load {loaded_in:.1f} s")


def test_group_refusals_keep_each_responses_shape(broker: BrokerProcess) -> None:
    """A refusal of the whole group is answered in the fields each API carries it: INVALID_GROUP_ID
    for an empty id (JoinGroup echoing the member id; SyncGroup without assignment or protocol;
    LeaveGroup v3+ and OffsetDelete without items; OffsetCommit per partition; DeleteGroups per
    group), UNKNOWN_MEMBER_ID and GROUP_ID_NOT_FOUND for a group this coordinator does not hold."""
    invalid, unknown_member = ErrorCode.invalid_group_id, ErrorCode.unknown_member_id
    group, topic = unique("refused"), create_topic(broker.bootstrap)
    find_coordinator(broker.bootstrap, group)
    with contextlib.closing(RawConnection(broker.bootstrap)) as connection:
        joined = connection.call(11, 9, **join_fields("", member_id="m-1"))
        assert (joined.error_code, joined.member_id, joined.generation_id, joined.members) == (invalid, "m-1", -1, ())
        assert connection.call(12, 4, group_id="", generation_id=1, member_id="m-1",
                               group_instance_id=None).error_code == invalid
        for group_id, code in (("", invalid), (group, unknown_member)):
            synced = connection.call(14, 5, group_id=group_id, generation_id=1, member_id="m-1", group_instance_id=None,
                                     protocol_type="consumer", protocol_name="range", assignments=())
            assert (synced.error_code, synced.assignment, synced.protocol_type, synced.protocol_name) == (
                code, b"", None, None)
        assert connection.call(13, 0, group_id="", member_id="m-1").error_code == invalid
        assert connection.call(13, 0, group_id=group, member_id="m-1").error_code == unknown_member
        left = connection.call(13, 5, group_id="", members=(MemberIdentity(member_id="m-1", group_instance_id=None,
                                                                           reason=None),))
        assert (left.error_code, left.members) == (invalid, ())
        left = connection.call(13, 5, group_id=group, members=(MemberIdentity(member_id="m-1", group_instance_id=None,
                                                                              reason=None),))
        assert (left.error_code, [m.error_code for m in left.members]) == (ErrorCode.none, [unknown_member])
        committed = connection.call(8, 9, group_id="", generation_id_or_member_epoch=-1, member_id="",
                                    group_instance_id=None, topics=(OffsetCommitRequestTopic(
                                        name=topic, partitions=(OffsetCommitRequestPartition(
                                            partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                                            committed_metadata=""),)),))
        assert [p.error_code for t in committed.topics for p in t.partitions] == [invalid]
        for group_id, code in (("", invalid), (group, ErrorCode.group_id_not_found)):
            deleted = connection.call(47, 0, group_id=group_id, topics=(OffsetDeleteRequestTopic(
                name=topic, partitions=(OffsetDeleteRequestPartition(partition_index=0),)),))
            assert (deleted.error_code, deleted.topics) == (code, ())
        assert [r.error_code for r in connection.call(42, 2, groups_names=("", group)).results] == [
            invalid, ErrorCode.group_id_not_found]
        described = connection.call(15, 5, groups=(group,), include_authorized_operations=False).groups[0]
        assert (described.error_code, described.group_state) == (ErrorCode.none, "Dead")

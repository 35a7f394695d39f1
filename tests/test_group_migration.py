"""Online migration between classic and consumer groups (KIP-848, Kafka 4.1's
group.consumer.migration.policy) against a real broker, with real librdkafka consumers of both
protocols in one group: classic (cooperative-sticky) members consuming, consumer-protocol members
joining (the group is upgraded, the classic members go on inside it), the last consumer-protocol
member leaving (downgraded back), and the classic members leaving one by one. No record is lost;
one is consumed twice only if its commit failed (the at-least-once window)."""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import QUIET, RawConnection, produce_all, wait_until
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v9.request import JoinGroupRequestProtocol
from kio.schema.leave_group.v5.request import MemberIdentity

from logbus.protocol.consumer_protocol import encode_assignment, parse_assignment, parse_subscription
from logbus.testing import BrokerProcess, running_broker

DESCRIBE = 69
CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1
CONFIG = {"group.consumer.min.heartbeat.interval.ms": "100", "group.consumer.heartbeat.interval.ms": "300",
          "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1"}
PARTITIONS = 6


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker(config=CONFIG) as process:
        yield process


class Group:
    """Consumers of both protocols in one group; every record consumed is committed at once."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic, self.group_id = bootstrap, topic, f"group-{uuid.uuid4().hex[:8]}"
        self.members: dict[str, Consumer] = {}
        self.seen: list[bytes] = []
        self.commit_failed: set[bytes] = set()
        self.produced: list[bytes] = []

    def join(self, name: str, protocol: str) -> None:
        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "group.id": self.group_id,
                                  "group.protocol": protocol, "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False, **QUIET}
        if protocol == "classic":
            config.update({"partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 10000,
                           "heartbeat.interval.ms": 300})
        member = Consumer(config)
        member.subscribe([self.topic])
        self.members[name] = member

    def leave(self, name: str) -> None:
        self.members.pop(name).close()

    def produce(self, count: int) -> None:
        start = len(self.produced)
        values = [b"r%05d" % i for i in range(start, start + count)]
        produce_all(self.bootstrap, self.topic, [(None, v) for v in values])
        self.produced += values

    def consume_everything(self, also: Any = lambda: True) -> None:
        """Poll every member until each record produced has been consumed (and `also` holds)."""
        def done() -> bool:
            for member in self.members.values():
                self._poll(member)
            return set(self.seen) >= set(self.produced) and also()
        wait_until(done, 60, interval=0, message="every record consumed")

    def _poll(self, member: Consumer) -> None:
        message = member.poll(0.05)
        if message is None or message.error() is not None:
            return
        self.seen.append(message.value())
        try:
            member.commit(message, asynchronous=False)
        except KafkaException:
            self.commit_failed.add(message.value())

    def member_types(self) -> list[int]:
        with RawConnection(self.bootstrap) as connection:
            described = connection.call(DESCRIBE, 1, group_ids=(self.group_id,), include_authorized_operations=False)
        group = described.groups[0]
        return sorted(m.member_type for m in group.members) if group.error_code == ErrorCode.none else []

    def close(self) -> None:
        for member in self.members.values():
            member.close()


def test_a_classic_group_is_upgraded_online_and_back(broker: BrokerProcess) -> None:
    topic = f"topic-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(15)
    group = Group(broker.bootstrap, topic)
    try:
        group.join("a", "classic")
        group.join("b", "classic")
        group.produce(60)
        group.consume_everything()
        assert group.member_types() == []  # a classic group: not a consumer group

        group.join("c", "consumer")  # upgrades the group; a and b go on as its classic members
        group.produce(60)
        group.consume_everything(lambda: group.member_types() == [CLASSIC_MEMBER, CLASSIC_MEMBER, CONSUMER_MEMBER]
                                 and all(m.assignment() for m in group.members.values()))

        group.leave("c")  # the last consumer-protocol member: back to a classic group
        group.produce(60)
        group.consume_everything(lambda: group.member_types() == [])

        group.join("c", "consumer")
        group.join("d", "consumer")
        group.produce(60)
        group.consume_everything(lambda: len(group.member_types()) == 4)
        group.leave("a")
        group.produce(60)
        group.consume_everything(lambda: group.member_types() == [CLASSIC_MEMBER, CONSUMER_MEMBER, CONSUMER_MEMBER])
        group.leave("b")
        group.produce(60)
        group.consume_everything(lambda: group.member_types() == [CONSUMER_MEMBER, CONSUMER_MEMBER]
                                 and all(m.assignment() for m in group.members.values()))
    finally:
        group.close()
    duplicates = {v for v in group.seen if group.seen.count(v) > 1}
    assert set(group.seen) == set(group.produced)
    assert duplicates <= group.commit_failed, sorted(duplicates - group.commit_failed)[:10]


def subscription(topic: str) -> bytes:
    """A ConsumerProtocolSubscription v0 of one topic."""
    name = topic.encode()
    return struct.pack(">hih", 0, 1, len(name)) + name + struct.pack(">i", -1)


def classic_join(connection: RawConnection, group: str, topic: str, member_id: str = "") -> Any:
    return connection.call(11, 9, group_id=group, session_timeout=datetime.timedelta(seconds=10),
                           rebalance_timeout=datetime.timedelta(seconds=10), member_id=member_id,
                           group_instance_id=None, protocol_type="consumer", reason=None,
                           protocols=(JoinGroupRequestProtocol(name="range", metadata=subscription(topic)),))


def consumer_heartbeat(connection: RawConnection, group: str, member: str, epoch: int, topic: str) -> Any:
    fields: dict[str, Any] = {"topic_partitions": None}
    if epoch == 0:
        fields = {"rebalance_timeout": datetime.timedelta(seconds=30), "topic_partitions": (),
                  "subscribed_topic_names": (topic,)}
    return connection.call(68, 1, group_id=group, member_id=member, member_epoch=epoch, **fields)


def test_the_migration_policy_and_empty_groups() -> None:
    """With the policy `disabled` no group with members is converted, but an empty group of
    either type still gives its id to the other; a classic member joins a consumer group all the
    same (mixed groups do not depend on the policy) and stays when the consumer member leaves."""
    with running_broker(config={**CONFIG, "group.consumer.migration.policy": "Disabled"}) as process, \
            RawConnection(process.bootstrap) as connection:
        topic = f"topic-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": process.bootstrap, **QUIET})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(15)
        wait_until(lambda: connection.call(10, 3, key="g1", key_type=0).error_code == ErrorCode.none, 30,
                   message="the coordinator")
        # an empty classic group gives its id to a consumer group
        member_id = classic_join(connection, "g1", topic).member_id
        joined = wait_until(lambda: (r := classic_join(connection, "g1", topic, member_id)).error_code
                            == ErrorCode.none and r, 30, message="classic member joined")
        refused = consumer_heartbeat(connection, "g1", "c1", 0, topic)
        assert refused.error_code == ErrorCode.group_id_not_found  # not converted: the policy
        left = connection.call(13, 5, group_id="g1", members=(MemberIdentity(
            member_id=joined.member_id, group_instance_id=None, reason=None),))
        assert left.error_code == ErrorCode.none
        first = consumer_heartbeat(connection, "g1", "c1", 0, topic)
        assert first.error_code == ErrorCode.none and first.member_epoch > 0
        # a classic member joins the consumer group and stays in it when the consumer member leaves
        asked = classic_join(connection, "g1", topic)
        assert asked.error_code == ErrorCode.member_id_required
        inside = classic_join(connection, "g1", topic, asked.member_id)
        assert (inside.error_code, inside.protocol_name, inside.leader, inside.members) == (
            ErrorCode.none, "range", "", ())
        assert consumer_heartbeat(connection, "g1", "c1", -1, topic).error_code == ErrorCode.none
        described = connection.call(DESCRIBE, 1, group_ids=("g1",), include_authorized_operations=False)
        assert [m.member_type for m in described.groups[0].members] == [CLASSIC_MEMBER]


def test_the_embedded_consumer_protocol_parses_and_refuses_hostile_bytes() -> None:
    assert parse_subscription(subscription("t")).topics == ("t",)
    v1 = struct.pack(">hih", 1, 1, 1) + b"t" + struct.pack(">i", -1) + struct.pack(">ih", 1, 1) + b"t" + struct.pack(
        ">iii", 2, 0, 3)
    assert parse_subscription(v1).owned == {"t": frozenset({0, 3})}
    assert parse_assignment(encode_assignment({"t": frozenset({2, 1})}, 3)) == {"t": frozenset({1, 2})}
    for hostile in (b"", b"\x00", struct.pack(">hi", 0, 2**31 - 1), struct.pack(">hih", 0, 1, 300) + b"x",
                    struct.pack(">hih", 0, 1, 2) + b"\xff\xfe" + struct.pack(">i", -1)):
        with pytest.raises(ValueError):
            parse_subscription(hostile)
    with pytest.raises(ValueError):
        parse_assignment(struct.pack(">hi", 0, 2**31 - 1))

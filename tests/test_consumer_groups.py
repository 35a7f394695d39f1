"""Consumer groups of the next-generation protocol (KIP-848) against a real broker: librdkafka with
`group.protocol=consumer`, and raw ConsumerGroupHeartbeat/ConsumerGroupDescribe requests for what
a client does not send on purpose (error codes, ApiVersions, ListGroups, DeleteGroups)."""

from __future__ import annotations

import datetime
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from helpers import (
    QUIET,
    RawConnection,
    create_topic,
    group_broker,
    join_when_loaded,
    produce_all,
    raw_request,
    transactional_producer,
    unique,
    wait_until,
)
from kio.schema.consumer_group_heartbeat.v1.request import TopicPartitions
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v9.request import JoinGroupRequestProtocol
from kio.schema.offset_commit.v9.request import OffsetCommitRequestPartition, OffsetCommitRequestTopic
from kio.schema.offset_fetch.v9.request import OffsetFetchRequestGroup, OffsetFetchRequestTopics

from logbus.testing import BrokerProcess, running_broker

HEARTBEAT, DESCRIBE = 68, 69
# fast heartbeats, so that a reconciliation takes a fraction of a second
# One __consumer_offsets partition: once the fixture has seen it served, every group is.
# (a group may set a session as short as 2 s: the group configs test)
CONFIG = {"group.consumer.min.heartbeat.interval.ms": "100", "group.consumer.heartbeat.interval.ms": "300",
          "group.consumer.min.session.timeout.ms": "2000",
          "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1"}


JOINING = {"rebalance_timeout": datetime.timedelta(seconds=30), "topic_partitions": ()}  # a member at epoch 0


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with group_broker(CONFIG, HEARTBEAT, **JOINING) as process:
        yield process


def consumer(bootstrap: str, group: str, **config: Any) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, **QUIET, **config})


def topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    reply = raw_request(bootstrap, 3, 12, topics=None, allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False)
    return next(t.topic_id for t in reply.topics if t.name == topic)


def heartbeat(connection: RawConnection, group: str, member: str, epoch: int, **fields: Any) -> Any:
    request: dict[str, Any] = {"group_id": group, "member_id": member, "member_epoch": epoch,
                               "topic_partitions": None}
    if epoch == 0:
        request.update(JOINING)
    request.update(fields)
    return connection.call(HEARTBEAT, 1, **request)


# ---------------------------------------------------------------- librdkafka, group.protocol=consumer


def test_one_consumer_subscribes_and_consumes(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 4)
    produce_all(broker.bootstrap, topic, [(None, b"v%d" % i) for i in range(40)])
    member = consumer(broker.bootstrap, unique("group"))
    member.subscribe([topic])
    values: list[bytes] = []

    def consumed_all() -> bool:
        message = member.poll(0.2)
        if message is not None and message.error() is None:
            values.append(message.value())
        return len(values) == 40

    wait_until(consumed_all, 30, interval=0, message="40 records consumed")
    assert sorted(values) == sorted(b"v%d" % i for i in range(40))
    assert {tp.partition for tp in member.assignment()} == {0, 1, 2, 3}
    member.close()


class Tracked:
    """A consumer that records what it owns through its rebalance callbacks."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.owned: set[int] = set()
        self.revocations = 0
        self.lost_kept = False  # did it ever give up a partition its next assignment gave back?
        self.consumer = consumer(bootstrap, group)
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.owned |= {tp.partition for tp in partitions}

    def _revoked(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.revocations += len(partitions)
        self.owned -= {tp.partition for tp in partitions}


def test_members_come_and_go_and_each_partition_has_one_owner_at_a_time(broker: BrokerProcess) -> None:
    partitions = 6
    topic = create_topic(broker.bootstrap, partitions)
    group = unique("group")
    members: list[Tracked] = []

    def poll_until_balanced(expected_sizes: list[int]) -> None:
        def balanced() -> bool:
            for member in members:
                member.consumer.poll(0.02)
                owners = [p for m in members for p in m.owned]
                assert len(owners) == len(set(owners)), "a partition with two owners"
            return sorted(len(m.owned) for m in members) == expected_sizes and \
                set().union(*(m.owned for m in members)) == set(range(partitions))
        wait_until(balanced, 30, interval=0, message=f"assignment {expected_sizes}")

    for size in ([6], [3, 3], [2, 2, 2]):
        members.append(Tracked(broker.bootstrap, group, topic))
        before = [set(m.owned) for m in members[:-1]]
        poll_until_balanced(size)
        for kept, member in zip(before, members, strict=False):
            assert member.owned <= kept  # cooperative: nothing taken away and given back
    assert [m.revocations for m in members] == [4, 1, 0]  # 6 -> 3 -> 2, then 3 -> 2
    leaving = members.pop(0)
    leaving.consumer.close()
    kept = [set(m.owned) for m in members]
    poll_until_balanced([3, 3])
    assert all(owned >= before for owned, before in zip((m.owned for m in members), kept, strict=True))
    for member in members:
        member.consumer.close()


def test_committed_offsets_resume_after_all_members_closed(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 2)
    produce_all(broker.bootstrap, topic, [(b"k%d" % (i % 2), b"v%d" % i) for i in range(20)])
    group = unique("group")
    first = consumer(broker.bootstrap, group)
    first.subscribe([topic])
    seen: list[bytes] = []

    def consumed(count: int, member: Consumer) -> bool:
        message = member.poll(0.2)
        if message is not None and message.error() is None:
            seen.append(message.value())
        return len(seen) >= count

    wait_until(lambda: consumed(8, first), 30, interval=0, message="first records")
    first.commit(asynchronous=False)
    committed = {tp.partition: tp.offset for tp in first.committed(first.assignment(), timeout=10)}
    first.close()
    assert sum(max(offset, 0) for offset in committed.values()) == len(seen)  # -1001: none committed
    second = consumer(broker.bootstrap, group)
    second.subscribe([topic])
    wait_until(lambda: consumed(20, second), 30, interval=0, message="the rest")
    assert sorted(seen) == sorted(b"v%d" % i for i in range(20))  # nothing twice, nothing missed
    second.close()


# ---------------------------------------------------------------- raw requests


def test_api_versions_advertise_the_consumer_group_apis(broker: BrokerProcess) -> None:
    keys = {k.api_key: (k.min_version, k.max_version) for k in raw_request(broker.bootstrap, 18, 0).api_keys}
    assert keys[HEARTBEAT] == (0, 1)
    assert keys[DESCRIBE] == (0, 1)


def test_heartbeat_errors(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 2)
    group = unique("group")
    with RawConnection(broker.bootstrap) as connection:
        no_subscription = heartbeat(connection, group, "m1", 0)
        assert no_subscription.error_code == ErrorCode.invalid_request
        unknown = heartbeat(connection, group, "m1", 3)
        assert unknown.error_code == ErrorCode.unknown_member_id
        joined = heartbeat(connection, group, "m1", 0, subscribed_topic_names=(topic,))
        assert joined.error_code == ErrorCode.none and joined.member_epoch == 1
        assert {p for t in joined.assignment.topic_partitions for p in t.partitions} == {0, 1}
        assert joined.heartbeat_interval == datetime.timedelta(milliseconds=300)
        ahead = heartbeat(connection, group, "m1", 7)
        assert ahead.error_code == ErrorCode.fenced_member_epoch
        stranger = heartbeat(connection, group, "m2", 1)
        assert stranger.error_code == ErrorCode.unknown_member_id
        assignor = heartbeat(connection, group, "m3", 0, subscribed_topic_names=(topic,), server_assignor="sticky")
        assert assignor.error_code == ErrorCode.unsupported_assignor
        left = heartbeat(connection, group, "m1", -1)
        assert left.error_code == ErrorCode.none and left.member_epoch == -1


def test_static_member_replaced_while_in_use(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 2)
    group = unique("group")
    with RawConnection(broker.bootstrap) as connection:
        first = heartbeat(connection, group, "a", 0, subscribed_topic_names=(topic,), instance_id="i")
        assert first.error_code == ErrorCode.none
        taken = heartbeat(connection, group, "b", 0, subscribed_topic_names=(topic,), instance_id="i")
        assert taken.error_code == ErrorCode.unreleased_instance_id
        assert heartbeat(connection, group, "a", -2, instance_id="i").member_epoch == -2
        back = heartbeat(connection, group, "b", 0, subscribed_topic_names=(topic,), instance_id="i")
        assert back.error_code == ErrorCode.none and back.member_epoch == first.member_epoch


def test_max_size_and_assignors_come_from_the_config() -> None:
    config = {**CONFIG, "group.consumer.max.size": "1", "group.consumer.assignors": "range,uniform"}
    with running_broker(config=config) as process, RawConnection(process.bootstrap) as connection:
        topic = create_topic(process.bootstrap, 1)
        join_when_loaded(connection, HEARTBEAT, "g", "a", topic, **JOINING)
        full = heartbeat(connection, "g", "b", 0, subscribed_topic_names=(topic,))
        assert full.error_code == ErrorCode.group_max_size_reached
        described = connection.call(DESCRIBE, 1, group_ids=("g",), include_authorized_operations=False)
        assert described.groups[0].assignor_name == "range"


def test_describe_list_and_delete_a_consumer_group(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 2)
    group = unique("group")
    with RawConnection(broker.bootstrap) as connection:
        heartbeat(connection, group, "m1", 0, subscribed_topic_names=(topic,))
        described = connection.call(DESCRIBE, 1, group_ids=(group, "no-such"), include_authorized_operations=False)
        mine, unknown = described.groups
        assert (mine.error_code, mine.group_state, mine.group_epoch, mine.assignor_name) == (
            ErrorCode.none, "Stable", 1, "uniform")
        (member,) = mine.members
        assert (member.member_id, member.member_epoch, member.subscribed_topic_names, member.member_type) == (
            "m1", 1, (topic,), 1)
        assert member.assignment.topic_partitions[0].topic_name == topic
        assert member.assignment.topic_partitions[0].topic_id == topic_id(broker.bootstrap, topic)
        assert unknown.error_code == ErrorCode.group_id_not_found
        listed = connection.call(16, 5, states_filter=(), types_filter=("consumer",))
        assert [(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in listed.groups
                if g.group_id == group] == [(group, "consumer", "consumer", "Stable")]
        classic_only = connection.call(16, 5, states_filter=(), types_filter=("classic",))
        assert group not in {g.group_id for g in classic_only.groups}
        old = connection.call(15, 6, groups=(group,), include_authorized_operations=False).groups[0]
        assert (old.error_code, old.group_state) == (ErrorCode.group_id_not_found, "Dead")
        busy = connection.call(42, 2, groups_names=(group,)).results[0]
        assert busy.error_code == ErrorCode.non_empty_group
        heartbeat(connection, group, "m1", -1)
        deleted = connection.call(42, 2, groups_names=(group,)).results[0]
        assert deleted.error_code == ErrorCode.none
        gone = connection.call(DESCRIBE, 1, group_ids=(group,), include_authorized_operations=False)
        assert gone.groups[0].error_code == ErrorCode.group_id_not_found


def _join(connection: RawConnection, group: str, protocol_type: str = "consumer", member_id: str = "") -> Any:
    return connection.call(11, 9, group_id=group, session_timeout=datetime.timedelta(seconds=10),
                           rebalance_timeout=datetime.timedelta(seconds=10), member_id=member_id,
                           group_instance_id=None,
                           protocol_type=protocol_type, reason=None,
                           protocols=(JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01"),))


def test_a_group_id_is_classic_or_consumer(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 1)
    group = unique("group")
    with RawConnection(broker.bootstrap) as connection:
        join_when_loaded(connection, HEARTBEAT, group, "m1", topic, **JOINING)
        # a classic member of the consumer protocol type is taken in (asked for a member id first)
        assert _join(connection, group).error_code == ErrorCode.member_id_required
        assert _join(connection, group, "connect").error_code == ErrorCode.inconsistent_group_protocol
        heartbeat(connection, group, "m1", -1)
        classic = _join(connection, group)  # the empty consumer group gives its id up
        assert classic.error_code == ErrorCode.member_id_required
        rejoined = _join(connection, group, member_id=classic.member_id)
        assert rejoined.error_code == ErrorCode.none
        # its subscription (b"\x00\x01") does not parse: the classic group cannot be upgraded
        refused = heartbeat(connection, group, "m2", 0, subscribed_topic_names=(topic,))
        assert refused.error_code == ErrorCode.group_id_not_found


def test_commits_and_fetches_carry_the_member_epoch(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 1)
    group = unique("group")

    def commit(connection: RawConnection, member: str, epoch: int) -> ErrorCode:
        reply = connection.call(8, 9, group_id=group, generation_id_or_member_epoch=epoch, member_id=member,
                                group_instance_id=None, topics=(OffsetCommitRequestTopic(name=topic, partitions=(
                                    OffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                                                 committed_leader_epoch=-1,
                                                                 committed_metadata=""),)),))
        return reply.topics[0].partitions[0].error_code

    def fetch(connection: RawConnection, member: str | None, epoch: int) -> Any:
        wanted = OffsetFetchRequestGroup(group_id=group, member_id=member, member_epoch=epoch,
                                         topics=(OffsetFetchRequestTopics(name=topic, partition_indexes=(0,)),))
        return connection.call(9, 9, groups=(wanted,), require_stable=True).groups[0]

    with RawConnection(broker.bootstrap) as connection:
        heartbeat(connection, group, "m1", 0, subscribed_topic_names=(topic,))
        assert commit(connection, "m1", 0) == ErrorCode.stale_member_epoch
        assert commit(connection, "m9", 1) == ErrorCode.unknown_member_id
        assert commit(connection, "", -1) == ErrorCode.unknown_member_id  # the group has members
        assert commit(connection, "m1", 1) == ErrorCode.none
        assert fetch(connection, "m1", 0).error_code == ErrorCode.stale_member_epoch
        assert fetch(connection, "m9", 1).error_code == ErrorCode.unknown_member_id
        assert fetch(connection, "m1", 1).topics[0].partitions[0].committed_offset == 5
        assert fetch(connection, None, -1).topics[0].partitions[0].committed_offset == 5  # admin tools


def test_heartbeat_of_a_bad_group_id_and_v0_member_id(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 1)
    with RawConnection(broker.bootstrap) as connection:
        empty = heartbeat(connection, "", "m", 0, subscribed_topic_names=(topic,))
        assert empty.error_code == ErrorCode.invalid_request
        chosen = connection.call(HEARTBEAT, 0, group_id=unique("group"), member_id="", member_epoch=0,
                                 rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_names=(topic,),
                                 topic_partitions=())
        assert chosen.error_code == ErrorCode.none and chosen.member_id
        bad = heartbeat(connection, unique("group"), "", 0, subscribed_topic_names=(topic,), topic_partitions=(
            TopicPartitions(topic_id=uuid.uuid4(), partitions=(0,)),))
        assert bad.error_code == ErrorCode.invalid_request


def test_a_regex_subscription_consumes_the_matching_topics(broker: BrokerProcess) -> None:
    prefix = unique("rx").replace("-", "_")
    matching = [f"{prefix}.{name}" for name in ("a", "b")]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in [*matching, f"x{prefix}.c"]]).values():
        future.result(10)
    for topic in [*matching, f"x{prefix}.c"]:
        produce_all(broker.bootstrap, topic, [(None, topic.encode())])
    member = consumer(broker.bootstrap, unique("group"))
    member.subscribe([f"^{prefix}\\..*"])
    seen: set[str] = set()

    def consumed_both() -> bool:
        message = member.poll(0.2)
        if message is not None and message.error() is None:
            seen.add(message.value().decode())
        return len(seen) >= 2

    wait_until(consumed_both, 30, interval=0, message="a record of each matching topic")
    assert seen == set(matching)
    member.close()


def test_a_transaction_commits_the_offsets_of_a_consumer_group_member(broker: BrokerProcess) -> None:
    """Consume-transform-produce with a KIP-848 consumer: TxnOffsetCommit carries its member id and
    epoch (send_offsets_to_transaction), and the offsets are committed with the transaction."""
    source, sink = create_topic(broker.bootstrap, 1), create_topic(broker.bootstrap, 1)
    produce_all(broker.bootstrap, source, [(None, b"v%d" % i) for i in range(5)])
    group = unique("group")
    member = consumer(broker.bootstrap, group, **{"isolation.level": "read_committed"})
    member.subscribe([source])
    messages: list[Any] = []

    def consumed() -> bool:
        message = member.poll(0.2)
        if message is not None and message.error() is None:
            messages.append(message)
        return len(messages) == 5

    wait_until(consumed, 30, interval=0, message="five records")
    producer = transactional_producer(broker.bootstrap, unique("txn"))
    producer.begin_transaction()
    for message in messages:
        producer.produce(sink, message.value())
    producer.send_offsets_to_transaction([TopicPartition(source, 0, 5)], member.consumer_group_metadata(), 15)
    producer.commit_transaction(15)
    committed = wait_until(lambda: (c := member.committed([TopicPartition(source, 0)], timeout=10)[0]).offset == 5
                           and c, 15, message="offset 5 committed")
    assert committed.error is None
    member.close()


# A consumer in its own process, to be killed with SIGKILL: it never leaves the group.
CONSUMER_SCRIPT = """
import sys
from confluent_kafka import Consumer
member = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "group.protocol": "consumer",
                   "log_level": 0})
member.subscribe([sys.argv[3]])
while True:
    member.poll(0.2)
"""


def members_of(connection: RawConnection, group: str) -> set[str]:
    described = connection.call(DESCRIBE, 1, group_ids=(group,), include_authorized_operations=False)
    return {member.member_id for member in described.groups[0].members}


def test_a_groups_own_session_timeout_and_heartbeat_interval(broker: BrokerProcess) -> None:
    """consumer.session.timeout.ms / consumer.heartbeat.interval.ms set on the GROUP resource rule
    that group from its next heartbeat: a member killed with SIGKILL goes after the group's 2 s
    session, not the broker's 45 s; the heartbeat interval answered is the group's."""
    topic = create_topic(broker.bootstrap, 2)
    group = unique("group")
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", "2000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("consumer.heartbeat.interval.ms", "700", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    admin.incremental_alter_configs([resource])[resource].result(15)
    killed = subprocess.Popen([sys.executable, "-c", CONSUMER_SCRIPT, broker.bootstrap, group, topic],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with RawConnection(broker.bootstrap) as connection:
            wait_until(lambda: members_of(connection, group), 30, message="the subprocess consumer joined")
            joined = heartbeat(connection, group, "watcher", 0, subscribed_topic_names=(topic,))
            assert joined.heartbeat_interval == datetime.timedelta(milliseconds=700)
            epoch = joined.member_epoch
            killed.send_signal(signal.SIGKILL)
            killed.wait(10)

            def only_the_watcher_left() -> bool:
                nonlocal epoch
                epoch = heartbeat(connection, group, "watcher", epoch).member_epoch  # keeps its own session
                return members_of(connection, group) == {"watcher"}

            # well before the broker's 45 s session timeout
            wait_until(only_the_watcher_left, 25, interval=0.3, message="the killed member expired")
    finally:
        killed.kill()
        killed.wait(10)

"""Share groups (KIP-932) against a real broker: librdkafka's `ShareConsumer` (implicit and explicit
acknowledgement), and raw requests for what a client does not send on purpose (error codes,
ApiVersions, ListGroups, ShareGroupDescribe)."""

from __future__ import annotations

import datetime
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from helpers import (
    QUIET,
    RawConnection,
    create_topic,
    group_broker,
    transactional_producer,
    unique,
)
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v9.request import JoinGroupRequestProtocol
from kio.schema.share_acknowledge.v1.request import AcknowledgementBatch as AckBatchV1
from kio.schema.share_acknowledge.v1.request import AcknowledgePartition, AcknowledgeTopic
from kio.schema.share_fetch.v1.request import AcknowledgementBatch, FetchPartition, FetchTopic

from logbus.testing import BrokerProcess

HEARTBEAT, DESCRIBE, SHARE_FETCH, SHARE_ACK = 76, 77, 78, 79
LOCK_MS = 1500  # the lock of the groups that test its expiry (a group config)
MAX_LOCKS = 100
CONFIG = {"group.share.min.record.lock.duration.ms": "1000", "group.share.min.heartbeat.interval.ms": "100",
          "group.share.heartbeat.interval.ms": "500", "offsets.topic.num.partitions": "1",
          "group.share.delivery.count.limit": "2", "group.share.partition.max.record.locks": str(MAX_LOCKS)}


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with group_broker(CONFIG, HEARTBEAT) as process:
        yield process


def new_group(bootstrap: str, **configs: str) -> str:
    """A share group id with group configs (share.auto.offset.reset=earliest unless given)."""
    group = unique("share")
    entries = [ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
               for name, value in {"share_auto_offset_reset": "earliest", **configs}.items()]
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(10)
    return group


def share_consumer(bootstrap: str, group: str, topic: str, **config: Any) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET,
                              **{k.replace("_", "."): v for k, v in config.items()}})
    consumer.subscribe([topic])
    return consumer


def produce(bootstrap: str, topic: str, values: Iterable[bytes], partitions: int, per_batch: int = 5) -> None:
    """Each `per_batch` values to a partition in turn, flushed, so that the log holds many small batches."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **QUIET})
    for number, value in enumerate(values):
        producer.produce(topic, value=value, partition=(number // per_batch) % partitions)
        if number % per_batch == per_batch - 1:
            assert producer.flush(10) == 0
    assert producer.flush(10) == 0


Delivered = list[tuple[int, int, bytes]]  # partition, offset, value


def poll_until(consumers: list[ShareConsumer], done: Callable[[list[Delivered]], bool], timeout: float = 30.0,
               on_message: Callable[[ShareConsumer, Any], None] | None = None) -> list[Delivered]:
    """Poll the consumers in turn until `done` says so with what each received."""
    received: list[Delivered] = [[] for _ in consumers]
    deadline = time.monotonic() + timeout
    while not done(received):
        assert time.monotonic() < deadline, f"timed out; received {received}"
        for consumer, mine in zip(consumers, received, strict=True):
            for message in consumer.poll(0.2):
                assert message.error() is None, message.error()
                mine.append((message.partition(), message.offset(), message.value()))
                if on_message is not None:
                    on_message(consumer, message)
    return received


def topic_id(connection: RawConnection, topic: str) -> uuid.UUID:
    reply = connection.call(3, 12, topics=None, allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False)
    return next(t.topic_id for t in reply.topics if t.name == topic)


# ---------------------------------------------------------------- librdkafka ShareConsumer


def test_consumers_share_partitions_and_each_record_is_accepted_once(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 2)
    group = new_group(broker.bootstrap)
    values = [b"r%03d" % n for n in range(120)]
    produce(broker.bootstrap, topic, values, partitions=2)
    consumers = [share_consumer(broker.bootstrap, group, topic, max_poll_records=5) for _ in range(3)]
    try:
        received = poll_until(consumers, lambda got: sum(map(len, got)) >= len(values))
        delivered = [record for mine in received for record in mine]
        assert sorted(value for _, _, value in delivered) == values  # each record once, none lost
        assert all(received), "every consumer got records"
        assert {partition for partition, _, _ in delivered} == {0, 1}
        for consumer in consumers:  # accepts what its last poll returned (implicit mode)
            assert all(error is None for error in consumer.commit_sync(10).values())
    finally:
        for consumer in consumers:
            consumer.close()
    late = share_consumer(broker.bootstrap, group, topic)
    try:
        produce(broker.bootstrap, topic, [b"after"], partitions=1)
        got = poll_until([late], lambda got: bool(got[0]))
        assert [value for _, _, value in got[0]] == [b"after"]  # every record was accepted: none comes again
    finally:
        late.close()


def test_released_record_is_redelivered_and_rejected_one_never(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 1)
    group = new_group(broker.bootstrap)
    produce(broker.bootstrap, topic, [b"release-me", b"reject-me", b"accept-me"], partitions=1, per_batch=3)
    consumer = share_consumer(broker.bootstrap, group, topic, share_acknowledgement_mode="explicit")
    decision = {b"release-me": AcknowledgeType.RELEASE, b"reject-me": AcknowledgeType.REJECT,
                b"accept-me": AcknowledgeType.ACCEPT}
    seen: list[bytes] = []

    def acknowledge(consumer: ShareConsumer, message: Any) -> None:
        seen.append(message.value())
        first = seen.count(message.value()) == 1
        consumer.acknowledge(message, decision[message.value()] if first else AcknowledgeType.ACCEPT)

    try:
        poll_until([consumer], lambda _got: seen.count(b"release-me") == 2, on_message=acknowledge)
        produce(broker.bootstrap, topic, [b"sentinel"], partitions=1)
        decision[b"sentinel"] = AcknowledgeType.ACCEPT
        poll_until([consumer], lambda _got: b"sentinel" in seen, on_message=acknowledge)
        assert consumer.commit_sync(10) is not None
        assert sorted(seen) == sorted([b"release-me", b"release-me", b"reject-me", b"accept-me", b"sentinel"])
    finally:
        consumer.close()


def test_lock_expiry_redelivers_to_another_consumer(broker: BrokerProcess) -> None:
    """A consumer that acquired records and went quiet (alive, never acknowledging) loses them to
    another member when their locks expire."""
    topic = create_topic(broker.bootstrap, 1)
    group = new_group(broker.bootstrap, share_record_lock_duration_ms=str(LOCK_MS))
    produce(broker.bootstrap, topic, [b"a", b"b", b"c"], partitions=1, per_batch=3)
    silent = share_consumer(broker.bootstrap, group, topic, share_acknowledgement_mode="explicit")
    other = share_consumer(broker.bootstrap, group, topic, share_acknowledgement_mode="explicit")
    try:
        taken = poll_until([silent], lambda got: len(got[0]) == 3)[0]
        began = time.monotonic()
        redelivered = poll_until([other], lambda got: len(got[0]) == 3,
                                 on_message=lambda c, m: c.acknowledge(m, AcknowledgeType.ACCEPT))[0]
        assert time.monotonic() - began >= LOCK_MS / 1000 * 0.5  # not before the lock (generous: timer slack)
        assert sorted(redelivered) == sorted(taken)
        other.commit_sync(10)
    finally:
        other.close()
        silent.close()


def test_closed_consumer_releases_its_records_at_once(broker: BrokerProcess) -> None:
    """close() leaves the group, then sends its acknowledgements and ends the share session (epoch
    -1): the acknowledgements still apply (leaving the group releases nothing, as in Kafka), and
    the records it did not acknowledge are released then, as Kafka's releaseSession, not after
    their locks (30 s here)."""
    topic = create_topic(broker.bootstrap, 1)
    group = new_group(broker.bootstrap)
    produce(broker.bootstrap, topic, [b"w", b"x", b"y", b"z"], partitions=1, per_batch=4)
    first = share_consumer(broker.bootstrap, group, topic, share_acknowledgement_mode="explicit")
    outcomes: list[Any] = []
    first.set_acknowledgement_commit_callback(lambda offsets, error: outcomes.append((offsets, error)))
    taken: list[Any] = []
    poll_until([first], lambda got: len(got[0]) == 4, on_message=lambda _c, m: taken.append(m))
    for message in taken[:2]:
        first.acknowledge(message, AcknowledgeType.ACCEPT)
    first.close()
    assert outcomes and all(error is None for _, error in outcomes), outcomes
    second = share_consumer(broker.bootstrap, group, topic)
    try:
        again = poll_until([second], lambda got: len(got[0]) == 2, timeout=20)[0]
        assert sorted(value for _, _, value in again) == sorted(m.value() for m in taken[2:])
    finally:
        second.close()


def test_read_committed_share_group_never_sees_aborted_records(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 1)
    committed = new_group(broker.bootstrap, share_isolation_level="read_committed")
    uncommitted = new_group(broker.bootstrap)
    producer = transactional_producer(broker.bootstrap, unique("txn"))
    for values, commit in (([b"aborted-1", b"aborted-2"], False), ([b"committed"], True), ([b"aborted-3"], False)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=value, partition=0)
        producer.flush(10)
        (producer.commit_transaction if commit else producer.abort_transaction)(10)
    produce(broker.bootstrap, topic, [b"plain"], partitions=1)
    reader = share_consumer(broker.bootstrap, committed, topic)
    everything = share_consumer(broker.bootstrap, uncommitted, topic)
    try:
        got = poll_until([reader], lambda got: any(value == b"plain" for _, _, value in got[0]))[0]
        assert [value for _, _, value in got] == [b"committed", b"plain"]
        seen = poll_until([everything], lambda got: len(got[0]) == 5)[0]  # read_uncommitted: aborted ones too
        assert sorted(value for _, _, value in seen) == [b"aborted-1", b"aborted-2", b"aborted-3", b"committed",
                                                          b"plain"]
    finally:
        reader.close()
        everything.close()


# A share consumer in its own process: acquires `count` records, prints their offsets, never acknowledges.
HOLDER = """
import sys, time
from confluent_kafka import ShareConsumer
bootstrap, group, topic, count = sys.argv[1:5]
consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0,
                          "share.acknowledgement.mode": "explicit"})
consumer.subscribe([topic])
offsets = []
deadline = time.monotonic() + 60
while len(offsets) < int(count) and time.monotonic() < deadline:
    offsets += [m.offset() for m in consumer.poll(0.2) if m.error() is None]
print(" ".join(map(str, sorted(offsets))), flush=True)
time.sleep(600)
"""


def test_killed_consumer_records_are_redelivered(broker: BrokerProcess) -> None:
    """kill -9 of a consumer holding acquired records: its connection closes, its share session is
    evicted and its records released (Kafka's ShareSessionCache on a disconnect), long before their
    30 s locks expire; another member gets them."""
    topic = create_topic(broker.bootstrap, 1)
    group = new_group(broker.bootstrap)
    produce(broker.bootstrap, topic, [b"p", b"q", b"r"], partitions=1, per_batch=3)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, broker.bootstrap, group, topic, "3"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        held = holder.stdout.readline().split()
        assert held == ["0", "1", "2"], held
    finally:
        holder.kill()
        holder.wait(10)
    other = share_consumer(broker.bootstrap, group, topic)
    try:
        got = poll_until([other], lambda got: len(got[0]) == 3, timeout=20)[0]
        assert sorted(offset for _, offset, _ in got) == [0, 1, 2]
    finally:
        other.close()


# ---------------------------------------------------------------- raw requests


def test_api_versions_advertise_kafka_4_2_share_ranges(broker: BrokerProcess) -> None:
    with RawConnection(broker.bootstrap) as connection:
        reply = connection.call(18, 3, client_software_name="t", client_software_version="1")
    ranges = {k.api_key: (k.min_version, k.max_version) for k in reply.api_keys}
    assert {key: ranges[key] for key in (76, 77, 78, 79)} == {76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2)}


def test_heartbeat_errors_list_and_describe(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 2)
    group, member = unique("share"), unique("m")
    with RawConnection(broker.bootstrap) as connection:
        def beat(**fields: Any) -> Any:
            return connection.call(HEARTBEAT, 1, **{"group_id": group, "member_id": member, **fields})
        assert beat(member_epoch=0).error_code == ErrorCode.invalid_request  # no topics on a join
        assert beat(member_id="", member_epoch=0, subscribed_topic_names=(topic,)).error_code == \
            ErrorCode.invalid_request
        assert beat(member_epoch=3).error_code == ErrorCode.unknown_member_id
        joined = beat(member_epoch=0, subscribed_topic_names=(topic,))
        assert joined.error_code == ErrorCode.none and joined.member_epoch >= 1
        [assigned] = joined.assignment.topic_partitions
        assert assigned.topic_id == topic_id(connection, topic) and sorted(assigned.partitions) == [0, 1]
        assert beat(member_epoch=joined.member_epoch + 5).error_code == ErrorCode.fenced_member_epoch
        listed = connection.call(16, 5, states_filter=(), types_filter=("share",))
        assert [(g.group_id, g.group_type, g.group_state, g.protocol_type) for g in listed.groups
                if g.group_id == group] == [(group, "share", "Stable", "share")]
        [described] = connection.call(DESCRIBE, 1, group_ids=(group,), include_authorized_operations=False).groups
        assert (described.error_code, described.group_state, described.assignor_name) == \
            (ErrorCode.none, "Stable", "simple")
        assert [(m.member_id, m.subscribed_topic_names) for m in described.members] == [(member, (topic,))]
        # a consumer group (KIP-848) may not take the share group's id
        consumer = connection.call(68, 1, group_id=group, member_id=unique("c"), member_epoch=0,
                                   rebalance_timeout=datetime.timedelta(seconds=30),
                                   subscribed_topic_names=(topic,), topic_partitions=())
        assert consumer.error_code == ErrorCode.group_id_not_found
        classic = connection.call(11, 9, group_id=group, session_timeout=datetime.timedelta(seconds=10),
                                  rebalance_timeout=datetime.timedelta(seconds=10), member_id="",
                                  group_instance_id=None, protocol_type="consumer", reason=None,
                                  protocols=(JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01"),))
        assert classic.error_code == ErrorCode.inconsistent_group_protocol
        assert connection.call(42, 2, groups_names=(group,)).results[0].error_code == ErrorCode.non_empty_group
        left = beat(member_epoch=-1)
        assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)
        [described] = connection.call(DESCRIBE, 1, group_ids=(group,), include_authorized_operations=False).groups
        assert (described.group_state, described.members) == ("Empty", ())
        [unknown] = connection.call(DESCRIBE, 1, group_ids=(unique("nope"),),
                                    include_authorized_operations=False).groups
        assert unknown.error_code == ErrorCode.group_id_not_found
        assert connection.call(42, 2, groups_names=(group,)).results[0].error_code == ErrorCode.none
        listed = connection.call(16, 5, states_filter=(), types_filter=())
        assert group not in [g.group_id for g in listed.groups]
        # an empty share group gives its id up to a consumer group
        beat(member_epoch=0, subscribed_topic_names=(topic,))
        beat(member_epoch=-1)
        consumer = connection.call(68, 1, group_id=group, member_id=unique("c"), member_epoch=0,
                                   rebalance_timeout=datetime.timedelta(seconds=30),
                                   subscribed_topic_names=(topic,), topic_partitions=())
        assert consumer.error_code == ErrorCode.none
        listed = connection.call(16, 5, states_filter=(), types_filter=())
        assert [g.group_type for g in listed.groups if g.group_id == group] == ["consumer"]


def share_fetch(connection: RawConnection, group: str, member: str, epoch: int, topics: tuple = (),
                version: int = 1, **fields: Any) -> Any:
    request = {"group_id": group, "member_id": member, "share_session_epoch": epoch,
               "max_wait": datetime.timedelta(milliseconds=200), "min_bytes": 1,
               "max_records": 100, "batch_size": 100, "topics": topics, "forgotten_topics_data": (), **fields}
    return connection.call(SHARE_FETCH, version, **request)


def test_share_sessions_and_acknowledgement_errors(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 1)
    group = new_group(broker.bootstrap)
    produce(broker.bootstrap, topic, [b"one", b"two"], partitions=1, per_batch=2)
    member = unique("m")
    with RawConnection(broker.bootstrap) as connection:
        tid = topic_id(connection, topic)
        fetch_all = (FetchTopic(topic_id=tid, partitions=(FetchPartition(partition_index=0,
                                                                         acknowledgement_batches=()),)),)

        def with_ack(first: int, last: int, kind: int) -> tuple:
            batch = AcknowledgementBatch(first_offset=first, last_offset=last, acknowledge_types=(kind,))
            return (FetchTopic(topic_id=tid, partitions=(FetchPartition(partition_index=0,
                                                                        acknowledgement_batches=(batch,)),)),)

        assert share_fetch(connection, group, member, 1, fetch_all).error_code == ErrorCode.share_session_not_found
        assert share_fetch(connection, group, member, 0, with_ack(0, 0, 1)).error_code == ErrorCode.invalid_request
        opened = share_fetch(connection, group, member, 0, fetch_all)
        assert opened.error_code == ErrorCode.none
        [answer] = opened.responses[0].partitions
        assert [(r.first_offset, r.last_offset, r.delivery_count) for r in answer.acquired_records] == [(0, 1, 1)]
        assert opened.acquisition_lock_timeout.total_seconds() == 30
        assert share_fetch(connection, group, member, 5, fetch_all).error_code == ErrorCode.invalid_share_session_epoch
        # another member may not acknowledge this one's records
        other = unique("m")
        assert share_fetch(connection, group, other, 0, fetch_all).error_code == ErrorCode.none
        [wrong] = share_fetch(connection, group, other, 1, with_ack(0, 0, 1)).responses[0].partitions
        assert wrong.acknowledge_error_code == ErrorCode.invalid_record_state
        # accept 0, release 1 on the fetch: 1 comes back at once with delivery count 2
        again = share_fetch(connection, group, member, 1, with_ack(0, 0, 1))
        [answer] = again.responses[0].partitions
        assert answer.acknowledge_error_code == ErrorCode.none
        ack = connection.call(SHARE_ACK, 1, group_id=group, member_id=member, share_session_epoch=2, topics=(
            AcknowledgeTopic(topic_id=tid, partitions=(AcknowledgePartition(partition_index=0, acknowledgement_batches=(
                AckBatchV1(first_offset=1, last_offset=1, acknowledge_types=(2,)),)),)),))
        assert ack.error_code == ErrorCode.none and ack.responses[0].partitions[0].error_code == ErrorCode.none
        [answer] = share_fetch(connection, group, member, 3, ()).responses[0].partitions
        assert [(r.first_offset, r.last_offset, r.delivery_count) for r in answer.acquired_records] == [(1, 1, 2)]
        # closing the session releases what the member holds: at its second delivery (the limit
        # here) it is given up, never delivered again
        closed = connection.call(SHARE_ACK, 1, group_id=group, member_id=member, share_session_epoch=-1, topics=())
        assert closed.error_code == ErrorCode.none
        assert share_fetch(connection, group, other, 2, ()).responses == ()
        assert connection.call(SHARE_ACK, 1, group_id=group, member_id=member, share_session_epoch=0,
                               topics=()).error_code == ErrorCode.invalid_share_session_epoch


def test_record_locks_bound_what_a_partition_has_in_flight(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 1)
    group = new_group(broker.bootstrap)
    produce(broker.bootstrap, topic, [b"%d" % n for n in range(MAX_LOCKS + 20)], partitions=1, per_batch=10)
    first, second = unique("m"), unique("m")
    with RawConnection(broker.bootstrap) as connection:
        tid = topic_id(connection, topic)
        fetch_all = (FetchTopic(topic_id=tid, partitions=(FetchPartition(partition_index=0,
                                                                         acknowledgement_batches=()),)),)
        [answer] = share_fetch(connection, group, first, 0, fetch_all, max_records=1000).responses[0].partitions
        assert [(r.first_offset, r.last_offset) for r in answer.acquired_records] == [(0, MAX_LOCKS - 1)]
        [answer] = share_fetch(connection, group, second, 0, fetch_all).responses[0].partitions
        assert answer.acquired_records == ()  # the rest waits until records in flight are done
        accept = (FetchTopic(topic_id=tid, partitions=(FetchPartition(partition_index=0, acknowledgement_batches=(
            AcknowledgementBatch(first_offset=0, last_offset=9, acknowledge_types=(1,)),)),)),)
        assert share_fetch(connection, group, first, 1, accept, max_records=0).responses[0].partitions[0] \
            .acknowledge_error_code == ErrorCode.none
        [answer] = share_fetch(connection, group, second, 1, ()).responses[0].partitions
        assert [(r.first_offset, r.last_offset) for r in answer.acquired_records] == [(MAX_LOCKS, MAX_LOCKS + 9)]

"""The share-group admin APIs against a real broker with librdkafka `ShareConsumer` members:
DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92), as
Kafka 4.2 serves them (raw requests: confluent-kafka's admin client has no share-group calls)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from helpers import RawConnection, wait_until
from kio.schema.alter_share_group_offsets.v0.request import (
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
)
from kio.schema.delete_share_group_offsets.v0.request import DeleteShareGroupOffsetsRequestTopic
from kio.schema.describe_share_group_offsets.v1.request import (
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
)
from kio.schema.errors import ErrorCode
from test_share_groups import CONFIG, create_topic, join_when_loaded, new_group, poll_until, produce, share_consumer

from logbus.testing import BrokerProcess, running_broker

DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS, HEARTBEAT, DELETE_GROUPS = 90, 91, 92, 76, 42


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker(config=CONFIG) as process:
        with RawConnection(process.bootstrap) as connection:
            join_when_loaded(connection, "warm-up", "m", "no-such-topic")
        yield process


def describe(connection: RawConnection, group: str, topics: dict[str, list[int]] | None = None) -> Any:
    wanted = None if topics is None else tuple(DescribeShareGroupOffsetsRequestTopic(topic_name=name, partitions=p)
                                               for name, p in topics.items())
    [described] = connection.call(DESCRIBE_OFFSETS, 1, groups=(
        DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=wanted),)).groups
    return described


def offsets(described: Any) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (start offset, lag) of a described group."""
    return {(t.topic_name, p.partition_index): (p.start_offset, p.lag) for t in described.topics for p in t.partitions}


def alter(connection: RawConnection, group: str, topic: str, starts: dict[int, int]) -> Any:
    return connection.call(ALTER_OFFSETS, 0, group_id=group, topics=(AlterShareGroupOffsetsRequestTopic(
        topic_name=topic, partitions=tuple(AlterShareGroupOffsetsRequestPartition(partition_index=index,
                                                                                  start_offset=start)
                                           for index, start in starts.items())),))


def delete_offsets(connection: RawConnection, group: str, *topics: str) -> Any:
    return connection.call(DELETE_OFFSETS, 0, group_id=group,
                           topics=tuple(DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics))


def consume_all(bootstrap: str, group: str, topic: str, count: int) -> list[tuple[int, int, bytes]]:
    """What one ShareConsumer gets until it has `count` records (accepted implicitly, then closed)."""
    consumer = share_consumer(bootstrap, group, topic)
    try:
        [received] = poll_until([consumer], lambda got: len(got[0]) >= count)
        consumer.commit_sync()
    finally:
        consumer.close()
    return received


def test_api_versions_advertise_the_admin_apis(broker: BrokerProcess) -> None:
    with RawConnection(broker.bootstrap) as connection:
        reply = connection.call(18, 3, client_software_name="t", client_software_version="1")
    ranges = {k.api_key: (k.min_version, k.max_version) for k in reply.api_keys}
    assert {key: ranges.get(key) for key in (90, 91, 92)} == {90: (0, 1), 91: (0, 0), 92: (0, 0)}


def test_describe_alter_and_delete_share_group_offsets(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 2)
    produce(broker.bootstrap, topic, [b"v%d" % n for n in range(20)], partitions=2)  # 10 on each partition
    group = new_group(broker.bootstrap)
    assert len(consume_all(broker.bootstrap, group, topic, 20)) == 20
    with RawConnection(broker.bootstrap) as connection:
        done = wait_until(lambda: (d := describe(connection, group)) and offsets(d) == {
            (topic, 0): (10, 0), (topic, 1): (10, 0)} and d, 30, message="every record delivered")
        assert done.error_code == ErrorCode.none and done.topics[0].topic_id is not None
        # a member in the group: no changes (the group as a whole answers)
        joined = connection.call(HEARTBEAT, 1, group_id=group, member_id="admin-m", member_epoch=0,
                                 subscribed_topic_names=(topic,))
        assert joined.error_code == ErrorCode.none
        assert alter(connection, group, topic, {0: 4}).error_code == ErrorCode.non_empty_group
        assert delete_offsets(connection, group, topic).error_code == ErrorCode.non_empty_group
        assert connection.call(DELETE_GROUPS, 2, groups_names=(group,)).results[0].error_code == \
            ErrorCode.non_empty_group
        connection.call(HEARTBEAT, 1, group_id=group, member_id="admin-m", member_epoch=-1)
        # empty: partition 0 starts over at 4, an unknown partition is refused on its own
        altered = alter(connection, group, topic, {0: 4, 7: 0})
        assert altered.error_code == ErrorCode.none
        assert [(p.partition_index, p.error_code) for p in altered.responses[0].partitions] == [
            (0, ErrorCode.none), (7, ErrorCode.unknown_topic_or_partition)]
        assert offsets(describe(connection, group, {topic: [0, 1, 5]})) == {
            (topic, 0): (4, 6), (topic, 1): (10, 0), (topic, 5): (-1, -1)}
    redelivered = consume_all(broker.bootstrap, group, topic, 6)
    assert sorted((partition, offset) for partition, offset, _ in redelivered) == [(0, n) for n in range(4, 10)]
    with RawConnection(broker.bootstrap) as connection:
        deleted = delete_offsets(connection, group, topic, "no-such-topic")
        assert deleted.error_code == ErrorCode.none
        assert [(t.topic_name, t.error_code) for t in deleted.responses] == [
            (topic, ErrorCode.none), ("no-such-topic", ErrorCode.unknown_topic_or_partition)]
        assert describe(connection, group).topics == ()
        assert offsets(describe(connection, group, {topic: [0]})) == {(topic, 0): (-1, -1)}
        again = delete_offsets(connection, group, topic).responses[0]
        assert again.error_code == ErrorCode.unknown_topic_or_partition  # no state left to delete
    # share.auto.offset.reset=earliest decides again: every record is delivered again
    assert len(consume_all(broker.bootstrap, group, topic, 20)) == 20


def test_unknown_groups_and_groups_of_another_type(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, 1)
    with RawConnection(broker.bootstrap) as connection:
        assert alter(connection, "no-such-share-group", topic, {0: 0}).error_code == ErrorCode.group_id_not_found
        assert delete_offsets(connection, "no-such-share-group", topic).error_code == ErrorCode.group_id_not_found
        assert alter(connection, "", topic, {0: 0}).error_code == ErrorCode.invalid_group_id
        unknown = describe(connection, "no-such-share-group", {topic: [0]})  # as Kafka: no state, no error
        assert (unknown.error_code, offsets(unknown)) == (ErrorCode.none, {(topic, 0): (-1, -1)})
        assert describe(connection, "no-such-share-group", {}).topics == ()

"""Share groups (KIP-932) survive their brokers: a share-partition's state (which records were
accepted) lives in `__share_group_state` through the share coordinator, so a broker restarted
(SIGTERM, SIGKILL) or, in a 3-broker cluster, the data partition's leader or the share
coordinator's broker killed, neither delivers an accepted record again nor loses one. Real
brokers, librdkafka's `ShareConsumer` (implicit acknowledgement, committed after every poll).

A record counts as accepted once `commit_sync` answered its partition with no error; one whose
commit failed (the broker went away meanwhile) may or may not have been accepted, so it may come
again, and need not."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ElectionType,
    KafkaError,
    KafkaException,
    Message,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from helpers import QUIET, RawConnection, produce_all, wait_until
from kio.schema.delete_share_group_state.v0.request import DeleteStateData as DeleteTopic
from kio.schema.delete_share_group_state.v0.request import PartitionData as DeletePartition
from kio.schema.errors import ErrorCode
from kio.schema.initialize_share_group_state.v0.request import InitializeStateData as InitTopic
from kio.schema.initialize_share_group_state.v0.request import PartitionData as InitPartition
from kio.schema.read_share_group_state_summary.v1.request import PartitionData as SummaryPartition
from kio.schema.read_share_group_state_summary.v1.request import ReadStateSummaryData as SummaryTopic
from kio.schema.write_share_group_state.v0.request import PartitionData as WritePartition
from kio.schema.write_share_group_state.v0.request import WriteStateData as WriteTopic

from logbus.coordinator.share_records import topic_id_text
from logbus.testing import BrokerProcess, Cluster, running_broker, running_cluster

CONFIG = {"group.share.min.heartbeat.interval.ms": "100", "group.share.heartbeat.interval.ms": "500",
          "offsets.topic.num.partitions": "1", "share.coordinator.state.topic.num.partitions": "3",
          "share.coordinator.snapshot.update.records.per.snapshot": "5",
          "share.coordinator.state.topic.segment.bytes": "10485760"}
DEADLINE_S = 90  # a broker restart or a failover (ZooKeeper session 6 s) on a loaded machine, with room


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, replicas: int) -> str:
    name = unique("topic")
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(name, 1, replicas, config={"min.insync.replicas": "1"})])[name].result(30)
    return name


def new_group(bootstrap: str, name: str | None = None) -> str:
    """A share group reading from the earliest record (a group config)."""
    group = name or unique("share")
    entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.incremental_alter_configs([resource])[resource].result(30)
    return group


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """Idempotently (on a loaded machine a request may time out and be retried: no record twice)."""
    produce_all(bootstrap, topic, [(None, value) for value in values], **{"enable.idempotence": True})


class Tally:
    """What a share consumer received, and which records are accepted for sure."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
        self.consumer.subscribe([topic])
        self.accepted: set[bytes] = set()
        self.uncertain: set[bytes] = set()  # their commit failed: accepted or not
        self.delivered: list[bytes] = []

    def poll(self, commit: bool = True) -> None:
        """One poll, then commit what it returned (unless not `commit`: then the next poll may
        accept it, or not); an accepted record coming again fails the test."""
        values = [m.value() for m in self.consumer.poll(0.3) if m.error() is None]
        again = self.accepted.intersection(values)
        assert not again, f"accepted records delivered again: {sorted(again)}"
        self.delivered += values
        if not values or not commit:
            self.uncertain.update(values)
            return
        try:
            failed = any(error is not None for error in self.consumer.commit_sync(15).values())
        except KafkaException:
            failed = True
        (self.uncertain if failed else self.accepted).update(values)
        if not failed:
            self.uncertain.difference_update(values)

    def poll_until(self, done: Callable[[], bool], timeout: float = DEADLINE_S, commit: bool = True) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"timed out: {len(self.accepted)} accepted"
            self.poll(commit)

    def feed(self, bootstrap: str, topic: str, values: list[bytes], per_round: int = 10) -> None:
        """Produce `values` a few at a time, each round polled until accepted (librdkafka hands a
        poll all it fetched: small rounds make many acknowledgements, each one write)."""
        for first in range(0, len(values), per_round):
            produce(bootstrap, topic, values[first:first + per_round])
            self.poll_until(accepted_all(self, values[first:first + per_round]))

    def take_without_commit(self, bootstrap: str, topic: str, values: list[bytes]) -> None:
        """Produce `values` and receive them, not acknowledged (in flight when a broker dies)."""
        produce(bootstrap, topic, values)
        self.poll_until(lambda: set(values) <= set(self.delivered), commit=False)

    def check_complete(self, values: list[bytes]) -> None:
        """Every record delivered, and accepted (or its commit failed)."""
        assert set(self.delivered) == set(values), "a record was lost"
        assert self.accepted | self.uncertain == set(values)

    def close(self) -> None:
        self.consumer.close()


def accepted_all(tally: Tally, values: list[bytes]) -> Callable[[], bool]:
    return lambda: set(values) <= tally.accepted | tally.uncertain


def test_a_restarted_broker_keeps_every_acknowledgement() -> None:
    with running_broker(config=CONFIG) as broker:
        topic = create_topic(broker.bootstrap, 1)
        group = new_group(broker.bootstrap)
        values = [b"v%04d" % n for n in range(100)]
        tally = Tally(broker.bootstrap, group, topic)
        try:
            tally.feed(broker.bootstrap, topic, values[:30])
            tally.take_without_commit(broker.bootstrap, topic, values[30:40])
            broker.stop()  # SIGTERM: a clean shutdown
            broker.restart()
            tally.feed(broker.bootstrap, topic, values[40:70])
            tally.take_without_commit(broker.bootstrap, topic, values[70:80])
            broker.kill()  # SIGKILL: a crash
            broker.restart()
            tally.feed(broker.bootstrap, topic, values[80:])
            tally.poll_until(accepted_all(tally, values))
            tally.check_complete(values)
        finally:
            tally.close()
        _assert_nothing_more(broker.bootstrap, group, topic)
        _assert_state_topic(broker.bootstrap)


def state_topic_starts(bootstrap: str) -> list[int]:
    """The log start offset of each `__share_group_state` partition (ListOffsets earliest)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("watermarks"), **QUIET})
    try:
        return [consumer.get_watermark_offsets(TopicPartition("__share_group_state", index), timeout=30)[0]
                for index in range(3)]
    finally:
        consumer.close()


def test_the_state_topic_is_pruned_below_the_oldest_snapshot_and_still_loads() -> None:
    """The share coordinator deletes the records its newer snapshots overrode (its prune job,
    every 200 ms here), and a broker restarted afterwards loads the state from what is left:
    nothing accepted comes again, nothing is lost."""
    with running_broker(config={**CONFIG, "share.coordinator.state.topic.prune.interval.ms": "200"}) as broker:
        topic = create_topic(broker.bootstrap, 1)
        group = new_group(broker.bootstrap)
        values = [b"p%04d" % n for n in range(60)]
        tally = Tally(broker.bootstrap, group, topic)
        try:
            tally.feed(broker.bootstrap, topic, values[:40], per_round=4)  # 10+ writes: two snapshots or more
            pruned = wait_until(lambda: max(state_topic_starts(broker.bootstrap)), timeout=DEADLINE_S,
                                message="a __share_group_state partition pruned")
            tally.take_without_commit(broker.bootstrap, topic, values[40:50])
            broker.stop()
            broker.restart()
            assert max(state_topic_starts(broker.bootstrap)) >= pruned  # the load began past the pruned records
            tally.feed(broker.bootstrap, topic, values[50:])
            tally.poll_until(accepted_all(tally, values))
            tally.check_complete(values)
        finally:
            tally.close()
        _assert_nothing_more(broker.bootstrap, group, topic)


def delete_group(bootstrap: str, group: str) -> bool:
    """DeleteGroups; False while the coordinator loads (which librdkafka does not retry)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    try:
        admin.delete_consumer_groups([group])[group].result(30)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.COORDINATOR_LOAD_IN_PROGRESS:
            raise
        return False
    return True


def test_deleting_a_share_group_after_a_restart_deletes_its_state() -> None:
    """The topics whose share state a group may have live in `__consumer_offsets`
    (ShareGroupMetadata, ShareGroupStatePartitionMetadata), so that after a coordinator restart
    DeleteGroups deletes that state too, and the same group id starts afresh."""
    with running_broker(config=CONFIG) as broker:
        topic = create_topic(broker.bootstrap, 1)
        group = new_group(broker.bootstrap)
        values = [b"r%d" % n for n in range(5)]
        tally = Tally(broker.bootstrap, group, topic)
        try:
            tally.feed(broker.bootstrap, topic, values)
        finally:
            tally.close()
        kinds = {m.key()[:2] for m in _read_all(broker.bootstrap, "__consumer_offsets", 1)}
        assert {b"\x00\x0b", b"\x00\x0f"} <= kinds  # ShareGroupMetadata, ShareGroupStatePartitionMetadata
        broker.stop()
        broker.restart()
        wait_until(lambda: delete_group(broker.bootstrap, group), timeout=DEADLINE_S, message="the group deleted")
        with RawConnection(broker.bootstrap) as connection:
            metadata = connection.call(3, 12, topics=None, allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False)
            topic_id = next(t.topic_id for t in metadata.topics if t.name == topic)
            assert summary(connection, group, topic_id).start_offset == -1  # its state deleted
        again = Tally(broker.bootstrap, group, topic)  # the same id starts afresh, at the earliest record
        try:
            again.poll_until(lambda: set(values) <= set(again.delivered))
        finally:
            again.close()


def _assert_state_topic(bootstrap: str) -> None:
    """`__share_group_state` as its keys say (replicas and min.isr capped by the one broker), not
    compacted, holding a snapshot every 5 updates of the share-partition's state."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    metadata = admin.list_topics(timeout=10).topics["__share_group_state"]
    assert len(metadata.partitions) == 3
    assert {len(p.replicas) for p in metadata.partitions.values()} == {1}
    resource = ConfigResource("topic", "__share_group_state")
    configs = admin.describe_configs([resource])[resource].result(10)
    assert {name: configs[name].value for name in ("cleanup.policy", "retention.ms", "segment.bytes",
                                                   "min.insync.replicas")} == {
        "cleanup.policy": "delete", "retention.ms": "-1", "segment.bytes": "10485760", "min.insync.replicas": "1"}
    kinds = [message.key()[:2] for message in _read_all(bootstrap, "__share_group_state", 3)]
    assert kinds.count(b"\x00\x00") >= 2 and kinds.count(b"\x00\x01") >= 4  # ShareSnapshot, ShareUpdate


def _read_all(bootstrap: str, topic: str, partitions: int) -> list[Message]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "enable.auto.commit": False,
                         "enable.partition.eof": True, **QUIET})
    consumer.assign([TopicPartition(topic, index, OFFSET_BEGINNING) for index in range(partitions)])
    messages, ended = [], set()
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(ended) < partitions:
            assert time.monotonic() < deadline, "the state topic was not read to its end"
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                ended.add(message.partition())
            else:
                messages.append(message)
    finally:
        consumer.close()
    return messages


def _assert_nothing_more(bootstrap: str, group: str, topic: str) -> None:
    """A record produced now is the next (and only) one the group gets: everything before it is done."""
    produce(bootstrap, topic, [b"last"])
    late = Tally(bootstrap, group, topic)
    try:
        late.poll_until(lambda: bool(late.delivered))
        assert set(late.delivered) == {b"last"}
    finally:
        late.close()


# ---------------------------------------------------------------- a cluster


def leader_of(bootstrap: str, topic: str) -> int:
    with RawConnection(bootstrap.split(",")[0]) as connection:
        reply = connection.call(3, 12, topics=None, allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False)
    return next(t.partitions[0].leader_id for t in reply.topics if t.name == topic)


def share_coordinator(bootstrap: str, group: str, topic: str) -> int | None:
    """The broker FindCoordinator (key type 2) names for the group's share-partition of `topic`-0."""
    with RawConnection(bootstrap.split(",")[0]) as connection:
        reply = connection.call(3, 12, topics=None, allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False)
        topic_id = next(t.topic_id for t in reply.topics if t.name == topic)
        found = connection.call(10, 6, key_type=2, coordinator_keys=(f"{group}:{topic_id_text(topic_id)}:0",))
    [answer] = found.coordinators
    return answer.node_id if answer.error_code == ErrorCode.none else None


def group_coordinated_apart(cluster: Cluster, topic: str, leader: int) -> str:
    """A group whose share coordinator (for `topic`-0) is not `leader`: killing one leaves the other."""
    def found() -> str | None:
        group = unique("share")
        coordinator = share_coordinator(cluster.bootstrap, group, topic)
        return group if coordinator is not None and coordinator != leader else None
    return wait_until(found, DEADLINE_S, interval=0.2, message="a group coordinated apart from the leader")


def restart(cluster: Cluster, broker: BrokerProcess, topic: str, group: str, leader: int, coordinator: int) -> None:
    """Start `broker` again and move leaderships back to the preferred replicas: the data partition
    led by `leader`, the share-partition coordinated by `coordinator` (a different broker)."""
    broker.restart()
    cluster.wait_ready([topic], timeout=DEADLINE_S)

    def preferred() -> bool:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
        with contextlib.suppress(KafkaException):
            admin.elect_leaders(ElectionType.PREFERRED, None).result(10)
        return leader_of(cluster.bootstrap, topic) == leader and \
            share_coordinator(cluster.bootstrap, group, topic) == coordinator
    wait_until(preferred, DEADLINE_S, interval=0.5, message="the preferred leaders back")


def test_killing_the_partition_leader_or_the_share_coordinator_keeps_acknowledgements() -> None:
    config = {**CONFIG, "share.coordinator.state.topic.replication.factor": "3",
              "offsets.topic.replication.factor": "3", "share.coordinator.state.topic.min.isr": "1"}
    with running_cluster(3, config) as cluster:
        topic = create_topic(cluster.bootstrap, 3)
        cluster.wait_ready([topic], timeout=DEADLINE_S)
        leader = leader_of(cluster.bootstrap, topic)
        group = new_group(cluster.bootstrap, group_coordinated_apart(cluster, topic, leader))
        coordinator = share_coordinator(cluster.bootstrap, group, topic)
        assert coordinator is not None
        values = [b"c%04d" % n for n in range(100)]
        tally = Tally(cluster.bootstrap, group, topic)
        try:
            tally.feed(cluster.bootstrap, topic, values[:20])
            tally.take_without_commit(cluster.bootstrap, topic, values[20:30])
            cluster.brokers[leader].kill()  # the data partition's leader (not the share coordinator)
            tally.feed(cluster.bootstrap, topic, values[30:50])
            restart(cluster, cluster.brokers[leader], topic, group, leader, coordinator)
            tally.feed(cluster.bootstrap, topic, values[50:60])
            tally.take_without_commit(cluster.bootstrap, topic, values[60:70])
            cluster.brokers[coordinator].kill()  # the share coordinator's broker (not the data leader)
            tally.feed(cluster.bootstrap, topic, values[70:90])
            restart(cluster, cluster.brokers[coordinator], topic, group, leader, coordinator)
            tally.feed(cluster.bootstrap, topic, values[90:])
            tally.poll_until(accepted_all(tally, values))
            tally.check_complete(values)
        finally:
            tally.close()
        _assert_nothing_more(cluster.bootstrap, group, topic)


# ---------------------------------------------------------------- the share coordinator's RPCs


def summary(connection: RawConnection, group: str, topic_id: uuid.UUID) -> Any:
    reply = connection.call(87, 1, group_id=group, topics=(
        SummaryTopic(topic_id=topic_id, partitions=(SummaryPartition(partition=0, leader_epoch=-1),)),))
    [result] = reply.results
    [partition] = result.partitions
    return partition


def test_share_coordinator_rpcs_and_a_deleted_groups_state() -> None:
    with running_broker(config=CONFIG) as broker, RawConnection(broker.bootstrap) as connection:
        versions = connection.call(18, 3, client_software_name="t", client_software_version="1")
        ranges = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert {key: ranges[key] for key in range(83, 88)} == {83: (0, 0), 84: (0, 0), 85: (0, 1), 86: (0, 0),
                                                               87: (0, 1)}
        topic = create_topic(broker.bootstrap, 1)
        group = new_group(broker.bootstrap)
        values = [b"d%d" % n for n in range(5)]  # (and d5 below)
        tally = Tally(broker.bootstrap, group, topic)
        try:
            tally.feed(broker.bootstrap, topic, values)
        finally:
            tally.close()
        metadata = connection.call(3, 12, topics=None, allow_auto_topic_creation=False,
                                   include_topic_authorized_operations=False)
        topic_id = next(t.topic_id for t in metadata.topics if t.name == topic)
        found = connection.call(10, 6, key_type=2, coordinator_keys=(f"{group}:{topic_id_text(topic_id)}:0", "bad"))
        assert [(c.error_code, c.node_id) for c in found.coordinators] == [
            (ErrorCode.none, 0), (ErrorCode.invalid_request, -1)]
        state = summary(connection, group, topic_id)
        assert (state.error_code, state.state_epoch, state.leader_epoch, state.start_offset) == (ErrorCode.none, 0, 0,
                                                                                                 5)
        # a state initialized again (as an offset reset does, the group empty): a new session reads it
        reset = connection.call(83, 0, group_id=group, topics=(InitTopic(topic_id=topic_id, partitions=(
            InitPartition(partition=0, state_epoch=1, start_offset=2),)),))
        assert reset.results[0].partitions[0].error_code == ErrorCode.none
        rewound = Tally(broker.bootstrap, group, topic)
        try:
            rewound.poll_until(accepted_all(rewound, values[2:]))
            assert sorted(rewound.delivered) == values[2:]
        finally:
            rewound.close()
        assert summary(connection, group, topic_id).state_epoch == 1
        # an acknowledgement whose write fails (the state deleted under it) changes nothing
        held = Tally(broker.bootstrap, group, topic)
        try:
            held.take_without_commit(broker.bootstrap, topic, [b"d5"])
            deleted = connection.call(86, 0, group_id=group, topics=(DeleteTopic(topic_id=topic_id, partitions=(
                DeletePartition(partition=0),)),))
            assert deleted.results[0].partitions[0].error_code == ErrorCode.none
            results = held.consumer.commit_sync(15)
            assert [error for error in results.values() if error is not None], results
            held.poll_until(lambda: held.delivered.count(b"d5") == 2)  # not accepted: delivered again
        finally:
            held.close()
        unknown = connection.call(85, 0, group_id=unique("none"), topics=(WriteTopic(topic_id=topic_id, partitions=(
            WritePartition(partition=0, state_epoch=0, leader_epoch=0, start_offset=0, state_batches=()),)),))
        assert unknown.results[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
        admin.delete_consumer_groups([group])[group].result(30)
        assert summary(connection, group, topic_id).start_offset == -1  # never initialized, as far as it knows
        again = Tally(broker.bootstrap, group, topic)  # the same id starts afresh, at the earliest record
        try:
            again.poll_until(lambda: set(values) <= set(again.delivered))
        finally:
            again.close()

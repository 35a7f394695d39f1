"""KIP-848 consumer groups in `__consumer_offsets`: the records (coordinator/consumer_records.py)
byte for byte and against hostile bytes, and a coordinator over a real store
(coordinator/consumer_persistence.py) that writes each change before it counts, rolls back a
failed write, and rebuilds its groups from the log: members keep their ids, epochs and assignments."""

from __future__ import annotations

import contextlib
import random
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from test_fuzz_records import mutations
from test_group_state import ManualClock, hosted_partitions, in_loop, until

from logbus.config import BrokerConfig
from logbus.coordinator import GroupConfig, GroupCoordinator, OffsetsTopic
from logbus.coordinator.consumer_group import ConsumerGroup, Heartbeat, HeartbeatResult, MemberState
from logbus.coordinator.consumer_persistence import group_records
from logbus.coordinator.consumer_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    PARTITION_METADATA,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    AssignmentEpochValue,
    ConsumerGroupKey,
    CurrentAssignmentValue,
    GroupEpochValue,
    MemberMetadataValue,
    PartitionMetadataValue,
    TargetAssignmentValue,
    TopicMetadataValue,
    decode_consumer_value,
    encode_consumer_key,
    encode_consumer_value,
)
from logbus.coordinator.records import RecordFormatError
from logbus.coordinator.share_group import ShareHeartbeat
from logbus.coordinator.share_group_records import (
    SHARE_GROUP_METADATA,
    SHARE_STATE_PARTITION_METADATA,
    ShareGroupEpochValue,
    ShareGroupKey,
    StatePartitionMetadataValue,
    StateTopic,
    encode_share_value,
)
from logbus.coordinator.store import decode_entry, encode_entry
from logbus.errors import KafkaApiError

GROUP = "g"
TOPIC_ID = uuid.UUID("0f4c1b1e-6f1c-4a8e-9a47-3d5d2c1b0a99")
VALUES = [
    (ConsumerGroupKey(GROUP_METADATA, GROUP), GroupEpochValue(7)),
    (ConsumerGroupKey(PARTITION_METADATA, GROUP), PartitionMetadataValue((TopicMetadataValue(TOPIC_ID, "t", 4),))),
    (ConsumerGroupKey(MEMBER_METADATA, GROUP, "m"), MemberMetadataValue(
        "instance", None, "client", "/127.0.0.1", ("t", "u"), "t.*", 30_000, "uniform")),
    (ConsumerGroupKey(TARGET_ASSIGNMENT_METADATA, GROUP), AssignmentEpochValue(7)),
    (ConsumerGroupKey(TARGET_ASSIGNMENT_MEMBER, GROUP, "m"), TargetAssignmentValue(((TOPIC_ID, (0, 2)),))),
    (ConsumerGroupKey(CURRENT_MEMBER_ASSIGNMENT, GROUP, "m"), CurrentAssignmentValue(
        7, 6, 1, ((TOPIC_ID, (0,)),), ((TOPIC_ID, (1, 3)),))),
    (ShareGroupKey(SHARE_GROUP_METADATA, GROUP), ShareGroupEpochValue(3)),
    (ShareGroupKey(SHARE_STATE_PARTITION_METADATA, GROUP), StatePartitionMetadataValue(
        initialized=(StateTopic(TOPIC_ID, "t", (0, 1), 1700),), deleting=(StateTopic(TOPIC_ID, "u"),))),
]


# ---------------------------------------------------------------- the records


@pytest.mark.parametrize(("key", "value"), VALUES, ids=lambda v: type(v).__name__)
def test_each_record_round_trips(key: ConsumerGroupKey | ShareGroupKey, value: object) -> None:
    raw_key, raw_value = encode_entry(key, value)
    assert decode_entry(raw_key, raw_value) == (key, value)
    assert decode_entry(raw_key, None) == (key, None)  # a tombstone


def test_keys_and_values_are_laid_out_as_kafka_writes_them() -> None:
    assert encode_consumer_key(ConsumerGroupKey(GROUP_METADATA, "g")) == b"\x00\x03\x00\x01g"
    assert encode_consumer_key(ConsumerGroupKey(CURRENT_MEMBER_ASSIGNMENT, "g", "m")) == b"\x00\x08\x00\x01g\x00\x01m"
    assert encode_consumer_value(GroupEpochValue(7)) == b"\x00\x00" + b"\x00\x00\x00\x07" + b"\x00"
    # MemberEpoch, PreviousMemberEpoch, State, AssignedPartitions [TopicId, Partitions, tags], pending revocation
    assert encode_consumer_value(CurrentAssignmentValue(2, 1, 0, ((TOPIC_ID, (5,)),), ())) == (
        b"\x00\x00" + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x01" + b"\x00"
        + b"\x02" + TOPIC_ID.bytes + b"\x02\x00\x00\x00\x05" + b"\x00" + b"\x01" + b"\x00")


def test_share_group_records_are_laid_out_as_kafka_4_2_writes_them() -> None:
    """ShareGroupMetadataKey/Value (11) and ShareGroupStatePartitionMetadataKey/Value (15)."""
    assert encode_entry(ShareGroupKey(SHARE_GROUP_METADATA, "g"), None)[0] == b"\x00\x0b\x00\x01g"
    assert encode_entry(ShareGroupKey(SHARE_STATE_PARTITION_METADATA, "g"), None)[0] == b"\x00\x0f\x00\x01g"
    # Epoch, MetadataHash
    assert encode_share_value(ShareGroupEpochValue(7)) == b"\x00\x00" + b"\x00\x00\x00\x07" + bytes(8) + b"\x00"
    # InitializingTopics, InitializedTopics [TopicId, TopicName, Partitions, CreateTimestamp, tags],
    # DeletingTopics [TopicId, TopicName, tags]
    value = StatePartitionMetadataValue(initialized=(StateTopic(TOPIC_ID, "t", (5,), 9),),
                                        deleting=(StateTopic(TOPIC_ID, "u"),))
    assert encode_share_value(value) == (
        b"\x00\x00" + b"\x01"
        + b"\x02" + TOPIC_ID.bytes + b"\x02t" + b"\x02\x00\x00\x00\x05" + (9).to_bytes(8, "big") + b"\x00"
        + b"\x02" + TOPIC_ID.bytes + b"\x02u" + b"\x00" + b"\x00")


def test_tagged_fields_of_newer_kafkas_are_skipped() -> None:
    """Kafka 4.1 tags the metadata hash (tag 0) onto the group's epoch record."""
    value = b"\x00\x00" + b"\x00\x00\x00\x09" + b"\x01" + b"\x00\x08" + bytes(range(8))
    assert decode_consumer_value(GROUP_METADATA, value) == GroupEpochValue(9)


def test_hostile_bytes_are_refused_cleanly() -> None:
    seeds = [key + (value or b"") for key, value in (encode_entry(k, v) for k, v in VALUES)]
    rng = random.Random(5)
    for data in mutations(seeds, 3000, seed=3):
        cut = rng.randrange(len(data) + 1)
        try:
            decode_entry(data[:cut], data[cut:])
            decode_entry(data, data)
        except (RecordFormatError, UnicodeDecodeError):
            pass


# ---------------------------------------------------------------- a coordinator over a real store


class FaultyStore(OffsetsTopic):
    """The real store, whose writes fail while `failing` (a full ISR lost, say)."""

    failing = False

    async def write(self, index: int, entries: list) -> int:
        if self.failing:
            raise KafkaApiError(ErrorCode.coordinator_not_available, "the write failed")
        return await super().write(index, entries)


@dataclass
class Env:
    coordinator: GroupCoordinator
    clock: ManualClock
    store: FaultyStore

    def group(self) -> ConsumerGroup | None:
        return self.coordinator.consumer_groups.get(GROUP)

    def records(self) -> dict:
        return group_records(self.group(), self.coordinator.consumer_writes.topic_id)

    async def join(self, member: str, topics: tuple[str, ...] = ("t",)) -> HeartbeatResult:
        return await self.coordinator.consumer_heartbeat(Heartbeat(
            GROUP, member, 0, rebalance_timeout_ms=30_000, subscribed_topics=topics, owned={}))

    async def beat(self, member: str, epoch: int, owned: dict[str, frozenset[int]] | None = None) -> HeartbeatResult:
        return await self.coordinator.consumer_heartbeat(Heartbeat(GROUP, member, epoch, owned=owned))


@contextlib.asynccontextmanager
async def consumer_env(data_dir: Path, partitions: int = 4) -> AsyncIterator[Env]:
    """A started coordinator over a real store in `data_dir` with topic "t" (`partitions`, grown to
    that if it had fewer); loaded."""
    config = BrokerConfig({"offsets.topic.num.partitions": "1"})
    clock = ManualClock()
    async with hosted_partitions(data_dir, config) as (metadata, replicas):
        if metadata.topic("t") is None:
            await metadata.create_topic("t", partitions, 1, {})
        elif len(metadata.topic("t").partitions) < partitions:
            await metadata.add_partitions("t", partitions)
        store = FaultyStore(config, metadata, replicas, clock)
        await store.create()

        def partition_count(name: str) -> int | None:
            topic = metadata.topic(name)
            return None if topic is None else len(topic.partitions)

        def topic_id(name: str) -> uuid.UUID | None:
            topic = metadata.topic(name)
            return None if topic is None else topic.uuid

        def topic_name(topic_id: uuid.UUID) -> str | None:
            topic = metadata.topic_by_id(str(topic_id))
            return None if topic is None else topic.name

        coordinator = GroupCoordinator(
            GroupConfig.from_broker_config(config), store, clock, partition_count=partition_count,
            topic_names=lambda: ["t"], topic_id=topic_id, topic_name=topic_name)
        coordinator.start()
        try:
            await until(lambda: coordinator.serves(GROUP), "the group's partition loaded")
            yield Env(coordinator, clock, store)
        finally:
            coordinator.stop()


async def two_members_mid_revocation(env: Env) -> tuple[HeartbeatResult, HeartbeatResult]:
    """a owned all 4 partitions; b joined: a must give up 2 (a is at its epoch, revoking), b waits."""
    a = await env.join("a")
    assert a.assignment == {"t": frozenset(range(4))}
    b = await env.join("b")
    a = await env.beat("a", a.member_epoch, owned={"t": frozenset(range(4))})
    group = env.group()
    assert group is not None and group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    return a, b


@in_loop
async def test_a_reloaded_coordinator_resumes_the_members_where_they_were(tmp_path: Path) -> None:
    async with consumer_env(tmp_path) as env:
        a, b = await two_members_mid_revocation(env)
        before = env.records()
    async with consumer_env(tmp_path) as env:
        assert env.records() == before
        group = env.group()
        assert group is not None and (group.group_epoch, group.members["a"].member_epoch) == (2, 1)
        assert group.members["a"].revoking == {"t": frozenset({2, 3})}
        # the revoking member goes on: it lets go, b gets the partitions; no new group epoch
        kept = group.members["a"].assigned
        a = await env.beat("a", 1, owned=kept)
        assert (a.member_epoch, group.group_epoch) == (2, 2)
        b = await env.beat("b", b.member_epoch, owned={})
        assert (b.member_epoch, b.assignment) == (2, {"t": frozenset({2, 3})})
        after = env.records()
    async with consumer_env(tmp_path) as env:
        assert env.records() == after


@in_loop
async def test_a_pending_revocation_and_the_sessions_restart_on_load(tmp_path: Path) -> None:
    async with consumer_env(tmp_path) as env:
        await two_members_mid_revocation(env)
    async with consumer_env(tmp_path) as env:
        await env.clock.advance(30_000)  # a's rebalance timeout, from the load
        await until(lambda: ConsumerGroupKey(MEMBER_METADATA, GROUP, "a") not in env.records(), "a removed")
        await env.clock.advance(15_000)  # b's session (45 s) ends too
        await until(lambda: ConsumerGroupKey(MEMBER_METADATA, GROUP, "b") not in env.records(), "b removed")
    async with consumer_env(tmp_path) as env:
        group = env.group()
        assert group is not None and not group.members and group.group_epoch == 4


@in_loop
async def test_a_static_member_that_left_temporarily_is_replaced_after_a_reload(tmp_path: Path) -> None:
    async with consumer_env(tmp_path) as env:
        joined = await env.coordinator.consumer_heartbeat(Heartbeat(
            GROUP, "s1", 0, instance_id="i1", rebalance_timeout_ms=30_000, subscribed_topics=("t",), owned={}))
        await env.coordinator.consumer_heartbeat(Heartbeat(GROUP, "s1", -2, instance_id="i1"))
    async with consumer_env(tmp_path) as env:
        back = await env.coordinator.consumer_heartbeat(Heartbeat(
            GROUP, "s2", 0, instance_id="i1", rebalance_timeout_ms=30_000, subscribed_topics=("t",), owned={}))
        assert (back.member_epoch, back.assignment) == (joined.member_epoch, joined.assignment)
        group = env.group()
        assert group is not None and set(group.members) == {"s2"} and group.group_epoch == 1


@in_loop
async def test_a_topic_grown_while_the_group_had_no_coordinator_bumps_its_epoch(tmp_path: Path) -> None:
    async with consumer_env(tmp_path) as env:
        a = await env.join("a")
    async with consumer_env(tmp_path, partitions=6) as env:
        a = await env.beat("a", a.member_epoch, owned=a.assignment)
        assert (a.member_epoch, a.assignment) == (2, {"t": frozenset(range(6))})


@in_loop
async def test_a_failed_write_changes_nothing(tmp_path: Path) -> None:
    async with consumer_env(tmp_path) as env:
        env.store.failing = True
        with pytest.raises(KafkaApiError):
            await env.join("a")
        assert env.group() is None
        env.store.failing = False
        a = await env.join("a")
        before = env.records()
        env.store.failing = True
        with pytest.raises(KafkaApiError):
            await env.join("b")  # a new member, a new epoch and target: none of it counts
        with pytest.raises(KafkaApiError):
            await env.beat("a", -1)  # leaving
        assert env.records() == before
        env.store.failing = False
        assert (await env.beat("a", a.member_epoch, owned=a.assignment)).member_epoch == a.member_epoch
    async with consumer_env(tmp_path) as env:
        assert env.records() == before


@in_loop
async def test_members_leaving_and_the_group_deleted_leave_tombstones(tmp_path: Path) -> None:
    async with consumer_env(tmp_path) as env:
        await env.join("a")
        await env.join("b")
        await env.beat("b", -1)
    async with consumer_env(tmp_path) as env:
        group = env.group()
        assert group is not None and set(group.members) == {"a"}
        await env.beat("a", -1)
        await env.coordinator.delete_group(GROUP)
        assert env.group() is None
        survivors = [e async for chunk in env.store.read_state(0) for e in chunk]
        assert [e.key for e in survivors if isinstance(e.key, ConsumerGroupKey) and e.value is not None] == []
    async with consumer_env(tmp_path) as env:
        assert env.group() is None


@in_loop
async def test_hostile_records_in_the_log_do_not_stop_the_load(tmp_path: Path) -> None:
    async with consumer_env(tmp_path) as env:
        await env.join("a")
        before = env.records()
        raw_key, raw_value = encode_entry(*VALUES[-1])
        await env.store.append(0, [
            (b"\x00\x05\x00", b"x"),  # a key that ends early
            (encode_consumer_key(ConsumerGroupKey(CURRENT_MEMBER_ASSIGNMENT, "other", "m")), raw_value[:9]),
            (encode_consumer_key(ConsumerGroupKey(MEMBER_METADATA, "orphans", "m")), encode_entry(*VALUES[2])[1]),
            (raw_key, b"\x00\x07" + raw_value[2:]),  # a version Kafka 4.1 does not write
        ])
    async with consumer_env(tmp_path) as env:
        assert env.records() == before
        assert env.coordinator.consumer_groups.get("orphans") is None  # members without the group's epoch


# ---------------------------------------------------------------- share groups' records


async def share_join(env: Env, group: str, member: str) -> HeartbeatResult:
    return await env.coordinator.share_heartbeat(ShareHeartbeat(group, member, 0, subscribed_topics=("t",)))


@in_loop
async def test_a_share_groups_topics_are_written_first_and_survive_a_reload(tmp_path: Path) -> None:
    """ShareGroupMetadata and ShareGroupStatePartitionMetadata are written before the heartbeat
    that first subscribes the group to a topic counts; a reload rebuilds the group, Empty, with its
    epoch and topics; deleting a topic's state (DeleteShareGroupOffsets' path) and the group
    (DeleteGroups) delete the state of exactly those topics, then leave tombstones."""
    deleted: list[tuple[str, set[str]]] = []

    async def delete_state(group_id: str, topics: set[str]) -> None:
        deleted.append((group_id, set(topics)))

    async with consumer_env(tmp_path) as env:
        env.store.failing = True
        with pytest.raises(KafkaApiError):
            await share_join(env, "unwritten", "m")
        assert env.coordinator.share_groups.get("unwritten") is None  # the failed write changed nothing
        env.store.failing = False
        joined = await share_join(env, GROUP, "m")
        assert joined.member_epoch == 1
    async with consumer_env(tmp_path) as env:
        share = env.coordinator.share_groups.get(GROUP)
        assert share is not None and (share.group_epoch, share.topics_seen, share.members) == (1, {"t"}, {})
        await env.coordinator.share_writes.delete_topics(GROUP, {"t", "never"}, delete_state)
        assert deleted == [(GROUP, {"t"})] and share.topics_seen == set()
        await share_join(env, GROUP, "m2")
        await env.coordinator.share_heartbeat(ShareHeartbeat(GROUP, "m2", -1))
    async with consumer_env(tmp_path) as env:
        env.coordinator.delete_share_state = delete_state
        assert env.coordinator.share_groups.get(GROUP).topics_seen == {"t"}
        await env.coordinator.delete_group(GROUP)  # (a refusal raises)
        assert deleted[-1] == (GROUP, {"t"})
        survivors = [e async for chunk in env.store.read_state(0) for e in chunk]
        assert [e.key for e in survivors if isinstance(e.key, ShareGroupKey) and e.value is not None] == []
    async with consumer_env(tmp_path) as env:
        assert env.coordinator.share_groups.get(GROUP) is None

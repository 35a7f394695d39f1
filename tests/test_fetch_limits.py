"""A Fetch answer keeps to the request's max_bytes and each partition's partition_max_bytes.

Only the first partition with records may go past them, by its first batch, so that a fetcher
always makes progress (KIP-74, Kafka's ReplicaManager.readFromLog); a later partition whose
first batch does not fit in what is left answers no records. Checked on the log read itself in
process, then with hand-built Fetch requests (without and with a fetch session), and with a
librdkafka consumer whose fetch.max.bytes is smaller than two batches (librdkafka test 0082:
an answer past receive.message.max.bytes makes it drop the connection and retry forever).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import FETCH, QUIET, RawConnection, raw_produce, wait_until
from kio.index import load_payload_module
from kio.static.constants import EntityType
from test_read_committed import create_assigned_topic
from test_storage import record_batch
from test_storage_unit import append, make_config, open_log

from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.testing import BrokerProcess, running_broker, running_cluster

FETCH_V12 = load_payload_module(FETCH, 12, EntityType.request)
BIG = "big-batches"  # 3 partitions, BATCHES batches of BIG_VALUE bytes each
MIXED = "mixed-batches"  # partition 0: big batches, partition 1: small ones
BATCHES = 3
BIG_VALUE = 30_000
SMALL_VALUE = 1_000
BIG_BATCH = len(record_batch(b"b" * BIG_VALUE))


# ---------------------------------------------------------------------- the log read, in process


def test_a_read_without_min_one_batch_reads_nothing_when_the_first_batch_does_not_fit(tmp_path: Path) -> None:
    log_ = open_log(str(tmp_path), make_config())
    for _ in range(2):
        append(log_, b"x" * 5_000)
    first = len(record_batch(b"x" * 5_000))
    assert log_.read(0, 100, log_.log_end_offset).size == first, "KIP-74: the first batch whole"
    assert log_.read(0, 100, log_.log_end_offset, min_one_batch=False) is None
    assert log_.read(0, first, log_.log_end_offset, min_one_batch=False).size == first
    assert log_.read(0, 2 * first + 10, log_.log_end_offset, min_one_batch=False).size <= 2 * first + 10


# ---------------------------------------------------------------------- a real broker, raw requests


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
        for future in admin.create_topics([NewTopic(BIG, 3, 1), NewTopic(MIXED, 2, 1)]).values():
            future.result(30)
        with RawConnection(broker.bootstrap) as connection:
            for partition in range(3):
                for _ in range(BATCHES):
                    assert raw_produce(connection, BIG, record_batch(b"b" * BIG_VALUE), partition)[0] == 0
            for _ in range(BATCHES):
                assert raw_produce(connection, MIXED, record_batch(b"b" * BIG_VALUE), 0)[0] == 0
            for _ in range(40):
                assert raw_produce(connection, MIXED, record_batch(b"s" * SMALL_VALUE), 1)[0] == 0
        yield broker


def fetch_partition(index: int, offset: int, partition_max_bytes: int) -> Any:
    return FETCH_V12.FetchPartition(partition=index, current_leader_epoch=-1, fetch_offset=offset,
                                    last_fetched_epoch=-1, log_start_offset=-1,
                                    partition_max_bytes=partition_max_bytes)


def fetch(connection: RawConnection, topic: str, offsets: dict[int, int], max_bytes: int,
          partition_max_bytes: int = 1 << 20, session: tuple[int, int] = (0, -1), isolation_level: int = 0,
          replica_id: int = -1) -> Any:
    """A Fetch v12 of `offsets` (partition -> fetch offset), in that order (a consumer's, or with
    `replica_id` a follower's)."""
    partitions = tuple(fetch_partition(index, offset, partition_max_bytes) for index, offset in offsets.items())
    return connection.call(
        FETCH, 12, cluster_id=None, replica_id=replica_id, max_wait=datetime.timedelta(milliseconds=0), min_bytes=1,
        max_bytes=max_bytes, isolation_level=isolation_level, session_id=session[0], session_epoch=session[1],
        topics=(FETCH_V12.FetchTopic(topic=topic, partitions=partitions),) if partitions else (),
        forgotten_topics_data=(), rack_id="")


def record_bytes(response: Any) -> dict[int, int]:
    """partition -> record bytes, for each partition the answer names."""
    return {p.partition_index: len(p.records or b"") for t in response.responses for p in t.partitions}


@pytest.mark.parametrize(("max_bytes", "partition_max_bytes"), [(BIG_BATCH + 1_000, 1 << 20),
                                                                (1 << 20, BIG_BATCH - 1_000)],
                         ids=["max_bytes", "partition_max_bytes"])
@pytest.mark.parametrize("isolation_level", [0, 1], ids=["read_uncommitted", "read_committed"])
def test_only_the_first_partition_with_data_goes_past_the_limits_by_one_batch(
        broker: BrokerProcess, max_bytes: int, partition_max_bytes: int, isolation_level: int) -> None:
    with RawConnection(broker.bootstrap) as connection:
        answer = fetch(connection, BIG, {0: 0, 1: 0, 2: 0}, max_bytes, partition_max_bytes,
                       isolation_level=isolation_level)
        assert record_bytes(answer) == {0: BIG_BATCH, 1: 0, 2: 0}, "later partitions named, without records"
        answer = fetch(connection, BIG, {0: BATCHES, 1: 0, 2: 0}, max_bytes, partition_max_bytes,
                       isolation_level=isolation_level)
        assert record_bytes(answer) == {0: 0, 1: BIG_BATCH, 2: 0}, "the first partition *with data* may"


def test_a_later_partition_gets_what_fits_in_what_is_left(broker: BrokerProcess) -> None:
    max_bytes = BIG_BATCH + 10 * SMALL_VALUE
    with RawConnection(broker.bootstrap) as connection:
        sizes = record_bytes(fetch(connection, MIXED, {0: 0, 1: 0}, max_bytes))
    assert sizes[0] == BIG_BATCH and 0 < sizes[1] <= max_bytes - BIG_BATCH
    assert sum(sizes.values()) <= max_bytes


def test_a_fetch_session_keeps_the_limits_and_serves_every_partition_in_turn(broker: BrokerProcess) -> None:
    """Kafka moves a session's partition that answered records to the end of the session, so that
    with room for one batch per answer every partition is served in turn, not the first until
    it runs dry."""
    offsets = {0: 0, 1: 0, 2: 0}
    max_bytes = BIG_BATCH + 1_000
    served = []
    with RawConnection(broker.bootstrap) as connection:
        answer = fetch(connection, BIG, offsets, max_bytes, session=(0, 0))
        session_id = answer.session_id
        assert session_id != 0
        for epoch in range(1, 5):  # the full fetch and the first incremental one read partition 0 first
            sizes = record_bytes(answer)
            assert sum(sizes.values()) == BIG_BATCH, f"one batch per answer: {sizes}"
            (partition,) = (index for index, size in sizes.items() if size)
            served.append(partition)
            offsets[partition] += 1
            answer = fetch(connection, BIG, {partition: offsets[partition]}, max_bytes,
                           session=(session_id, epoch))
            assert answer.error_code == 0
    assert set(served) == {0, 1, 2}, f"served in turn: {served}"


def test_a_followers_fetch_keeps_the_limits_too(zookeeper: ZooKeeperServer) -> None:
    with running_cluster(2, zookeeper=zookeeper) as cluster:
        create_assigned_topic(cluster.bootstrap, BIG, {partition: [1, 2] for partition in range(3)})
        leader = cluster.brokers[1].bootstrap
        with RawConnection(leader) as connection:
            for partition in range(3):
                wait_until(lambda p=partition: raw_produce(connection, BIG, record_batch(b"b" * BIG_VALUE), p)[0] == 0,
                           timeout=20, message="the leader takes records")
            answer = fetch(connection, BIG, {0: 0, 1: 0, 2: 0}, BIG_BATCH + 1_000, replica_id=2)
        assert record_bytes(answer) == {0: BIG_BATCH, 1: 0, 2: 0}


# ---------------------------------------------------------------------- librdkafka


@pytest.mark.parametrize("limits", [
    {"fetch.max.bytes": BIG_BATCH + 1_000, "receive.message.max.bytes": BIG_BATCH + 1_512,
     "max.partition.fetch.bytes": 20_000_000, "message.max.bytes": 1_000},
    {"fetch.max.bytes": 1_000_000, "receive.message.max.bytes": 1_000_512,
     "max.partition.fetch.bytes": BIG_BATCH - 1_000},
], ids=["fetch.max.bytes", "max.partition.fetch.bytes"])
def test_librdkafka_with_limits_below_its_batches_reads_everything(broker: BrokerProcess,
                                                                    limits: dict[str, int]) -> None:
    """librdkafka 0082: receive.message.max.bytes is fetch.max.bytes + 512; an answer of two
    batches would exceed it, and librdkafka would drop the connection and fetch again forever.
    With max.partition.fetch.bytes below a batch it still reads (the first batch always comes)."""
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": "limits", "enable.auto.commit": False, **limits, **QUIET,
    })
    try:
        consumer.assign([TopicPartition(BIG, partition, 0) for partition in range(3)])
        got: dict[int, int] = {}

        def all_read() -> bool:
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                got[message.partition()] = got.get(message.partition(), 0) + 1
            return sum(got.values()) == 3 * BATCHES

        wait_until(all_read, timeout=30, interval=0)
    finally:
        consumer.close()

"""Fetch from follower (KIP-392): `replica.selector.class`, `broker.rack`, the client's rack.

The selector's choice in process; then a real 3-broker cluster with one rack per broker and
Kafka's RackAwareReplicaSelector: hand-built Fetch requests check the leader's
preferred_read_replica answer and a follower serving consumers (and what it refuses), and a
librdkafka consumer with `client.rack` reads from the replica in its rack, as librdkafka's test
0101 checks, and goes on reading from the leader once that follower dies.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from helpers import FETCH, LIST_OFFSETS, QUIET, produce_all, raw_request, wait_until
from kio.schema.errors import ErrorCode
from test_read_committed import create_assigned_topic

from logbus.cluster.replica_selector import RACK_AWARE_SELECTOR, ReplicaView, select_rack_aware
from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.protocol import codec
from logbus.testing import Cluster, running_cluster

TOPIC = "racked"  # one partition on brokers 1 (leader), 2, 3
SOLO = "solo"  # one partition on broker 1 alone
RECORDS = 10


# ---------------------------------------------------------------------- the selector, in process


def test_the_rack_aware_selector_prefers_the_leader_then_the_most_caught_up_replica_of_the_rack() -> None:
    leader = ReplicaView(1, "a", 100, 0.0)
    behind, ahead, stale = ReplicaView(2, "b", 90, 0.0), ReplicaView(3, "b", 100, 5.0), ReplicaView(4, "b", 100, 9.0)
    replicas = [leader, behind, ahead, stale]
    assert select_rack_aware("b", leader, replicas) == ahead, "most of the log, then caught up most recently"
    assert select_rack_aware("a", leader, [*replicas, ReplicaView(5, "a", 100, 0.0)]) == leader
    assert select_rack_aware("", leader, replicas) == leader, "no client rack"
    assert select_rack_aware("z", leader, replicas) == leader, "no replica in the client's rack"


# ---------------------------------------------------------------------- a racked cluster, raw requests


@contextlib.contextmanager
def racked_cluster(zookeeper: ZooKeeperServer) -> Iterator[Cluster]:
    with running_cluster(0, {"replica.selector.class": RACK_AWARE_SELECTOR}, zookeeper=zookeeper) as cluster:
        cluster.add_brokers((1, 2, 3), {broker_id: {"broker.rack": f"r{broker_id}"} for broker_id in (1, 2, 3)})
        cluster.wait_ready(timeout=60)
        create_assigned_topic(cluster.bootstrap, TOPIC, {0: [1, 2, 3]})
        create_assigned_topic(cluster.bootstrap, SOLO, {0: [1]})
        cluster.wait_ready([TOPIC, SOLO], timeout=60)
        produce_all(cluster.brokers[1].bootstrap, TOPIC, records(b"v"))
        for broker_id in (2, 3):  # every follower has every record below its high watermark
            wait_until(lambda b=broker_id: partition_answer(cluster, b, 11, f"r{b}").high_watermark == RECORDS,
                       timeout=60, message=f"broker {broker_id}'s high watermark")
        yield cluster


def records(prefix: bytes) -> list[tuple[bytes, bytes]]:
    """RECORDS records keyed prefix0, prefix1, ...; 1 KB values, so that record bytes outweigh metadata."""
    return [(b"%s%d" % (prefix, i), b"." * 1000) for i in range(RECORDS)]


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer) -> Iterator[Cluster]:
    with racked_cluster(zookeeper) as started:
        yield started


def partition_answer(cluster: Cluster, broker_id: int, version: int, rack: str = "", offset: int = 0,
                     topic: str = TOPIC, leader_epoch: int = -1, max_wait_ms: int = 0) -> Any:
    """One consumer Fetch of `topic`-0 from `broker_id`; its partition's answer."""
    schema = importlib.import_module(f"kio.schema.fetch.v{version}.request")
    partition = codec.make(schema.FetchPartition, partition=0, current_leader_epoch=leader_epoch,
                           fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                           partition_max_bytes=1 << 20)
    response = raw_request(
        cluster.brokers[broker_id].bootstrap, FETCH, version, cluster_id=None, replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, topics=(codec.make(schema.FetchTopic, topic=topic, partitions=(partition,)),),
        forgotten_topics_data=(), rack_id=rack)
    return response.responses[0].partitions[0]


def test_the_leader_names_the_replica_in_the_consumers_rack_and_sends_no_records(cluster: Cluster) -> None:
    redirected = partition_answer(cluster, 1, 11, "r2")
    assert (redirected.error_code, redirected.preferred_read_replica) == (0, 2) and not redirected.records
    assert redirected.high_watermark == RECORDS
    began = time.monotonic()
    at_the_end = partition_answer(cluster, 1, 11, "r2", offset=RECORDS, max_wait_ms=20_000)
    assert at_the_end.preferred_read_replica == 2 and time.monotonic() - began < 10, "answered at once, as Kafka"
    for rack in ("r1", "", "elsewhere"):
        served = partition_answer(cluster, 1, 11, rack)
        assert served.preferred_read_replica == -1 and len(served.records), f"rack {rack!r}: the leader serves"
    assert len(partition_answer(cluster, 1, 10, "r2").records), "before v11 a consumer has no rack"


def test_a_follower_serves_consumers_of_v11_up_to_its_high_watermark(cluster: Cluster) -> None:
    served = partition_answer(cluster, 2, 11, "r2")
    assert served.error_code == 0 and served.high_watermark == RECORDS and len(served.records)
    assert partition_answer(cluster, 3, 12, "r2").error_code == 0, "any consumer of v11+, whatever its rack"
    assert partition_answer(cluster, 2, 10).error_code == ErrorCode.not_leader_or_follower, "v10: leader only"
    beyond = partition_answer(cluster, 2, 11, "r2", offset=RECORDS + 100)
    assert beyond.error_code == ErrorCode.offset_out_of_range, "past the follower's log: back to the leader"
    assert partition_answer(cluster, 2, 11, "r2", leader_epoch=5).error_code == ErrorCode.unknown_leader_epoch
    assert partition_answer(cluster, 2, 11, "r2", leader_epoch=0).error_code == 0


def test_a_broker_without_a_replica_answers_not_leader_or_follower(cluster: Cluster) -> None:
    assert partition_answer(cluster, 2, 11, "r2", topic=SOLO).error_code == ErrorCode.not_leader_or_follower
    assert partition_answer(cluster, 2, 11, "r2", topic="no-such-topic").error_code == \
        ErrorCode.unknown_topic_or_partition


def test_list_offsets_still_goes_to_the_leader(cluster: Cluster) -> None:
    schema = importlib.import_module("kio.schema.list_offsets.v7.request")
    partition = codec.make(schema.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1, timestamp=-1)
    topic = codec.make(schema.ListOffsetsTopic, name=TOPIC, partitions=(partition,))
    for broker_id, error in ((1, ErrorCode.none), (2, ErrorCode.not_leader_or_follower)):
        response = raw_request(cluster.brokers[broker_id].bootstrap, LIST_OFFSETS, 7, replica_id=-1,
                               isolation_level=0, topics=(topic,))
        assert response.topics[0].partitions[0].error_code == error


# ---------------------------------------------------------------------- librdkafka (test 0101's semantics)


def fetched_from(stats: dict[str, Any]) -> dict[int, int]:
    """broker id -> bytes this consumer received from it (librdkafka's brokers[].rxbytes)."""
    return {b["nodeid"]: b["rxbytes"] for b in stats.get("brokers", {}).values() if b["nodeid"] >= 0}


def fetch_broker(stats: dict[str, Any]) -> int | None:
    """The broker librdkafka fetches `TOPIC`-0 from (its preferred read replica once told one)."""
    return stats.get("topics", {}).get(TOPIC, {}).get("partitions", {}).get("0", {}).get("broker")


def out_of_the_isr(bootstrap: str, broker_id: int) -> bool:
    """Whether Metadata from `bootstrap` shows `TOPIC`-0's ISR without `broker_id`."""
    try:
        found = AdminClient({"bootstrap.servers": bootstrap, **QUIET}).list_topics(TOPIC, timeout=5)
        isr = found.topics[TOPIC].partitions[0].isrs
    except Exception:  # noqa: BLE001 - asked again
        return False
    return bool(isr) and broker_id not in isr


def test_a_librdkafka_consumer_reads_from_its_rack_and_goes_on_when_that_follower_dies(
        zookeeper: ZooKeeperServer) -> None:
    """Each wait on the statistics polls the consumer: librdkafka hands them over only in a poll,
    so a wait that did not poll judged a frozen copy (issue 26). The bytes compared are those of
    the records produced once the consumer fetches from its rack's replica, so that an ISR change
    under load before then (the leader serves a consumer whose rack's replica is out of the ISR,
    as Kafka's does) does not count."""
    with racked_cluster(zookeeper) as cluster:
        stats: list[dict[str, Any]] = []
        consumer = Consumer({
            "bootstrap.servers": cluster.brokers[1].bootstrap, "group.id": "racked", "client.rack": "r3",
            "enable.auto.commit": False, "statistics.interval.ms": 200, "topic.metadata.refresh.interval.ms": 1000,
            "stats_cb": lambda text: stats.append(json.loads(text)), **QUIET,
        })
        try:
            consumer.assign([TopicPartition(TOPIC, 0, 0)])
            got: list[bytes] = []

            def read(count: int) -> bool:
                message = consumer.poll(0.2)
                if message is not None and message.error() is None:
                    got.append(message.key())
                return len(got) >= count

            def polled_stats() -> dict[str, Any]:
                """The newest statistics after a poll (which serves those emitted meanwhile)."""
                read(0)
                return stats[-1] if stats else {}

            wait_until(lambda: read(RECORDS), timeout=60, message="the first records")
            wait_until(lambda: fetch_broker(polled_stats()) == 3, timeout=60,
                       message="the partition fetched from broker 3")
            before = fetched_from(stats[-1])
            produce_all(cluster.brokers[1].bootstrap, TOPIC, records(b"w"))
            wait_until(lambda: read(2 * RECORDS), timeout=60, message="records read from the follower")
            wait_until(lambda: fetched_from(polled_stats())[3] - before[3] > RECORDS * 1000, timeout=30,
                       message="broker 3's bytes grow by the records")
            received = {broker: total - before.get(broker, 0) for broker, total in fetched_from(stats[-1]).items()}
            assert received[3] > max(received.get(1, 0), received.get(2, 0)), f"the records from broker 3: {received}"
            cluster.brokers[3].kill()
            wait_until(lambda: out_of_the_isr(cluster.brokers[1].bootstrap, 3), timeout=60, interval=0.5,
                       message="broker 3 out of the ISR")
            produce_all(cluster.brokers[1].bootstrap, TOPIC, records(b"x"))
            wait_until(lambda: read(3 * RECORDS), timeout=60, message="records read once the follower died")
            assert got == [b"%s%d" % (p, i) for p in (b"v", b"w", b"x") for i in range(RECORDS)]
        finally:
            consumer.close()

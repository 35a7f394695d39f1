"""Storage under replication: a real ZooKeeper, real broker processes, real clients.

DeleteRecords reaches every replica (a failover or a restart never brings deleted records back).
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from helpers import QUIET, produce_all, raw_request, wait_until
from kazoo.client import KazooClient
from kio.schema.delete_records.v2 import request as delete_records_v2
from kio.schema.errors import ErrorCode
from test_cluster import FAILOVER_S, admin, create, partition_state, wait_new_leader

from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.storage.checkpoints import read_offsets
from logbus.testing import BrokerProcess, Cluster, running_cluster, running_zookeeper

DELETE_RECORDS = 21


@pytest.fixture(scope="module")
def zookeeper() -> Iterator[ZooKeeperServer]:
    with running_zookeeper() as server:
        yield server


@contextlib.contextmanager
def zookeeper_client(cluster: Cluster) -> Iterator[KazooClient]:
    """A ZooKeeper session in the cluster's chroot."""
    zk = KazooClient(hosts=cluster.config["zookeeper.connect"])
    zk.start(10)
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


def checkpointed_log_start(broker: BrokerProcess, topic: str) -> int | None:
    path = os.path.join(broker.data_dir, "log-start-offset-checkpoint")
    return read_offsets(path).get((topic, 0)) if os.path.exists(path) else None


def earliest(cluster: Cluster, topic: str) -> int:
    """The partition's log start offset, as ListOffsets EARLIEST at its leader answers it."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "earliest", **QUIET})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0]
    finally:
        consumer.close()


def first_offset_from_the_beginning(cluster: Cluster, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "first", **QUIET})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        message = wait_until(lambda: consumer.poll(0.5), timeout=20, message="a record")
        assert message.error() is None, message.error()
        return message.offset()
    finally:
        consumer.close()


def delete_records_raw(broker: BrokerProcess, topic: str, offset: int) -> ErrorCode:
    answer = raw_request(broker.bootstrap, DELETE_RECORDS, 2, timeout=datetime.timedelta(seconds=5), topics=(
        delete_records_v2.DeleteRecordsTopic(name=topic, partitions=(
            delete_records_v2.DeleteRecordsPartition(partition_index=0, offset=offset),)),))
    return ErrorCode(answer.topics[0].partitions[0].error_code)


def test_deleted_records_stay_deleted_after_failovers_and_a_crash(zookeeper: ZooKeeperServer) -> None:
    with running_cluster(3, {"log.flush.start.offset.checkpoint.interval.ms": "100"},
                         zookeeper=zookeeper) as cluster:
        create(cluster, "trimmed")
        produce_all(cluster.bootstrap, "trimmed", [(None, b"v%03d" % i) for i in range(100)], acks="all")
        client = admin(cluster)  # kept: the futures of a client gone complete never
        deleted = client.delete_records([TopicPartition("trimmed", 0, 60)], request_timeout=15)
        assert next(iter(deleted.values())).result(15).low_watermark == 60
        wait_until(lambda: all(checkpointed_log_start(b, "trimmed") == 60 for b in cluster.brokers.values()),
                   message="every replica's log start offset checkpointed at 60")

        first = partition_state(cluster, "trimmed")[0]
        cluster.brokers[first].kill()
        second = wait_new_leader(cluster, "trimmed", first)
        assert earliest(cluster, "trimmed") == 60
        assert first_offset_from_the_beginning(cluster, "trimmed") == 60

        # The last replica leads alone, crashes and comes back: its log start is its checkpoint's.
        last = ({1, 2, 3} - {first, second}).pop()
        cluster.brokers[second].stop()
        assert wait_new_leader(cluster, "trimmed", second) == last
        cluster.brokers[last].kill()
        with zookeeper_client(cluster) as zk:
            wait_until(lambda: not zk.exists(f"/brokers/ids/{last}"), timeout=FAILOVER_S, interval=0.2,
                       message="the crashed broker's registration gone")
        cluster.brokers[last].start()
        assert wait_new_leader(cluster, "trimmed", -1) == last
        assert earliest(cluster, "trimmed") == 60
        assert first_offset_from_the_beginning(cluster, "trimmed") == 60


def test_delete_records_at_a_broker_without_a_replica_is_not_leader_or_follower(zookeeper: ZooKeeperServer) -> None:
    with running_cluster(2, zookeeper=zookeeper) as cluster:
        create(cluster, "lonely", replication=1)
        holder = partition_state(cluster, "lonely")[1][0]
        other = cluster.brokers[3 - holder]
        assert delete_records_raw(other, "lonely", 0) == ErrorCode.not_leader_or_follower
        assert delete_records_raw(other, "no-such-topic", 0) == ErrorCode.unknown_topic_or_partition
        assert delete_records_raw(cluster.brokers[holder], "lonely", 0) == ErrorCode.none

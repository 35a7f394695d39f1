"""Storage under replication: a real ZooKeeper, real broker processes, real clients.

DeleteRecords reaches every replica (a failover or a restart never brings deleted records back);
a leader whose log dir fails hands its leadership to the ISR (KIP-112).
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition
from helpers import METADATA, QUIET, ballast, consume_partition, produce_all, raw_request, wait_until
from kafka.admin import KafkaAdminClient, NewTopic
from kazoo.client import KazooClient
from kio.schema.delete_records.v2 import request as delete_records_v2
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as metadata_v12
from test_cluster import FAILOVER_S, admin, create, partition_state, wait_new_leader
from test_metrics import scrape

from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.storage.checkpoints import read_offsets
from logbus.testing import BrokerProcess, Cluster, running_cluster

DELETE_RECORDS = 21



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


def in_sync(cluster: Cluster, replicas: set[int], topic: str = "trimmed") -> None:
    """Wait until the ISR of `topic` holds `replicas`: only they can be elected."""
    wait_until(lambda: replicas <= set(partition_state(cluster, topic)[2]), timeout=FAILOVER_S, interval=0.2,
               message=f"replicas {sorted(replicas)} in sync")


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

        in_sync(cluster, {1, 2, 3})
        first = partition_state(cluster, "trimmed")[0]
        cluster.brokers[first].kill()
        second = wait_new_leader(cluster, "trimmed", first)
        assert earliest(cluster, "trimmed") == 60
        assert first_offset_from_the_beginning(cluster, "trimmed") == 60

        # The last replica leads alone, crashes and comes back: its log start is its checkpoint's.
        last = ({1, 2, 3} - {first, second}).pop()
        in_sync(cluster, {second, last})  # a busy machine may have let it fall behind for a while
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


def test_a_follower_behind_a_log_start_inside_a_batch_catches_up(zookeeper: ZooKeeperServer) -> None:
    """The leader's log start (DeleteRecords at 60) falls inside one batch (offsets 0-99); a
    follower that was down starts its log afresh at 60, and the leader sends it the whole batch
    from 0: its log must start at the batch (Kafka's UnexpectedAppendOffsetException case), not
    refuse the batch for ever and stay out of the ISR."""
    with running_cluster(3, {"log.flush.start.offset.checkpoint.interval.ms": "100"},
                         zookeeper=zookeeper) as cluster:
        create(cluster, "mid-batch")
        leader, replicas, _ = partition_state(cluster, "mid-batch")
        behind = next(b for b in replicas if b != leader)
        cluster.brokers[behind].stop()
        wait_until(lambda: behind not in partition_state(cluster, "mid-batch")[2], timeout=FAILOVER_S,
                   message="the stopped follower out of the ISR")
        produce_all(cluster.bootstrap, "mid-batch", [(None, b"v%03d" % i) for i in range(100)], acks="all",
                    **{"linger.ms": 200})
        client = admin(cluster)  # kept: the futures of a client gone complete never
        deleted = client.delete_records([TopicPartition("mid-batch", 0, 60)], request_timeout=15)
        assert next(iter(deleted.values())).result(15).low_watermark == 60

        cluster.brokers[behind].start()
        in_sync(cluster, set(replicas), "mid-batch")
        wait_until(lambda: checkpointed_log_start(cluster.brokers[behind], "mid-batch") == 60,
                   message="the follower's log start checkpointed at 60")


def test_delete_records_at_a_broker_without_a_replica_is_not_leader_or_follower(zookeeper: ZooKeeperServer) -> None:
    with running_cluster(2, zookeeper=zookeeper) as cluster:
        create(cluster, "lonely", replication=1)
        holder = partition_state(cluster, "lonely")[1][0]
        other = cluster.brokers[3 - holder]
        assert delete_records_raw(other, "lonely", 0) == ErrorCode.not_leader_or_follower
        assert delete_records_raw(other, "no-such-topic", 0) == ErrorCode.unknown_topic_or_partition
        assert delete_records_raw(cluster.brokers[holder], "lonely", 0) == ErrorCode.none


# ---------------------------------------------------------------------------- a failed log dir


class TimedSender:
    """An idempotent acks=all producer sending numbered records to partition 0 of its topics in
    turn, in a thread, recording when each was acknowledged (and every failure)."""

    def __init__(self, cluster: Cluster, *topics: str) -> None:
        self.topics = topics
        self.producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, **QUIET})
        self.acked: list[tuple[float, str, bytes]] = []
        self.failed: list[KafkaError] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._send)

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self.acked.append((time.monotonic(), message.topic(), message.value()))
        else:
            self.failed.append(error)

    def _send(self) -> None:
        sent = 0
        while not self._stop.is_set():
            topic = self.topics[sent % len(self.topics)]
            self.producer.produce(topic, b"%06d" % sent, partition=0, on_delivery=self._delivered)
            self.producer.poll(0.01)
            sent += 1
        self.producer.flush(60)

    def __enter__(self) -> TimedSender:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def values(self, topic: str) -> list[bytes]:
        return [value for _, acked_topic, value in self.acked if acked_topic == topic]

    def longest_silence_after(self, topic: str, moment: float) -> float:
        """The longest time without an acknowledgement on `topic` from `moment` on."""
        times = [moment] + [at for at, acked_topic, _ in self.acked if acked_topic == topic and at >= moment]
        return max(later - earlier for earlier, later in itertools.pairwise(times))


def metadata_partition(broker: BrokerProcess, topic: str) -> Any:
    answer = raw_request(broker.bootstrap, METADATA, 12, allow_auto_topic_creation=False,
                         include_topic_authorized_operations=False,
                         topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name=topic),))
    return answer.topics[0].partitions[0]


def test_a_leader_whose_log_dir_fails_hands_leadership_to_the_isr(zookeeper: ZooKeeperServer, small_disk: str,
                                                                   tmp_path: Path) -> None:
    """KIP-112: the leader's disk fills up; its log dir goes offline, the controller elects a new
    leader from the ISR within seconds, the producer's sends go on with nothing duplicated or
    lost, and the broker keeps serving the partition in its healthy dir. Restarted with space
    again, it is a replica of the partition again."""
    healthy, small = str(tmp_path / "healthy"), os.path.join(small_disk, "data")
    with running_cluster(2, zookeeper=zookeeper) as cluster:
        troubled = cluster.add_broker(3, {"log.dirs": f"{healthy},{small}", "metrics.port": "0"})
        client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        for topic in ("kept", "doomed"):  # in this order: "kept" in the first dir, "doomed" in the small one
            client.create_topics([NewTopic(topic, -1, -1, replica_assignments={0: [3, 1, 2]})])
            wait_until(lambda t=topic: partition_state(cluster, t) == (3, [3, 1, 2], [3, 1, 2]),
                       message=f"{topic} led by broker 3 with a full ISR")
        client.close()
        # the controller writes a new topic's state with its full ISR before broker 3 opens the log
        wait_until(lambda: os.path.isdir(os.path.join(small, "doomed-0")) and os.path.isdir(
            os.path.join(healthy, "kept-0")), message="broker 3 to open kept in its first dir, doomed in the small one")

        with TimedSender(cluster, "doomed", "kept") as sender:  # "kept": a partition the failure spares
            wait_until(lambda: len(sender.values("doomed")) >= 200, timeout=30, message="records acknowledged")
            filled = time.monotonic()
            weight = ballast(small_disk, 0)
            new_leader = wait_new_leader(cluster, "doomed", 3)
            elected_after = time.monotonic() - filled
            acked_at_election = len(sender.values("doomed"))
            wait_until(lambda: len(sender.values("doomed")) >= acked_at_election + 200, timeout=30,
                       message="sends acknowledged by the new leader")
        silence = sender.longest_silence_after("doomed", filled)
        print(f"\nnew leader {new_leader} elected {elected_after:.2f} s after the disk filled; "
              f"longest time without acks {silence:.2f} s")
        assert not sender.failed, sender.failed[:3]
        assert elected_after < 15 and silence < 15

        for topic in ("doomed", "kept"):
            values = sender.values(topic)
            consumed = [m.value() for m in consume_partition(cluster.bootstrap, topic, 0, len(values))]
            assert len(consumed) == len(set(consumed)) == len(values), f"nothing duplicated in {topic}"
            assert consumed == sorted(consumed) and set(consumed) == set(values), f"{topic}: in order, nothing lost"

        for broker in cluster.brokers.values():
            wait_until(lambda b=broker: list(metadata_partition(b, "doomed").offline_replicas) == [3],
                       message=f"broker {broker.broker_id} to list broker 3's replica offline")
            described = metadata_partition(broker, "doomed")
            assert described.leader_id == new_leader and 3 not in described.isr_nodes
        with zookeeper_client(cluster) as zk:
            assert [child.split("-")[0] for child in zk.get_children("/logbus/offline_replicas")] == ["3"]
            wait_until(lambda: zk.get_children("/log_dir_event_notification") == [],
                       message="the controller took Kafka's log dir event notification")
        assert any("log dir failure reported by broker 3" in b.read_log() for b in cluster.brokers.values())
        assert scrape(troubled)[("kafka_log_logmanager_offlinelogdirectorycount", frozenset())] == 1
        assert partition_state(cluster, "kept")[0] == 3, "the partition in the healthy dir is still led there"
        assert troubled.running

        os.unlink(weight)  # space again: a restart brings the dir and its replica back
        assert troubled.stop() == 0
        troubled.start()
        wait_until(lambda: 3 in partition_state(cluster, "doomed")[2], timeout=FAILOVER_S, interval=0.2,
                   message="broker 3 back in the ISR")
        assert list(metadata_partition(troubled, "doomed").offline_replicas) == []

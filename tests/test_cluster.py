"""A replicated cluster: real ZooKeeper, three real broker processes, real clients.

Each test starts its own brokers in a fresh chroot of the session's ZooKeeper (tests/conftest.py). Timeouts are
short (zookeeper.session.timeout.ms 6000, replica.lag.time.max.ms 3000) so that failovers take
seconds; every wait polls a condition with a deadline.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator

from confluent_kafka import KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import QUIET, consume_partition, produce_all, read_values, wait_until

from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.testing import Cluster, running_cluster

FAILOVER_S = 30  # session expiry (6 s) plus election and client metadata refresh, with room



def admin(cluster: Cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})


def partition_state(cluster: Cluster, topic: str, index: int = 0) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, isr) as Metadata from the live brokers shows it (-1: no leader)."""
    try:
        found = admin(cluster).list_topics(topic, timeout=5).topics[topic].partitions[index]
    except Exception:  # noqa: BLE001 - a broker going away mid-request: ask again
        return -2, [], []
    return found.leader, list(found.replicas), list(found.isrs)


def create(cluster: Cluster, topic: str, partitions: int = 1, replication: int = 3, **configs: str) -> None:
    client = admin(cluster)
    client.create_topics([NewTopic(topic, partitions, replication, config=configs)])[topic].result(60)
    cluster.wait_ready([topic])


def segment_digests(cluster: Cluster, topic: str, index: int = 0) -> dict[int, str]:
    """Per broker holding the partition, a digest of its segment files (all of them, in order)."""
    digests = {}
    for broker_id, broker in cluster.brokers.items():
        directory = os.path.join(broker.data_dir, f"{topic}-{index}")
        if not os.path.isdir(directory):
            continue
        digest = hashlib.sha256()
        for name in sorted(os.listdir(directory)):
            if name.endswith(".log"):
                with open(os.path.join(directory, name), "rb") as handle:
                    digest.update(handle.read())
        digests[broker_id] = digest.hexdigest()
    return digests


def replicas_identical(cluster: Cluster, topic: str, index: int = 0) -> bool:
    return len(set(segment_digests(cluster, topic, index).values())) == 1


class Sender:
    """An idempotent acks=all producer that records what was acknowledged and what failed."""

    def __init__(self, cluster: Cluster, **config: str) -> None:
        self.producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 2, **QUIET, **config})
        self.acked: list[bytes] = []
        self.failed: list[KafkaError] = []

    def _delivered(self, error: KafkaError | None, message: object) -> None:
        if error is None:
            self.acked.append(message.value())  # type: ignore[attr-defined]
        else:
            self.failed.append(error)

    @contextlib.contextmanager
    def sending(self, topic: str, pause: float) -> Iterator[None]:
        """Produce numbered records to partition 0 in a thread (one every `pause` s at most)
        for the duration of the block; delivery reports are served by the same thread."""
        stop = threading.Event()

        def load() -> None:
            i = 0
            while not stop.is_set():
                self.producer.produce(topic, b"%s-%06d" % (topic.encode(), i), partition=0,
                                      on_delivery=self._delivered)
                self.producer.poll(pause)
                i += 1

        thread = threading.Thread(target=load)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def send(self, topic: str, values: list[bytes], timeout: float = 60) -> None:
        for value in values:
            self.producer.produce(topic, value, partition=0, on_delivery=self._delivered)
            self.producer.poll(0)
        assert self.producer.flush(timeout) == 0, "records still unacknowledged"


def wait_new_leader(cluster: Cluster, topic: str, old: int) -> int:
    return wait_until(lambda: (leader := partition_state(cluster, topic)[0]) not in (-1, -2, old) and leader,
                      timeout=FAILOVER_S, interval=0.2, message=f"a leader other than {old}")


def all_consumed(cluster: Cluster, topic: str, values: list[bytes]) -> None:
    got = [message.value() for message in consume_partition(cluster.bootstrap, topic, 0, len(values))]
    assert len(got) == len(set(got)), "duplicates"
    assert set(got) == set(values), f"missing {len(set(values) - set(got))} acknowledged records"


# ---------------------------------------------------------------------------- metadata and replication


def test_every_broker_describes_the_cluster_and_replicas_are_byte_identical(zookeeper: ZooKeeperServer) -> None:
    with running_cluster(3, zookeeper=zookeeper) as cluster:
        create(cluster, "spread", partitions=3)
        for broker in cluster.brokers.values():
            found = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET}).list_topics("spread", timeout=10)
            assert sorted(found.brokers) == [1, 2, 3]
            assert found.controller_id in (1, 2, 3)
            partitions = found.topics["spread"].partitions.values()
            assert sorted(p.leader for p in partitions) == [1, 2, 3], "leaders spread over the brokers"
            assert all(sorted(p.replicas) == [1, 2, 3] for p in partitions)
        sender = Sender(cluster)
        sender.send("spread", [b"v%05d" % i for i in range(2000)])
        assert not sender.failed
        wait_until(lambda: replicas_identical(cluster, "spread"), message="replicas identical")
        assert len(set(segment_digests(cluster, "spread").values())) == 1


def test_a_cluster_is_handed_over_once_every_broker_lists_every_broker(zookeeper: ZooKeeperServer) -> None:
    """running_cluster's readiness: no test starts on a broker that has not seen the others yet;
    wait_ready([topic]) also has every broker agree on a live leader of every partition."""
    with running_cluster(3, zookeeper=zookeeper) as cluster:
        for broker in cluster.brokers.values():
            assert sorted(AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
                          .list_topics(timeout=10).brokers) == [1, 2, 3]
        client = admin(cluster)
        client.create_topics([NewTopic("agreed", 3, 3)])["agreed"].result(20)
        cluster.wait_ready(["agreed"])
        leaders = [sorted((p.id, p.leader) for p in AdminClient({"bootstrap.servers": b.bootstrap, **QUIET})
                          .list_topics("agreed", timeout=10).topics["agreed"].partitions.values())
                   for b in cluster.brokers.values()]
        assert leaders[0] == leaders[1] == leaders[2] and all(leader in (1, 2, 3) for _, leader in leaders[0])


def test_a_killed_leader_is_replaced_from_the_isr_and_nothing_acknowledged_is_lost(
        zookeeper: ZooKeeperServer) -> None:
    with running_cluster(3, {"min.insync.replicas": "2"}, zookeeper=zookeeper) as cluster:
        create(cluster, "chase")
        sender = Sender(cluster)
        epochs = []
        for round_ in range(2):
            sender.send("chase", [b"%d-%05d" % (round_, i) for i in range(1500)])
            leader = partition_state(cluster, "chase")[0]
            epochs.append(admin(cluster).list_topics("chase", timeout=5).topics["chase"].partitions[0])
            cluster.brokers[leader].kill()
            wait_new_leader(cluster, "chase", leader)
            cluster.brokers[leader].start()
        sender.send("chase", [b"last-%05d" % i for i in range(500)])
        assert not sender.failed, sender.failed[:3]
        all_consumed(cluster, "chase", sender.acked)
        wait_until(lambda: len(partition_state(cluster, "chase")[2]) == 3, timeout=FAILOVER_S,
                   message="the restarted brokers back in the ISR")
        wait_until(lambda: replicas_identical(cluster, "chase"), message="replicas identical")


def test_a_follower_catches_up_on_a_log_its_leader_has_compacted(zookeeper: ZooKeeperServer) -> None:
    """Compaction thins batches (records gone, offsets kept): a follower must take them as they are."""
    cleaner = {"log.cleaner.backoff.ms": "50", "log.cleaner.min.cleanable.ratio": "0.01"}
    with running_cluster(3, cleaner, zookeeper=zookeeper) as cluster:
        create(cluster, "thinned", **{"cleanup.policy": "compact", "segment.bytes": "2048"})
        leader, replicas, _ = partition_state(cluster, "thinned")
        follower = next(b for b in replicas if b != leader)
        cluster.brokers[follower].kill()
        for round_ in range(30):  # a batch per round, half of it overwritten by the next: thinned by cleaning
            records = [(b"shared-%d" % k, b"round %d" % round_ * 20) for k in range(5)]
            records += [(b"own-%d-%d" % (round_, k), b"round %d" % round_ * 20) for k in range(5)]
            produce_all(cluster.bootstrap, "thinned", records, acks="all")

        def cleaned() -> bool:
            end = lambda _, consumer: consumer.position([TopicPartition("thinned", 0)])[0].offset >= 300  # noqa: E731
            return len(read_values(cluster.bootstrap, [("thinned", 0)], end)) < 300

        wait_until(cleaned, timeout=FAILOVER_S, interval=0.5, message="the leader compacting the log")
        wait_until(lambda: follower not in admin(cluster).list_topics(timeout=5).brokers, timeout=FAILOVER_S,
                   message="the killed follower's session expired")
        cluster.brokers[follower].start()
        wait_until(lambda: follower in partition_state(cluster, "thinned")[2], timeout=FAILOVER_S,
                   message="the follower back in the ISR after fetching the compacted log")


def test_a_new_controller_takes_over_and_handles_the_next_failure(zookeeper: ZooKeeperServer) -> None:
    with running_cluster(3, zookeeper=zookeeper) as cluster:
        create(cluster, "ctl")
        controller = admin(cluster).list_topics(timeout=5).controller_id
        cluster.brokers[controller].kill()
        wait_until(lambda: admin(cluster).list_topics(timeout=5).controller_id not in (-1, controller),
                   timeout=FAILOVER_S, interval=0.2, message="a new controller")
        # its leader (or, if that was the controller, the one elected in its place; until then
        # Metadata may show no leader)
        leader = wait_new_leader(cluster, "ctl", controller)
        cluster.brokers[leader].kill()
        survivor = wait_new_leader(cluster, "ctl", leader)
        assert survivor not in (controller, leader)


def test_without_enough_in_sync_replicas_acks_all_is_refused_and_acks_1_works(zookeeper: ZooKeeperServer) -> None:
    with running_cluster(3, {"min.insync.replicas": "2"}, zookeeper=zookeeper) as cluster:
        create(cluster, "few")
        leader = partition_state(cluster, "few")[0]
        for broker_id, broker in cluster.brokers.items():
            if broker_id != leader:
                broker.kill()
        wait_until(lambda: partition_state(cluster, "few")[2] == [leader], timeout=FAILOVER_S, interval=0.2,
                   message="the ISR shrunk to the leader")
        strict = Sender(cluster, **{"message.timeout.ms": "5000", "retries": "0", "enable.idempotence": "false"})
        strict.producer.produce("few", b"all", partition=0, on_delivery=strict._delivered)
        strict.producer.flush(15)
        assert [e.code() for e in strict.failed] == [KafkaError.NOT_ENOUGH_REPLICAS]
        relaxed = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", **QUIET})
        delivered = []
        relaxed.produce("few", b"one", partition=0, on_delivery=lambda e, m: delivered.append(e))
        relaxed.flush(15)
        assert delivered == [None]


def test_no_unclean_election_keeps_the_partition_offline_until_its_last_leader_returns(
        zookeeper: ZooKeeperServer) -> None:
    with running_cluster(2, zookeeper=zookeeper) as cluster:
        create(cluster, "clean", replication=2)
        leader = partition_state(cluster, "clean")[0]
        follower = 3 - leader
        cluster.brokers[follower].stop()
        wait_until(lambda: partition_state(cluster, "clean")[2] == [leader], timeout=FAILOVER_S,
                   interval=0.2, message="the follower out of the ISR")
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", **QUIET})
        for i in range(100):
            producer.produce("clean", b"only-on-the-leader-%d" % i, partition=0)
        assert producer.flush(15) == 0
        cluster.brokers[leader].kill()
        cluster.brokers[follower].start()
        wait_until(lambda: partition_state(cluster, "clean")[0] == -1, timeout=FAILOVER_S, interval=0.2,
                   message="the partition offline")
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # the stale follower must not become the leader
            assert partition_state(cluster, "clean")[0] in (-1, -2)
            time.sleep(0.2)
        cluster.brokers[leader].start()
        assert wait_new_leader(cluster, "clean", -1) == leader
        assert len(consume_partition(cluster.bootstrap, "clean", 0, 100)) == 100


def test_a_cut_off_leader_truncates_what_it_alone_appended(zookeeper: ZooKeeperServer) -> None:
    with running_cluster(3, {"min.insync.replicas": "1"}, zookeeper=zookeeper) as cluster:
        create(cluster, "diverge")
        Sender(cluster).send("diverge", [b"shared-%d" % i for i in range(100)])
        wait_until(lambda: replicas_identical(cluster, "diverge"), message="replicas identical")
        leader = partition_state(cluster, "diverge")[0]
        old = cluster.brokers[leader]
        followers = [b for i, b in cluster.brokers.items() if i != leader]
        for broker in followers:
            broker.process.send_signal(signal.SIGSTOP)
        lonely = Producer({"bootstrap.servers": old.bootstrap, "acks": "1", **QUIET})
        for i in range(50):
            lonely.produce("diverge", b"lost-%d" % i, partition=0)
        assert lonely.flush(10) == 0
        old.process.send_signal(signal.SIGSTOP)
        for broker in followers:
            broker.process.send_signal(signal.SIGCONT)
        wait_new_leader(cluster, "diverge", leader)
        survivor = Sender(cluster, **{"enable.idempotence": "false", "acks": "1"})
        survivor.send("diverge", [b"after-%d" % i for i in range(30)])
        old.process.send_signal(signal.SIGCONT)
        wait_until(lambda: replicas_identical(cluster, "diverge"), timeout=FAILOVER_S, interval=0.2,
                   message="the old leader truncated and caught up")
        # acks=1 promises nothing about records only the leader had. A follower fetch already
        # waiting on the old leader when the followers were paused can carry some of the lonely
        # records into their socket buffers: any prefix of them (a fetch answers with what the
        # log holds when it returns), and the new leader keeps what it had. What Kafka does
        # guarantee: no replica differs, the log is shared + a prefix of lost + after, in order.
        everything = wait_until(lambda: (values := _read_to_end(cluster, "diverge"))[-1:] == [b"after-29"] and values,
                                message="the high watermark past the last record")
        shared = [b"shared-%d" % i for i in range(100)]
        after = [b"after-%d" % i for i in range(30)]
        kept = len(everything) - len(shared) - len(after)
        assert 0 <= kept <= 50, f"{kept} records beyond shared and after"
        assert everything == shared + [b"lost-%d" % i for i in range(kept)] + after


# ---------------------------------------------------------------------------- membership


def test_a_broker_id_in_use_is_refused_and_a_foreign_data_dir_too(zookeeper: ZooKeeperServer,
                                                                   tmp_path: os.PathLike) -> None:
    with running_cluster(1, zookeeper=zookeeper) as cluster:
        command = [sys.executable, "-m", "logbus", "serve", "--data-dir", str(tmp_path / "twin"), "--port", "0",
                   "--broker-id", "1", "--set", f"zookeeper.connect={cluster.config['zookeeper.connect']}"]
        twin = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert twin.returncode != 0
        assert "broker id 1 is registered by another live broker" in twin.stderr
        foreign = cluster.brokers[1].data_dir
        cluster.brokers[1].stop()
        command[5] = foreign
        command[-1] = f"zookeeper.connect={zookeeper.connect_string}/another-cluster"
        other = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert other.returncode != 0
        assert "cluster" in other.stderr and "meta.properties" in other.stderr


def test_a_rolling_restart_under_acks_all_load_fails_no_send(zookeeper: ZooKeeperServer) -> None:
    with running_cluster(3, {"min.insync.replicas": "2"}, zookeeper=zookeeper) as cluster:
        create(cluster, "rolling")
        sender = Sender(cluster, **{"message.timeout.ms": "60000"})
        with sender.sending("rolling", pause=0.002):
            for broker_id, broker in cluster.brokers.items():
                assert broker.stop() == 0
                broker.start()
                wait_until(lambda b=broker_id: b in partition_state(cluster, "rolling")[2], timeout=FAILOVER_S,
                           interval=0.2, message=f"broker {broker_id} back in the ISR")
        assert sender.producer.flush(60) == 0
        assert not sender.failed, sender.failed[:3]
        all_consumed(cluster, "rolling", sender.acked)


def test_a_consumer_group_keeps_its_offsets_when_its_coordinator_dies(zookeeper: ZooKeeperServer) -> None:
    from confluent_kafka import Consumer

    with running_cluster(3, zookeeper=zookeeper) as cluster:
        create(cluster, "grouped")
        Sender(cluster).send("grouped", [b"g-%d" % i for i in range(20)])
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "survivors",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest", **QUIET})
        consumer.assign([TopicPartition("grouped", 0, 0)])
        wait_until(lambda: consumer.poll(0.5) is not None, message="a record")
        consumer.commit(offsets=[TopicPartition("grouped", 0, 12)], asynchronous=False)
        consumer.close()
        coordinator = _coordinator(cluster, "survivors")
        cluster.brokers[coordinator].kill()

        def committed() -> int:
            probe = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "survivors", **QUIET})
            try:
                return probe.committed([TopicPartition("grouped", 0)], timeout=5)[0].offset
            except Exception:  # noqa: BLE001 - coordinator moving: ask again
                return -1
            finally:
                probe.close()

        wait_until(lambda: committed() == 12, timeout=FAILOVER_S, interval=0.5,
                   message="the committed offset from the new coordinator")


def _read_to_end(cluster: Cluster, topic: str) -> list[bytes]:
    """Every record of partition 0 up to its high watermark."""
    from confluent_kafka import Consumer

    probe = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "probe", **QUIET})
    try:
        _, high = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        probe.close()
    return [m.value() for m in consume_partition(cluster.bootstrap, topic, 0, high)]


def _coordinator(cluster: Cluster, group: str, skip: int = -1) -> int:
    """The group's coordinator as FindCoordinator answers it (asking a broker other than `skip`)."""
    from helpers import raw_request

    asked = next(b.bootstrap for i, b in cluster.brokers.items() if b.running and i != skip)
    try:
        answer = raw_request(asked, 10, 3, key=group, key_type=0)
    except (OSError, AssertionError):
        return -1
    return answer.node_id if answer.error_code == 0 else -1


def test_unclean_election_brings_a_stale_replica_back_and_counts_the_loss(zookeeper: ZooKeeperServer) -> None:
    with running_cluster(2, zookeeper=zookeeper) as cluster:
        create(cluster, "unclean", replication=2, **{"unclean.leader.election.enable": "true"})
        leader = partition_state(cluster, "unclean")[0]
        follower = 3 - leader
        Sender(cluster).send("unclean", [b"both-%d" % i for i in range(10)])
        wait_until(lambda: replicas_identical(cluster, "unclean"), message="replicas identical")
        cluster.brokers[follower].stop()
        wait_until(lambda: partition_state(cluster, "unclean")[2] == [leader], timeout=FAILOVER_S,
                   interval=0.2, message="the follower out of the ISR")
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", **QUIET})
        for i in range(20):
            producer.produce("unclean", b"lost-%d" % i, partition=0)
        assert producer.flush(15) == 0
        cluster.brokers[leader].kill()
        cluster.brokers[follower].start()
        assert wait_new_leader(cluster, "unclean", leader) == follower
        values = [m.value() for m in consume_partition(cluster.bootstrap, "unclean", 0, 10)]
        assert values == [b"both-%d" % i for i in range(10)], "the stale replica leads with what it had"


def test_racks_are_advertised_and_replicas_spread_over_them(zookeeper: ZooKeeperServer) -> None:
    with running_cluster(0, zookeeper=zookeeper) as cluster:
        racks = {1: "a", 2: "a", 3: "b", 4: "b"}
        cluster.add_brokers(racks, {broker_id: {"broker.rack": rack} for broker_id, rack in racks.items()})
        cluster.wait_ready()
        found = admin(cluster).list_topics(timeout=10)
        assert len(found.brokers) == 4
        create(cluster, "racked", partitions=8, replication=2)
        partitions = admin(cluster).list_topics("racked", timeout=10).topics["racked"].partitions.values()
        assert all({racks[r] for r in p.replicas} == {"a", "b"} for p in partitions), "one replica per rack"
        assert found.brokers[1].host == "127.0.0.1"


def test_an_unreachable_zookeeper_stops_the_broker_in_time(tmp_path: os.PathLike) -> None:
    from logbus.testing import free_test_port

    command = [sys.executable, "-m", "logbus", "serve", "--data-dir", str(tmp_path / "data"), "--port", "0",
               "--set", f"zookeeper.connect=127.0.0.1:{free_test_port()}",
               "--set", "zookeeper.connection.timeout.ms=1500"]
    began = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "cannot reach ZooKeeper" in done.stderr
    assert time.monotonic() - began < 15


def test_leadership_returns_to_the_preferred_replica(zookeeper: ZooKeeperServer) -> None:
    config = {"leader.imbalance.check.interval.seconds": "1", "leader.imbalance.per.broker.percentage": "0"}
    with running_cluster(3, config, zookeeper=zookeeper) as cluster:
        create(cluster, "preferred")
        _, replicas, _ = partition_state(cluster, "preferred")
        preferred = replicas[0]
        cluster.brokers[preferred].kill()
        wait_new_leader(cluster, "preferred", preferred)
        cluster.brokers[preferred].start()
        wait_until(lambda: partition_state(cluster, "preferred")[0] == preferred, timeout=FAILOVER_S,
                   interval=0.2, message="the preferred replica leading again")


def _consecutive_free_ports(count: int) -> int:
    from logbus.testing import free_test_port

    return free_test_port(count)


def test_cluster_up_starts_zookeeper_and_brokers_and_ctrl_c_stops_them(tmp_path: os.PathLike) -> None:
    base = _consecutive_free_ports(6)
    metrics_base = base + 3
    command = [sys.executable, "-m", "logbus", "cluster", "up", "--brokers", "3", "--data-dir", str(tmp_path),
               "--base-port", str(base), "--metrics-base-port", str(metrics_base),
               "--set", "zookeeper.session.timeout.ms=6000"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        bootstrap = ""
        deadline = time.monotonic() + 60
        assert process.stdout is not None
        while time.monotonic() < deadline and not bootstrap:
            line = process.stdout.readline()
            assert line, "cluster up exited before serving"
            if line.startswith("bootstrap servers: "):
                bootstrap = line.split(": ", 1)[1].strip()
        assert bootstrap == ",".join(f"127.0.0.1:{base + i}" for i in range(3))
        client = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        client.create_topics([NewTopic("tried", 1, 3)])["tried"].result(20)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **QUIET})
        producer.produce("tried", b"replicated", partition=0)
        assert producer.flush(20) == 0
        described = subprocess.run([sys.executable, "-m", "logbus", "cluster", "describe", "--bootstrap-server",
                                    bootstrap], capture_output=True, text=True, timeout=60)
        assert described.returncode == 0, described.stderr
        assert "Brokers: 3" in described.stdout and "Controller: " in described.stdout
        topics = subprocess.run([sys.executable, "-m", "logbus", "topics", "describe", "tried", "--bootstrap-server",
                                 bootstrap], capture_output=True, text=True, timeout=60)
        assert "ReplicationFactor: 3" in topics.stdout and "Isr: " in topics.stdout, topics.stdout + topics.stderr
        for port in range(metrics_base, metrics_base + 3):  # every broker serves its metrics
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
                assert b"kafka_server_replicamanager_partitioncount 1.0" in answer.read()
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=90)
    assert process.returncode == 0, output
    assert "cluster stopped" in output
    assert not any(_listening(base + i) for i in range(3)), "a broker still listens"


class ClusterUp:
    """`logbus cluster up` as a subprocess, its output read line by line in a thread."""

    def __init__(self, data_dir: str, brokers: int, *options: str) -> None:
        self.base = _consecutive_free_ports(brokers)
        command = [sys.executable, "-m", "logbus", "cluster", "up", "--brokers", str(brokers), "--data-dir",
                   data_dir, "--base-port", str(self.base), *options]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_line(self, prefix: str, timeout: float = 60) -> str:
        """The first output line starting with `prefix`, once there is one."""
        def found() -> str | None:
            assert self.process.poll() is None or any(line.startswith(prefix) for line in self.lines), \
                "cluster up exited:\n" + "\n".join(self.lines)
            return next((line for line in self.lines if line.startswith(prefix)), None)
        return wait_until(found, timeout=timeout, interval=0.1, message=f"a line starting {prefix!r}")

    def interrupt(self) -> int:
        """SIGINT, as Ctrl-C; the exit code once `up` has stopped everything."""
        self.process.send_signal(signal.SIGINT)
        code = self.process.wait(90)
        self._reader.join(10)
        return code


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _broker_ids(port: int) -> set[int]:
    from helpers import raw_request

    return {b.node_id for b in raw_request(f"127.0.0.1:{port}", 3, 12, topics=None, allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False).brokers}


def test_cluster_up_restarts_a_killed_broker_while_the_others_serve(tmp_path: os.PathLike) -> None:
    """kill -9 of one broker of `cluster up`: the others keep serving, the output names the dead
    broker and its signal, and the broker is back once ZooKeeper has expired its session. A
    broker that cannot start again is reported and left down, not restarted in a loop. Then
    Ctrl-C stops everything, the restarted broker and ZooKeeper included."""
    up = ClusterUp(str(tmp_path), 3, "--metrics-base-port", "0", "--set", "zookeeper.session.timeout.ms=4000")
    pids: list[int] = []
    try:
        up.wait_line("bootstrap servers: ")
        zookeeper_port = int(up.wait_line("logbus cluster of 3").split("127.0.0.1:")[1].split("/")[0])
        pids = [int(up.wait_line(f"broker {n}: ").rsplit(" ", 1)[1]) for n in (1, 2, 3)]
        first, killed, third = (up.base + i for i in range(3))
        wait_until(lambda: _broker_ids(first) == {1, 2, 3}, timeout=FAILOVER_S, message="three registered brokers")
        os.kill(pids[1], signal.SIGKILL)
        up.wait_line(f"logbus: broker 2 (pid {pids[1]}) was killed by SIGKILL")
        assert up.process.poll() is None, "cluster up stopped with its broker"
        assert _broker_ids(first) >= {1, 3} and _broker_ids(third) >= {1, 3}  # the others keep serving
        restarted = int(up.wait_line("logbus: broker 2 restarted (pid ", timeout=FAILOVER_S).split("pid ")[1][:-1])
        pids.append(restarted)
        up.wait_line("logbus: broker 2 is serving again", timeout=FAILOVER_S)
        assert _listening(killed)
        wait_until(lambda: _broker_ids(first) == {1, 2, 3}, timeout=FAILOVER_S, message="broker 2 registered again")
        assert _broker_ids(killed) == {1, 2, 3}
        # a broker that cannot start again (its data dir now names another cluster) is left down
        meta = os.path.join(str(tmp_path), "broker-3", "data", "meta.properties")
        with open(meta, "w", encoding="utf-8") as handle:
            handle.write("version=0\nbroker.id=3\ncluster.id=another-cluster\n")
        os.kill(pids[2], signal.SIGTERM)
        up.wait_line(f"logbus: broker 3 (pid {pids[2]}) exited with code 0")
        pids.append(int(up.wait_line("logbus: broker 3 restarted (pid ", timeout=FAILOVER_S).split("pid ")[1][:-1]))
        up.wait_line("logbus: broker 3 exited before serving: not restarting it", timeout=FAILOVER_S)
        assert up.process.poll() is None
        wait_until(lambda: _broker_ids(first) == {1, 2}, timeout=FAILOVER_S, message="broker 3 gone, 1 and 2 serving")
    finally:
        code = up.interrupt()
    output = "\n".join(up.lines)
    assert code == 0 and "cluster stopped" in output, output
    assert not any(_listening(up.base + i) for i in range(3)), "a broker still listens"
    assert not _listening(zookeeper_port), "ZooKeeper still listens"
    wait_until(lambda: not any(_alive(pid) for pid in pids), timeout=10, message="every broker process gone")


def _listening(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_leaders_keep_serving_while_zookeeper_is_down_and_metadata_changes_resume_after() -> None:
    with running_cluster(3, {"min.insync.replicas": "2"}) as cluster:
        create(cluster, "outage")
        sender = Sender(cluster, **{"message.timeout.ms": "30000"})
        sender.send("outage", [b"before-%d" % i for i in range(100)])
        cluster.zookeeper.stop()
        began = time.monotonic()
        batch = 0
        while time.monotonic() - began < 10:  # ZooKeeper stays down 10 s; acks=all keeps working
            sender.send("outage", [b"during-%d-%d" % (batch, i) for i in range(50)], 15)
            batch += 1
            time.sleep(0.1)  # pacing the load (a few thousand records), not waiting for anything
        assert not sender.failed, sender.failed[:3]
        all_consumed(cluster, "outage", sender.acked)
        cluster.zookeeper.start()
        client = admin(cluster)
        wait_until(lambda: _created(client, "after-outage"), timeout=FAILOVER_S, interval=0.5,
                   message="a topic created once ZooKeeper is back")


def _created(client: AdminClient, topic: str) -> bool:
    try:
        client.create_topics([NewTopic(topic, 1, 3)])[topic].result(10)
    except Exception as exc:  # noqa: BLE001 - not yet: ZooKeeper sessions being re-established
        return "already exists" in str(exc)
    return True


def test_a_fourth_broker_takes_over_a_replica_by_reassignment_under_load(zookeeper: ZooKeeperServer) -> None:
    from helpers import RawConnection
    from kio.index import load_payload_module
    from kio.static.constants import EntityType

    with running_cluster(3, {"min.insync.replicas": "2"}, zookeeper=zookeeper) as cluster:
        create(cluster, "moving")
        cluster.add_broker(4)
        sender = Sender(cluster)
        sender.send("moving", [b"before-%d" % i for i in range(500)])
        _, replicas, _ = partition_state(cluster, "moving")
        target = tuple([b for b in replicas if b != replicas[0]] + [4])  # the preferred leader leaves
        module = load_payload_module(45, 0, EntityType.request)
        with RawConnection(cluster.brokers[1].bootstrap) as connection:
            answer = connection.call(45, 0, timeout=datetime.timedelta(seconds=10), topics=(
                module.ReassignableTopic(name="moving", partitions=(
                    module.ReassignablePartition(partition_index=0, replicas=target),)),))
        assert answer.responses[0].partitions[0].error_code == 0
        for round_ in range(10):  # keep producing while the new replica catches up and the old one leaves
            sender.send("moving", [b"during-%d-%d" % (round_, i) for i in range(100)])
        wait_until(lambda: sorted(partition_state(cluster, "moving")[1]) == sorted(target), timeout=FAILOVER_S,
                   interval=0.2, message="the replicas of the target assignment")
        leader, replicas, isr = partition_state(cluster, "moving")
        assert leader in target and set(isr) <= set(target)
        sender.send("moving", [b"after-%d" % i for i in range(100)])
        assert not sender.failed, sender.failed[:3]
        all_consumed(cluster, "moving", sender.acked)
        digests = segment_digests_of(cluster, "moving", target)
        wait_until(lambda: len(set(segment_digests_of(cluster, "moving", target).values())) == 1,
                   message="the new replica identical to the others")
        assert len(digests) == 3


def segment_digests_of(cluster: Cluster, topic: str, brokers: tuple[int, ...]) -> dict[int, str]:
    return {b: d for b, d in segment_digests(cluster, topic).items() if b in brokers}


def test_a_coordinator_that_loses_and_regains_leadership_serves_fresh_offsets(zookeeper: ZooKeeperServer) -> None:
    from confluent_kafka import Consumer

    config = {"leader.imbalance.check.interval.seconds": "1", "leader.imbalance.per.broker.percentage": "0"}
    with running_cluster(3, config, zookeeper=zookeeper) as cluster:
        create(cluster, "fresh")

        def commit(offset: int) -> None:
            consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "fresh-group",
                                 "enable.auto.commit": False, **QUIET})
            try:
                wait_until(lambda: _committed_ok(consumer, offset), timeout=FAILOVER_S, interval=0.5,
                           message=f"offset {offset} committed")
            finally:
                consumer.close()

        commit(5)
        coordinator = _coordinator(cluster, "fresh-group")
        paused = cluster.brokers[coordinator]
        paused.process.send_signal(signal.SIGSTOP)  # its session expires: leadership moves away
        try:
            wait_until(lambda: _coordinator(cluster, "fresh-group", skip=coordinator) not in (-1, coordinator),
                       timeout=FAILOVER_S, interval=0.5, message="another coordinator")
            commit(9)
        finally:
            paused.process.send_signal(signal.SIGCONT)
        wait_until(lambda: _coordinator(cluster, "fresh-group") == coordinator, timeout=FAILOVER_S, interval=0.5,
                   message="the preferred leader coordinating again")
        probe = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "fresh-group", **QUIET})
        try:
            wait_until(lambda: _committed(probe) == 9, timeout=FAILOVER_S, interval=0.5,
                       message="the offset committed elsewhere, read back by the returning coordinator")
        finally:
            probe.close()


def _committed_ok(consumer: object, offset: int) -> bool:
    try:
        consumer.commit(offsets=[TopicPartition("fresh", 0, offset)], asynchronous=False)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - coordinator moving: try again
        return False
    return True


def _committed(consumer: object) -> int:
    try:
        return consumer.committed([TopicPartition("fresh", 0)], timeout=5)[0].offset  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - coordinator moving: ask again
        return -1


def test_chasing_the_leader_loses_and_duplicates_nothing(zookeeper: ZooKeeperServer) -> None:
    """Kafka's replication system test: leaders killed (SIGKILL x5) and stopped (SIGTERM x5) under
    an idempotent acks=all producer; every acknowledged record is read once, replicas end identical."""
    with running_cluster(3, {"min.insync.replicas": "2"}, zookeeper=zookeeper) as cluster:
        create(cluster, "chased")
        sender = Sender(cluster, **{"message.timeout.ms": "120000"})
        with sender.sending("chased", pause=0.005):
            for round_ in range(10):
                leader = wait_until(lambda: (found := partition_state(cluster, "chased")[0]) > 0 and found,
                                    timeout=FAILOVER_S, message="a leader")
                broker = cluster.brokers[leader]
                if round_ % 2:
                    assert broker.stop() == 0
                else:
                    broker.kill()
                wait_new_leader(cluster, "chased", leader)
                broker.start()
                wait_until(lambda b=leader: b in partition_state(cluster, "chased")[2], timeout=FAILOVER_S,
                           interval=0.2, message=f"broker {leader} back in the ISR")
        assert sender.producer.flush(120) == 0
        assert not sender.failed, sender.failed[:3]
        assert len(sender.acked) > 100
        all_consumed(cluster, "chased", sender.acked)
        wait_until(lambda: replicas_identical(cluster, "chased"), timeout=FAILOVER_S, message="replicas identical")

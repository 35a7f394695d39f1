"""A cluster through ZooKeeper outages: sessions kept, concise logs, admin requests answered, and a
broker restarted after a crash waiting for its old registration."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from helpers import QUIET, RawConnection, wait_until
from kazoo.client import KazooClient
from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType
from test_cluster import Sender, all_consumed, create, partition_state

from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.testing import Cluster, free_test_port, running_cluster


class ZooKeeperLink:
    """A TCP relay from a loopback port to ZooKeeper that can be cut: while cut, new connections
    are refused, but ZooKeeper runs on and its sessions' clocks with it (a network partition,
    which a restarted ZooKeeper is not: it grants its sessions a new timeout).

    `outage(seconds)` cuts the open connection right after the next request it carries (a
    client pings every third of its session timeout), so the session's clock starts then, and
    restores the link `seconds` later: the session expires `timeout - seconds` after that.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_test_port()
        self.restored = threading.Event()
        self._listener: socket.socket | None = None
        self._outage_s: float | None = None
        self._lock = threading.Lock()
        self.restore()

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        self.restored.set()

    def outage(self, seconds: float) -> None:
        self.restored.clear()
        self._close_listener()
        with self._lock:
            self._outage_s = seconds

    def close(self) -> None:
        self._close_listener()

    def _close_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.shutdown(socket.SHUT_RDWR)
            listener.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:  # ZooKeeper itself is down: refused, as it would be
                client.close()
                continue
            server.settimeout(None)
            threading.Thread(target=self._requests, args=(client, server), daemon=True).start()
            threading.Thread(target=_pump, args=(server, client), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket) -> None:
        """Relay the client's requests; in an outage, drop the connection after the next one."""
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                server.sendall(data)
                with self._lock:
                    outage_s, self._outage_s = self._outage_s, None
                if outage_s is not None:
                    threading.Timer(outage_s, self.restore).start()
                    break
        for sock in (client, server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def linked_cluster(zookeeper: ZooKeeperServer, size: int, config: dict[str, str]) -> Iterator[
        tuple[Cluster, dict[int, ZooKeeperLink], KazooClient]]:
    """`size` brokers, each reaching ZooKeeper through a link of its own that can be cut, and a
    ZooKeeper client on the cluster's chroot that does not go through them."""
    links = {broker_id: ZooKeeperLink(zookeeper.port) for broker_id in range(1, size + 1)}
    chroot = f"/outage-{uuid.uuid4().hex[:8]}"
    client = KazooClient(hosts=f"{zookeeper.connect_string}{chroot}")
    try:
        with running_cluster(0, config, zookeeper=zookeeper) as cluster:
            for broker_id, link in links.items():
                cluster.add_broker(broker_id, {"zookeeper.connect": f"127.0.0.1:{link.port}{chroot}"})
            client.start(10)
            yield cluster, links, client
    finally:
        for link in links.values():
            link.close()
        client.stop()
        client.close()


def registration_owners(client: KazooClient) -> dict[int, int]:
    """Broker id -> the ZooKeeper session that owns its registration."""
    return {int(child): client.exists(f"/brokers/ids/{child}").ephemeralOwner
            for child in client.get_children("/brokers/ids")}


def state_version(client: KazooClient, topic: str, index: int = 0) -> int:
    """The partition state znode's version: it moves with every leader or ISR change."""
    return client.exists(f"/brokers/topics/{topic}/partitions/{index}/state").version


def reconnections(cluster: Cluster) -> dict[int, int]:
    return {broker_id: broker.read_log().count("ZooKeeper connected, session") for broker_id, broker
            in cluster.brokers.items()}


def test_an_outage_shorter_than_the_session_timeout_expires_no_session_and_changes_no_isr(
        zookeeper: ZooKeeperServer) -> None:
    """Brokers reconnect at most about a second after ZooKeeper is reachable again, so a 9.5 s
    outage does not cost a 12 s session (kazoo's default pause had doubled to ~6 s, then ~13 s)."""
    config = {"zookeeper.session.timeout.ms": "12000", "min.insync.replicas": "2",
              "offsets.topic.replication.factor": "3"}
    with linked_cluster(zookeeper, 3, config) as (cluster, links, client):
        create(cluster, "steady")
        owners, version = registration_owners(client), state_version(client, "steady")
        before = reconnections(cluster)
        sender = Sender(cluster, **{"message.timeout.ms": "30000"})
        with sender.sending("steady", 0.005):
            for link in links.values():
                link.outage(9.5)
            wait_until(lambda: all(link.restored.is_set() for link in links.values()), timeout=30,
                       interval=0.2, message="every link restored")
            wait_until(lambda: all(n > before[b] for b, n in reconnections(cluster).items()), timeout=20,
                       interval=0.2, message="every broker reconnected")
        assert registration_owners(client) == owners, "a session expired"
        assert state_version(client, "steady") == version, "the leader or the ISR changed"
        assert not sender.failed, sender.failed[:3]
        all_consumed(cluster, "steady", sender.acked)
        for broker in cluster.brokers.values():
            assert "session lost" not in broker.read_log()


def tracebacks(cluster: Cluster) -> dict[int, int]:
    return {broker_id: broker.read_log().count("Traceback") for broker_id, broker in cluster.brokers.items()}


def test_an_outage_and_topic_deletions_log_no_traceback() -> None:
    """A follower out of the ISR catches up while ZooKeeper is down: its leader's ISR change
    fails, is retried with a pause and logged in one line, not with a traceback per fetch; topic
    deletions log none either."""
    config = {"zookeeper.session.timeout.ms": "12000", "min.insync.replicas": "1"}
    with running_cluster(2, config) as cluster:
        client = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
        for name in ("gone-1", "gone-2", "gone-3"):
            create(cluster, name, replication=2)
        for future in client.delete_topics(["gone-1", "gone-2", "gone-3"], operation_timeout=20).values():
            future.result(30)
        create(cluster, "lagging", replication=2)
        leader, replicas, _ = partition_state(cluster, "lagging")
        follower = next(b for b in replicas if b != leader)
        sender = Sender(cluster)  # its producer id taken before the outage
        sender.send("lagging", [b"before-%d" % i for i in range(100)])
        os.kill(cluster.brokers[follower].process.pid, signal.SIGSTOP)
        try:
            sender.send("lagging", [b"stopped-%d" % i for i in range(10)])  # the stopped follower lags
            wait_until(lambda: partition_state(cluster, "lagging")[2] == [leader], timeout=20, interval=0.2,
                       message="the stopped follower out of the ISR")
            cluster.zookeeper.stop()
        finally:
            os.kill(cluster.brokers[follower].process.pid, signal.SIGCONT)
        sender.send("lagging", [b"during-%d" % i for i in range(100)])
        time.sleep(4)  # the outage: the follower fetches and catches up meanwhile
        cluster.zookeeper.start()
        wait_until(lambda: sorted(partition_state(cluster, "lagging")[2]) == sorted(replicas), timeout=30,
                   interval=0.2, message="the follower back in the ISR")
        assert tracebacks(cluster) == {1: 0, 2: 0}, cluster.brokers[leader].read_log()[-5000:]
        assert cluster.brokers[leader].read_log().count("cannot change the ISR") <= 3


def _requests_that_write_zookeeper() -> list[tuple[str, int, int, dict[str, Any]]]:
    """(name, api key, version, fields) of a request of each kind that writes ZooKeeper."""
    def module(key: int, version: int) -> Any:
        return load_payload_module(key, version, EntityType.request)

    timeout = datetime.timedelta(seconds=5)
    topics, partitions = module(19, 5), module(37, 1)
    configs, acls, elect, move = module(44, 1), module(30, 2), module(43, 2), module(45, 0)
    quotas, scram = module(49, 1), module(51, 0)
    return [
        ("ElectLeaders", 43, 2, {"election_type": 0, "timeout": timeout, "topic_partitions": (
            elect.TopicPartitions(topic="moved", partitions=(0,)),)}),
        ("AlterPartitionReassignments", 45, 0, {"timeout": timeout, "topics": (move.ReassignableTopic(
            name="moved", partitions=(move.ReassignablePartition(partition_index=0, replicas=(1, 2)),)),)}),
        ("CreateTopics", 19, 5, {"timeout": timeout, "validate_only": False, "topics": (topics.CreatableTopic(
            name="new", num_partitions=1, replication_factor=2, assignments=(), configs=()),)}),
        ("DeleteTopics", 20, 4, {"timeout": timeout, "topic_names": ("moved",)}),
        ("CreatePartitions", 37, 1, {"timeout": timeout, "validate_only": False, "topics": (
            partitions.CreatePartitionsTopic(name="moved", count=2, assignments=None),)}),
        ("IncrementalAlterConfigs", 44, 1, {"validate_only": False, "resources": (configs.AlterConfigsResource(
            resource_type=2, resource_name="moved", configs=(
                configs.AlterableConfig(name="retention.ms", config_operation=0, value="60000"),)),)}),
        ("CreateAcls", 30, 2, {"creations": (acls.AclCreation(
            resource_type=2, resource_name="moved", resource_pattern_type=3, principal="User:alice", host="*",
            operation=3, permission_type=3),)}),
        ("AlterClientQuotas", 49, 1, {"validate_only": False, "entries": (quotas.EntryData(
            entity=(quotas.EntityData(entity_type="client-id", entity_name="app"),),
            ops=(quotas.OpData(key="producer_byte_rate", value=1024.0, remove=False),)),)}),
        ("AlterUserScramCredentials", 51, 0, {"deletions": (), "upsertions": (scram.ScramCredentialUpsertion(
            name="alice", mechanism=1, iterations=4096, salt=b"salt", salted_password=b"x" * 32),)}),
    ]


def _error_codes(answer: Any) -> set[int]:
    """Every error code anywhere in a decoded response."""
    found: set[int] = set()
    if dataclasses.is_dataclass(answer):
        for field in dataclasses.fields(answer):
            value = getattr(answer, field.name)
            if field.name == "error_code":
                found.add(int(value))
            else:
                found |= _error_codes(value)
    elif isinstance(answer, tuple):
        for item in answer:
            found |= _error_codes(item)
    return found


def test_requests_that_write_zookeeper_get_an_error_code_while_it_is_down_and_the_connection_stays() -> None:
    config = {"auto.leader.rebalance.enable": "false", "authorizer.class.name": "acl",
              "super.users": "User:ANONYMOUS"}
    with running_cluster(2, config) as cluster, RawConnection(cluster.brokers[1].bootstrap) as connection:
        topics = load_payload_module(19, 5, EntityType.request)
        created = connection.call(19, 5, timeout=datetime.timedelta(seconds=15), validate_only=False, topics=(
            topics.CreatableTopic(name="moved", num_partitions=-1, replication_factor=-1, configs=(), assignments=(
                topics.CreatableReplicaAssignment(partition_index=0, broker_ids=(1, 2)),)),))
        assert _error_codes(created) == {0}
        wait_until(lambda: partition_state(cluster, "moved")[2] == [1, 2], message="both replicas in the ISR")
        moved = load_payload_module(45, 0, EntityType.request)
        answer = connection.call(45, 0, timeout=datetime.timedelta(seconds=5), topics=(moved.ReassignableTopic(
            name="moved", partitions=(moved.ReassignablePartition(partition_index=0, replicas=(2, 1)),)),))
        assert _error_codes(answer) == {0}
        wait_until(lambda: partition_state(cluster, "moved")[1] == [2, 1], message="2 the preferred leader")
        assert partition_state(cluster, "moved")[0] == 1, "an election is needed"
        cluster.zookeeper.stop()
        for name, key, version, fields in _requests_that_write_zookeeper():
            codes = _error_codes(connection.call(key, version, **fields))
            assert codes == {ErrorCode.request_timed_out}, (name, codes)
            assert connection.call(18, 3, client_software_name="t", client_software_version="1").error_code == 0


def test_a_broker_restarted_right_after_a_crash_waits_for_its_old_registration(tmp_path: os.PathLike) -> None:
    # A 12 s session: the old registration must outlive the restart's own start-up, which took
    # over 6 s (the test clusters' session) at load ~12.
    session_s = 12
    with running_cluster(2, {"min.insync.replicas": "1", "zookeeper.session.timeout.ms": str(session_s * 1000)}) \
            as cluster:
        create(cluster, "rejoined", replication=2)
        crashed = cluster.brokers[2]
        crashed.kill()
        began = time.monotonic()
        crashed.restart()  # its registration is still there: its session lives on after the kill
        assert "waiting up to" in crashed.read_log()
        assert time.monotonic() - began < 2 * session_s, "it waited for the old session, not longer"
        wait_until(lambda: sorted(partition_state(cluster, "rejoined")[2]) == [1, 2], timeout=30, interval=0.2,
                   message="the restarted broker back in the ISR")
        twin = subprocess.run(
            [sys.executable, "-m", "logbus", "serve", "--data-dir", str(tmp_path), "--port", "0", "--broker-id",
             "2", "--set", f"zookeeper.connect={cluster.config['zookeeper.connect']}"],
            capture_output=True, text=True, timeout=60)
        assert twin.returncode != 0
        assert "broker id 2 is registered by another live broker" in twin.stderr


def test_a_lost_session_reads_its_many_topics_again_without_a_thread_each() -> None:
    """After a reconnection every watched topic is read again. kazoo's DataWatch reads each in a
    thread of its own; with thousands of topics those threads starved the broker's ZooKeeper
    thread until its new session expired too, again and again (20,000 threads in one broker of
    a 100,000-partition cluster, issue 25). The reads now go through one thread."""
    topics = 300
    with running_cluster(1, {"zookeeper.session.timeout.ms": "4000"}) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
        names = [f"many-{i}" for i in range(topics)]
        for future in admin.create_topics([NewTopic(name, 1, 1) for name in names]).values():
            future.result(60)
        broker = cluster.brokers[1]
        threads = f"/proc/{broker.process.pid}/task"
        before = len(os.listdir(threads))
        client = KazooClient(hosts=cluster.config["zookeeper.connect"])
        client.start(30)
        try:
            owner = registration_owners(client)[1]
            os.kill(broker.process.pid, signal.SIGSTOP)
            try:
                wait_until(lambda: registration_owners(client).get(1) != owner, timeout=30, interval=0.2,
                           message="the stopped broker's session expired")
            finally:
                os.kill(broker.process.pid, signal.SIGCONT)
            most = before
            deadline = time.monotonic() + 60
            while registration_owners(client).get(1) in (None, owner) and time.monotonic() < deadline:
                most = max(most, len(os.listdir(threads)))
            for _ in range(200):  # the reads after the new session's registration
                most = max(most, len(os.listdir(threads)))
                time.sleep(0.01)
            assert registration_owners(client).get(1) not in (None, owner), "registered again"
        finally:
            client.stop()
            client.close()
        # a few more are fine (the I/O and executor pools grow as they are used), one per watch not
        assert most < before + topics // 3, f"{most} threads at the reconnection, {before} before"

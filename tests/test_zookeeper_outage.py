"""A cluster through ZooKeeper outages: sessions kept, concise logs, admin requests answered, and a
broker restarted after a crash waiting for its old registration."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient
from helpers import QUIET, wait_until
from kazoo.client import KazooClient
from test_cluster import Sender, all_consumed, create, partition_state

from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.testing import Cluster, free_test_port, running_cluster, running_zookeeper


@pytest.fixture(scope="module")
def zookeeper() -> Iterator[ZooKeeperServer]:
    with running_zookeeper() as server:
        yield server


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
                server = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                return  # cut
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

"""The control plane at a few thousand partitions (issue 25): a SIGTERMed broker hands every
leadership over before it exits, and a new controller has every partition led by a live broker
soon after the old one's session expires. Three real brokers, one ZooKeeper, RF 3."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic
from helpers import QUIET, wait_until

from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.testing import BrokerProcess, Cluster, running_cluster

TOPICS, PARTITIONS_EACH = 20, 100  # 2,000 partitions, 6,000 replicas
SESSION_S = 6.0  # running_cluster's zookeeper.session.timeout.ms
FAILOVER_MARGIN_S = 10.0  # beyond the session timeout, for a loaded test machine (the target is 2 s)
READY_S = 180  # the create on a loaded 2-core machine


def metadata(broker: BrokerProcess) -> ClusterMetadata | None:
    try:
        return AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET}).list_topics(timeout=10)
    except Exception:  # noqa: BLE001 - a broker busy or going away: ask again
        return None


def partitions_of(found: ClusterMetadata) -> list:
    return [p for name, t in found.topics.items() if name.startswith("scale-") for p in t.partitions.values()]


def all_in_sync(cluster: Cluster) -> bool:
    for broker in cluster.brokers.values():
        found = metadata(broker)
        if found is None:
            return False
        partitions = partitions_of(found)
        if len(partitions) != TOPICS * PARTITIONS_EACH or any(len(p.isrs) != 3 or p.leader < 0 for p in partitions):
            return False
    return True


def led_by(found: ClusterMetadata, broker_id: int) -> int:
    return sum(p.leader == broker_id for p in partitions_of(found))


def all_led_by_live(broker: BrokerProcess, dead: int) -> bool:
    found = metadata(broker)
    return found is not None and all(p.leader not in (-1, dead) for p in partitions_of(found))


def test_a_sigtermed_broker_moves_every_leadership_and_a_new_controller_takes_over_in_time(
        zookeeper: ZooKeeperServer) -> None:
    with running_cluster(3, {"min.insync.replicas": "2"}, zookeeper=zookeeper) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 300_000, **QUIET})
        futures = admin.create_topics([NewTopic(f"scale-{i}", PARTITIONS_EACH, 3) for i in range(TOPICS)],
                                      request_timeout=READY_S)
        for future in futures.values():
            future.result(READY_S)
        wait_until(lambda: all_in_sync(cluster), timeout=READY_S, interval=1, message="every ISR full")

        found = metadata(cluster.brokers[1])
        assert found is not None
        stopping = max((b for b in cluster.brokers if b != found.controller_id), key=lambda b: led_by(found, b))
        assert led_by(found, stopping) > 0
        began = time.monotonic()
        assert cluster.brokers[stopping].stop() == 0
        exited_s = time.monotonic() - began
        other = next(b for i, b in cluster.brokers.items() if i != stopping)
        after = metadata(other)
        assert after is not None and led_by(after, stopping) == 0
        print(f"SIGTERM of broker {stopping}: exited in {exited_s:.1f} s leading nothing")  # noqa: T201

        controller = found.controller_id  # then the controller dies: the third broker leads everything
        cluster.brokers[controller].kill()
        began = time.monotonic()
        survivor = next(b for i, b in cluster.brokers.items() if i not in (controller, stopping))
        wait_until(lambda: all_led_by_live(survivor, controller), timeout=SESSION_S + FAILOVER_MARGIN_S,
                   interval=0.2, message="every partition led by a live broker")
        print(f"controller SIGKILL: every partition led by a live broker in {time.monotonic() - began:.1f} s")  # noqa: T201


def test_zookeeper_gets_the_heap_kafka_gives_it(zookeeper: ZooKeeperServer) -> None:
    """Kafka's zookeeper-server-start.sh runs ZooKeeper with 512 MB of heap: 100,000 partitions
    hold ~300 MB live in it, more than the 256 MB it had."""
    assert zookeeper.process is not None
    with open(f"/proc/{zookeeper.process.pid}/cmdline", "rb") as handle:
        arguments = handle.read().split(b"\0")
    assert b"-Xmx512m" in arguments

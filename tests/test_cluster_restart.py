"""A restarted broker of a cluster with many partitions (issue 25): back in every ISR quickly,
its leaders writing the ISR expansions in batches rather than one ZooKeeper round trip each."""

from __future__ import annotations

import re
import signal

from confluent_kafka.admin import AdminClient, NewTopic
from helpers import QUIET, wait_until
from kazoo.client import KazooClient
from test_cluster import create

from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.testing import Cluster, running_cluster

TOPICS, PARTITIONS_EACH = 6, 100
BACK_IN_ISR_S = 60  # measured ~2 s at 600 partitions on an idle machine; generous for a loaded one
BATCH_LINE = re.compile(r"wrote the ISR changes of (\d+) partitions together")
ASKED_AGAIN = re.compile(r"controlled shutdown: still leading partitions after [\d.]+ s; "
                         r"asking again \((\d+) of (\d+)\)")


def partitions_without(cluster: Cluster, broker_id: int, asking: int) -> int:
    """Partitions replicated on `broker_id` whose ISR (in broker `asking`'s Metadata) lacks it;
    -1 while not every partition is known."""
    client = AdminClient({"bootstrap.servers": cluster.brokers[asking].bootstrap, **QUIET})
    try:
        topics = client.list_topics(timeout=10).topics
    except Exception:  # noqa: BLE001 - the broker busy starting: ask again
        return -1
    found = [p for t in topics.values() if t.topic.startswith("many-") for p in t.partitions.values()]
    if len(found) < TOPICS * PARTITIONS_EACH:
        return -1
    return sum(1 for p in found if broker_id in p.replicas and broker_id not in p.isrs)


def test_a_killed_broker_restarted_is_back_in_every_isr_from_batched_isr_changes(zookeeper: ZooKeeperServer) -> None:
    with running_cluster(3, zookeeper=zookeeper) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
        created = admin.create_topics([NewTopic(f"many-{i}", PARTITIONS_EACH, 3) for i in range(TOPICS)])
        for future in created.values():
            future.result(60)
        wait_until(lambda: partitions_without(cluster, 2, 1) == 0, timeout=BACK_IN_ISR_S, interval=0.5,
                   message="every ISR full after the create")
        cluster.brokers[2].kill()
        wait_until(lambda: partitions_without(cluster, 2, 1) == TOPICS * PARTITIONS_EACH, timeout=BACK_IN_ISR_S,
                   interval=0.5, message="the killed broker out of every ISR")
        wait_until(lambda: 2 not in admin.list_topics(timeout=10).brokers, timeout=BACK_IN_ISR_S, interval=0.5,
                   message="the killed broker's session expired")
        logged = {b: len(cluster.brokers[b].read_log()) for b in (1, 3)}
        cluster.brokers[2].start()
        for asking in (1, 2, 3):
            wait_until(lambda a=asking: partitions_without(cluster, 2, a) == 0, timeout=BACK_IN_ISR_S, interval=0.2,
                       message=f"the restarted broker back in every ISR, as broker {asking} sees it")
        batches = [int(n) for b in (1, 3) for n in BATCH_LINE.findall(cluster.brokers[b].read_log()[logged[b]:])]
        assert batches and max(batches) >= 50, f"the leaders wrote the expansions one by one: {batches}"


def test_a_broker_restarted_right_after_a_crash_loads_its_logs_while_its_old_registration_lives(
        zookeeper: ZooKeeperServer) -> None:
    """Kafka loads (recovers) the logs before it registers; logbus registered first, so a broker
    restarted right after a SIGKILL recovered nothing while it waited up to the session timeout
    for ZooKeeper to expire its old registration (issue 25). It is still taken up only once
    registered."""
    config = {"min.insync.replicas": "1", "zookeeper.session.timeout.ms": "20000"}  # outlives a loaded start
    with running_cluster(2, config, zookeeper=zookeeper) as cluster:
        create(cluster, "recovered", partitions=4, replication=2)
        crashed = cluster.brokers[2]
        client = KazooClient(hosts=cluster.config["zookeeper.connect"])
        client.start(10)
        try:
            old_owner = client.exists("/brokers/ids/2").ephemeralOwner
            crashed.kill()
            logged = len(crashed.read_log())
            crashed.launch()
            try:
                wait_until(lambda: "loaded 4 logs" in crashed.read_log()[logged:], timeout=15, interval=0.1,
                           message="the restarted broker's logs loaded")
                registration = client.exists("/brokers/ids/2")
                assert registration is not None and registration.ephemeralOwner == old_owner, \
                    "the logs were loaded only once the old registration had expired"
                wait_until(lambda: "waiting up to" in crashed.read_log()[logged:], timeout=15, interval=0.1,
                           message="the restarted broker waiting for its old registration")
            finally:
                crashed.kill()
        finally:
            client.stop()
            client.close()


def test_a_controlled_shutdown_nobody_carries_out_asks_again_max_retries_times_then_stops(
        zookeeper: ZooKeeperServer) -> None:
    """Kafka's controlled.shutdown.max.retries and controlled.shutdown.retry.backoff.ms bound how
    long a stopping broker waits for its leaderships to move (it waited the session timeout, too
    short to move thousands on a loaded host and unrelated to it): with the controller paused,
    nothing moves, and the broker asks again once, then stops while still leading."""
    config = {"controlled.shutdown.max.retries": "2", "controlled.shutdown.retry.backoff.ms": "300",
              "zookeeper.session.timeout.ms": "60000"}  # the paused controller keeps its session
    with running_cluster(2, config, zookeeper=zookeeper) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
        controller = admin.list_topics(timeout=10).controller_id
        stopping = next(b for b in cluster.brokers if b != controller)
        admin.create_topics([NewTopic("held", 1, replica_assignment=[[stopping, controller]])])["held"].result(60)

        def in_sync() -> bool:
            topic = admin.list_topics("held", timeout=10).topics["held"]
            return bool(topic.partitions) and sorted(topic.partitions[0].isrs) == sorted([stopping, controller])

        wait_until(in_sync, timeout=BACK_IN_ISR_S, interval=0.3, message="both replicas in sync")
        paused = cluster.brokers[controller].process
        paused.send_signal(signal.SIGSTOP)
        try:
            assert cluster.brokers[stopping].stop() == 0
        finally:
            paused.send_signal(signal.SIGCONT)
        log = cluster.brokers[stopping].read_log()
        assert ASKED_AGAIN.findall(log) == [("1", "1")]
        assert "controlled shutdown: still leading some partitions after" in log

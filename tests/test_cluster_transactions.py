"""Transactions in a replicated cluster: real ZooKeeper, three real brokers, confluent-kafka.

The transaction coordinator of an id is the leader of its `__transaction_state` partition
(replicated three times); markers go from it to the leaders of the transaction's partitions, and
leaders check a transaction's first batch with it (KIP-890), across brokers.
"""

from __future__ import annotations

import helpers
from confluent_kafka import KafkaException, Producer
from helpers import raw_request, read_values, transactional_producer, wait_until
from test_cluster import FAILOVER_S, create, replicas_identical

from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.testing import Cluster, running_cluster

FIND_COORDINATOR, TRANSACTION_KEY = 10, 1
FAST = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}



def transactional(cluster: Cluster, transactional_id: str) -> Producer:
    return transactional_producer(cluster.bootstrap, transactional_id, FAILOVER_S, **{"transaction.timeout.ms": 20000})


def read_committed(cluster: Cluster, topic: str, partitions: int, until: set[bytes]) -> list[bytes]:
    """Every value of `topic` read with read_committed until all of `until` (written last) is read."""
    return read_values(cluster.bootstrap, [(topic, p) for p in range(partitions)],
                       lambda values, _: until <= set(values), "read_committed", FAILOVER_S)


def commit_sentinels(cluster: Cluster, topic: str, partitions: int) -> set[bytes]:
    return helpers.commit_sentinels(cluster.bootstrap, [(topic, p) for p in range(partitions)], FAILOVER_S)


def coordinator_of(cluster: Cluster, transactional_id: str) -> int:
    asked = next(b.bootstrap for b in cluster.brokers.values() if b.running)
    answer = raw_request(asked, FIND_COORDINATOR, 3, key=transactional_id, key_type=TRANSACTION_KEY)
    return answer.node_id if answer.error_code == 0 else -1


def test_a_transaction_over_partitions_led_by_every_broker(zookeeper: ZooKeeperServer) -> None:
    with running_cluster(3, FAST, zookeeper=zookeeper) as cluster:
        create(cluster, "spread", partitions=3)
        producer = transactional(cluster, "spread-txn")
        producer.begin_transaction()
        for i in range(30):
            producer.produce("spread", value=b"committed-%d" % i, partition=i % 3)
        producer.commit_transaction(FAILOVER_S)
        producer.begin_transaction()
        for i in range(30):
            producer.produce("spread", value=b"aborted-%d" % i, partition=i % 3)
        producer.flush(FAILOVER_S)
        producer.abort_transaction(FAILOVER_S)
        sentinels = commit_sentinels(cluster, "spread", 3)
        values = read_committed(cluster, "spread", 3, sentinels)
        assert sorted(v for v in values if v not in sentinels) == sorted(b"committed-%d" % i for i in range(30))
        for index in range(3):
            wait_until(lambda i=index: replicas_identical(cluster, "spread", i),
                       message="every replica holding the markers")


def test_open_transactions_complete_or_abort_when_their_coordinator_dies(zookeeper: ZooKeeperServer) -> None:
    with running_cluster(3, FAST, zookeeper=zookeeper) as cluster:
        create(cluster, "orders", partitions=3)
        ids = [f"failover-{i}" for i in range(6)]
        producers = {txn_id: transactional(cluster, txn_id) for txn_id in ids}
        for txn_id, producer in producers.items():
            producer.begin_transaction()
            for i in range(10):
                producer.produce("orders", value=f"{txn_id}/{i}".encode(), partition=i % 3)
            producer.flush(FAILOVER_S)
        victim = coordinator_of(cluster, ids[0])
        assert victim > 0
        cluster.brokers[victim].kill()
        committed = set()
        for txn_id, producer in producers.items():
            try:
                producer.commit_transaction(FAILOVER_S)
                committed.add(txn_id)
            except KafkaException:
                pass
        assert committed, "no transaction could commit after the failover"
        sentinels = commit_sentinels(cluster, "orders", 3)
        values = read_committed(cluster, "orders", 3, sentinels)
        for txn_id in ids:
            seen = {v for v in values if v.startswith(f"{txn_id}/".encode())}
            expected = {f"{txn_id}/{i}".encode() for i in range(10)}
            # all or nothing; all for each commit the client saw succeed (a failed one may have committed)
            assert seen == expected if txn_id in committed else seen in (set(), expected), txn_id

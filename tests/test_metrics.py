"""The Prometheus endpoint (`metrics.port`): real broker processes, real clients, scraped over HTTP
and parsed with prometheus_client's own parser."""

from __future__ import annotations

import errno
import os
import socket
import urllib.request
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import QUIET, produce_all, wait_until
from prometheus_client.parser import text_string_to_metric_families

from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.metrics.http import MAX_CONNECTIONS
from logbus.testing import BrokerProcess, running_broker, running_cluster

METRICS = {"metrics.port": "0"}
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(broker: BrokerProcess) -> Samples:
    """Every sample of the broker's /metrics, by (name, labels)."""
    assert broker.metrics_url is not None
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def records(count: int, size: int = 100) -> list[tuple[bytes | None, bytes | None]]:
    return [(None, b"%0*d" % (size, i)) for i in range(count)]


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker(METRICS) as started:
        yield started


def test_produced_records_and_bytes_move_the_counters_by_exactly_what_was_produced(broker: BrokerProcess) -> None:
    """MessagesIn counts records; BytesIn the batches as sent, which an uncompressed topic's log
    holds byte for byte: both move by exactly what each round of confluent-kafka produced."""
    produce_all(broker.bootstrap, "traffic", records(200))
    before = scrape(broker)
    produce_all(broker.bootstrap, "traffic", records(300), **{"linger.ms": 5})
    after = scrape(broker)
    log_growth = (value(after, "kafka_log_log_size", topic="traffic", partition="0")
                  - value(before, "kafka_log_log_size", topic="traffic", partition="0"))
    for labels in ({"topic": "traffic"}, {}):
        messages = "kafka_server_brokertopicmetrics_messagesin_total"
        assert value(after, messages, **labels) - value(before, messages, **labels) == 300
        bytes_in = "kafka_server_brokertopicmetrics_bytesin_total"
        assert value(after, bytes_in, **labels) - value(before, bytes_in, **labels) == log_growth > 300 * 100
    produced = value(after, "kafka_network_requestmetrics_requests_total", request="Produce")
    assert produced > value(before, "kafka_network_requestmetrics_requests_total", request="Produce")
    assert value(after, "kafka_network_requestmetrics_totaltimems_count", request="Produce") == produced


def test_consumer_fetches_count_as_bytes_out_and_fetch_consumer_requests(broker: BrokerProcess) -> None:
    produce_all(broker.bootstrap, "read", records(50))
    before = scrape(broker)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "readers", **QUIET})
    consumer.assign([TopicPartition("read", 0, 0)])
    try:
        read = 0
        while read < 50:
            message = consumer.poll(10)
            assert message is not None and message.error() is None
            read += 1
    finally:
        consumer.close()
    after = scrape(broker)
    size = value(after, "kafka_log_log_size", topic="read", partition="0")
    assert value(after, "kafka_server_brokertopicmetrics_bytesout_total", topic="read") >= size > 0
    fetches = {name: value(after, "kafka_network_requestmetrics_requests_total", request=name)
               - value(before, "kafka_network_requestmetrics_requests_total", request=name)
               for name in ("Fetch", "FetchConsumer", "FetchFollower")}
    assert fetches["Fetch"] == fetches["FetchConsumer"] > 0 and fetches["FetchFollower"] == 0


def test_a_groups_lag_is_its_end_offset_minus_its_committed_offset(broker: BrokerProcess) -> None:
    produce_all(broker.bootstrap, "lagging", records(100, 10))
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "slow", **QUIET})
    try:
        consumer.commit(offsets=[TopicPartition("lagging", 0, 40)], asynchronous=False)
    finally:
        consumer.close()
    labels = {"consumergroup": "slow", "topic": "lagging", "partition": "0"}
    lag = ("kafka_consumergroup_lag", frozenset(labels.items()))
    assert wait_until(lambda: scrape(broker).get(lag), message="the lag of group slow") == 60
    produce_all(broker.bootstrap, "lagging", records(10, 10))
    assert scrape(broker)[lag] == 70


def test_a_single_broker_leads_every_partition_it_hosts(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    admin.create_topics([NewTopic("counted", 3, 1)])["counted"].result(20)
    hosted = sum(len(t.partitions) for t in admin.list_topics(timeout=10).topics.values())
    samples = scrape(broker)
    assert value(samples, "kafka_server_replicamanager_partitioncount") == hosted >= 3
    assert value(samples, "kafka_server_replicamanager_leadercount") == hosted
    assert value(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(samples, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert value(samples, "kafka_server_socketservermetrics_connection_count", listener="PLAINTEXT") >= 1
    assert value(samples, "process_open_fds") > 0


def metrics_address(broker: BrokerProcess) -> tuple[str, int]:
    host, port = broker.metrics_url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    return host, int(port)


def http(broker: BrokerProcess, raw: bytes) -> bytes:
    """Send raw bytes to the metrics port, end the request side, and read until the server closes
    the connection (b"" when it closes or resets it without an answer)."""
    answer = b""
    with socket.create_connection(metrics_address(broker), timeout=15) as connection:
        try:
            connection.sendall(raw)
            connection.shutdown(socket.SHUT_WR)
            while chunk := connection.recv(65536):
                answer += chunk
        except ConnectionError:  # reset, or closed while we were still sending
            return b""
        except OSError as exc:  # closed before we could end our side
            if exc.errno != errno.ENOTCONN:
                raise
            return b""
    return answer


def test_bad_http_requests_get_errors_or_a_closed_connection_and_disturb_nothing(broker: BrokerProcess) -> None:
    assert http(broker, b"POST /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405")
    assert http(broker, b"GET /../etc/passwd HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 404")
    assert http(broker, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert http(broker, b"GET /metrics HTTP/1.1\r\nX-Long: " + b"a" * 20000 + b"\r\n\r\n") == b""
    assert http(broker, b"GET /metrics HTTP/1.1\r\nHost: x") == b""  # the request ends half way
    head = http(broker, b"HEAD /metrics HTTP/1.0\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")
    idle = [socket.create_connection(metrics_address(broker)) for _ in range(MAX_CONNECTIONS)]
    try:  # the endpoint is full: one more connection is closed at once; Kafka clients are served as ever
        assert http(broker, b"GET /metrics HTTP/1.1\r\n\r\n") == b""
        produce_all(broker.bootstrap, "after-bad-http", records(10))
    finally:
        for connection in idle:
            connection.close()
    samples = wait_until(lambda: _scrape_or_none(broker), message="the endpoint serving again")
    assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total", topic="after-bad-http") == 10
    assert broker.running


def _scrape_or_none(broker: BrokerProcess) -> Samples | None:
    try:
        return scrape(broker)
    except OSError:  # urllib: the connection was closed while the endpoint was still full
        return None


def listening(pid: int) -> set[tuple[str, int]]:
    """The IPv4 (address, port) pairs the process listens on, from /proc."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    with open(f"/proc/{pid}/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            address, port = fields[1].split(":")
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                found.add((socket.inet_ntoa(bytes.fromhex(address)[::-1]), int(port, 16)))
    return found


def test_the_endpoint_is_off_without_metrics_port_and_binds_metrics_host_with_it() -> None:
    with running_broker() as plain:
        assert plain.metrics_url is None
        assert listening(plain.process.pid) == {("127.0.0.1", plain.port)}
    with running_broker({**METRICS, "metrics.host": "127.0.0.2"}) as placed:
        port = int(placed.metrics_url.rsplit(":", 1)[1].split("/")[0])
        assert listening(placed.process.pid) == {("127.0.0.1", placed.port), ("127.0.0.2", port)}
        assert value(scrape(placed), "kafka_server_replicamanager_partitioncount") == 0



def test_a_stopped_follower_makes_the_leaders_partition_under_replicated(zookeeper: ZooKeeperServer) -> None:
    with running_cluster(3, METRICS, zookeeper=zookeeper) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
        admin.create_topics([NewTopic("replicated", 1, 3)])["replicated"].result(20)

        def leader() -> int:
            return admin.list_topics("replicated", timeout=5).topics["replicated"].partitions[0].leader

        leading = cluster.brokers[wait_until(lambda: max(leader(), 0), message="a leader")]
        under = "kafka_server_replicamanager_underreplicatedpartitions"
        assert value(scrape(leading), under) == 0
        assert sum(value(scrape(b), "kafka_controller_kafkacontroller_activecontrollercount")
                   for b in cluster.brokers.values()) == 1
        follower = next(b for b in cluster.brokers.values() if b is not leading)
        follower.stop()
        wait_until(lambda: value(scrape(leading), under) == 1, timeout=30, message="an under-replicated partition")
        samples = scrape(leading)
        assert value(samples, "kafka_server_replicamanager_leadercount") == 1
        assert value(samples, "kafka_server_replicamanager_partitioncount") == 1

"""Client quotas with real brokers and real clients: byte rates measured from confluent-kafka
producers and consumers, Kafka's throttle times and KIP-219 muting on raw connections,
controller mutation quotas on CreateTopics, DescribeClientQuotas/AlterClientQuotas (neither
confluent-kafka nor kafka-python has them: raw requests), a restart, and a ZooKeeper cluster.

Rates: as Kafka's Rate never counts its window as shorter than quota.window.num - 1 windows (10 s
by default), a greedy client sends about quota * 10 s in its first 10 s and is then throttled:
its rate over the first ~10 s is the quota. (Over later 10 s spans the rate swings around the
quota as old windows expire: that is Kafka's algorithm, docs/operations.md.)
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from helpers import (
    CREATE_TOPICS,
    FETCH,
    QUIET,
    RawConnection,
    consume_partition,
    produce_all,
    produce_body,
    raw_produce,
    raw_request,
    wait_until,
)
from kazoo.client import KazooClient
from kio.schema.alter_client_quotas.v1 import request as alter
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.create_partitions.v3 import request as create_partitions_v3
from kio.schema.delete_topics.v6 import request as delete_topics_v6
from kio.schema.describe_client_quotas.v1 import request as describe
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.produce.v9.response import ProduceResponse
from kio.serial import entity_reader
from test_sasl import SASL_LISTENERS, add_user, confluent_config

from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.protocol import codec
from logbus.protocol.records import build_batch
from logbus.testing import BrokerProcess, running_broker, running_cluster

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS, API_VERSIONS, PRODUCE = 48, 49, 18, 0
CREATE_PARTITIONS, DELETE_TOPICS = 37, 20
MIB = 1 << 20
QUOTA = 1 * MIB  # bytes per second
MEASURE_S = 10.0
RAW_CLIENT = "raw-test"  # the client id of helpers.RawConnection


def alter_quotas(bootstrap: str, entity: dict[str, str | None], validate_only: bool = False,
                 source: str | None = None, **values: float | None) -> tuple[ErrorCode, str | None]:
    """AlterClientQuotas for one entity (None value: remove the key), from the local address
    `source` if given; its error and message."""
    entry = alter.EntryData(
        entity=tuple(alter.EntityData(entity_type=kind, entity_name=name) for kind, name in entity.items()),
        ops=tuple(alter.OpData(key=key, value=value or 0.0, remove=value is None) for key, value in values.items()))
    answer = raw_request(bootstrap, ALTER_CLIENT_QUOTAS, 1, source=source, entries=(entry,),
                         validate_only=validate_only)
    return answer.entries[0].error_code, answer.entries[0].error_message


def described(bootstrap: str, components: tuple = (), strict: bool = False) -> dict[tuple, dict[str, float]]:
    """DescribeClientQuotas: ((type, name), ...) -> {key: value}."""
    answer = raw_request(bootstrap, DESCRIBE_CLIENT_QUOTAS, 1, components=components, strict=strict)
    assert answer.error_code == ErrorCode.none, answer.error_message
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in answer.entries}


def component(kind: str, match_type: int, match: str | None = None) -> describe.ComponentData:
    return describe.ComponentData(entity_type=kind, match_type=match_type, match=match)


def produce_for(config: dict, topic: str, seconds: float, limit: int | None = None) -> float:
    """Produce 5 KB records as fast as the broker lets for `seconds` (or until `limit` bytes are
    acknowledged); acknowledged bytes per second. 50 KB batches: requests well under the quota."""
    acked = [0]

    def count(error: object, message: object) -> None:
        if error is None:
            acked[0] += len(message.value())

    producer = Producer({**QUIET, "batch.size": 50_000, "queue.buffering.max.kbytes": 2048, **config})
    value = b"x" * 5_000
    start = time.monotonic()
    while time.monotonic() - start < seconds and (limit is None or acked[0] < limit):
        try:
            producer.produce(topic, value, on_delivery=count)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    rate = acked[0] / (time.monotonic() - start)
    producer.purge()
    producer.flush(10)
    return rate


def consume_for(config: dict, topic: str, seconds: float, limit: int) -> float:
    """Read `topic`-0 from the start for `seconds` (or until `limit` bytes); bytes per second."""
    consumer = Consumer({**QUIET, "group.id": f"g-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False, **config})
    consumer.assign([TopicPartition(topic, 0, 0)])
    read = 0
    start = time.monotonic()
    try:
        while time.monotonic() - start < seconds and read < limit:
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                read += len(message.value())
        return read / (time.monotonic() - start)
    finally:
        consumer.close()


def assert_about_the_quota(rate: float) -> None:
    assert 0.8 * QUOTA <= rate <= 1.2 * QUOTA, f"{rate / MIB:.2f} MiB/s, not {QUOTA / MIB:.2f} MiB/s ± 20 %"


# ---------------------------------------------------------------- rates with real clients


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """PLAINTEXT and SASL_PLAINTEXT, with user alice; Kafka's default quota windows."""
    tmp = tmp_path_factory.mktemp("quotas")
    add_user(["--data-dir", str(tmp / "data")], "alice", "alice-secret", tmp, mechanisms=("SCRAM-SHA-256",))
    with running_broker({**SASL_LISTENERS, "num.partitions": "1"}, data_dir=str(tmp / "data")) as started:
        yield started


def test_producers_limited_by_client_id_and_by_user_get_their_quota_others_do_not(broker: BrokerProcess) -> None:
    assert alter_quotas(broker.bootstrap, {"client-id": "capped"}, producer_byte_rate=QUOTA) == (ErrorCode.none, None)
    assert alter_quotas(broker.bootstrap, {"user": "alice"}, producer_byte_rate=QUOTA)[0] == ErrorCode.none
    sasl = confluent_config(f"127.0.0.1:{broker.ports['SASL_PLAINTEXT']}", "SCRAM-SHA-256", "alice-secret")
    rates: dict[str, float] = {}
    limited = [threading.Thread(target=lambda name=name, config=config: rates.__setitem__(
        name, produce_for(config, f"q-{name}", MEASURE_S))) for name, config in (
        ("client", {"bootstrap.servers": broker.bootstrap, "client.id": "capped"}),
        ("user", {**sasl, "client.id": "any-id"}))]
    for thread in limited:
        thread.start()
    time.sleep(1.0)  # the unlimited producer runs while both limited ones are throttled
    rates["free"] = produce_for({"bootstrap.servers": broker.bootstrap, "client.id": "free"}, "q-free", 5.0,
                                limit=100 * MIB)
    for thread in limited:
        thread.join()
    print({name: f"{rate / MIB:.2f} MiB/s" for name, rate in rates.items()})
    assert_about_the_quota(rates["client"])
    assert_about_the_quota(rates["user"])
    assert rates["free"] > 5 * QUOTA


def test_a_consumer_limited_by_consumer_byte_rate_gets_its_quota_others_do_not(broker: BrokerProcess) -> None:
    topic = "q-consumed"
    produce_for({"bootstrap.servers": broker.bootstrap, "client.id": "filler"}, topic, 30.0, limit=14 * MIB)
    assert alter_quotas(broker.bootstrap, {"client-id": "slow-reader"}, consumer_byte_rate=QUOTA)[0] == ErrorCode.none
    free = consume_for({"bootstrap.servers": broker.bootstrap, "client.id": "fast-reader"}, topic, 10.0, 13 * MIB)
    limited = consume_for({"bootstrap.servers": broker.bootstrap, "client.id": "slow-reader"}, topic, MEASURE_S,
                          13 * MIB)
    print(f"consumers: free {free / MIB:.2f} MiB/s, limited {limited / MIB:.2f} MiB/s")
    assert_about_the_quota(limited)
    assert free > 5 * QUOTA


def test_a_consumer_fetch_is_bounded_by_what_its_quota_window_holds(broker: BrokerProcess) -> None:
    """consumer_byte_rate 50 KB/s over Kafka's 10 s: a fetch holds at most 500 KB (one 300 KB
    batch of two), where the 600 KB asked for would be throttled and answered empty forever."""
    topic = "q-bounded"
    assert _create_topic(broker.bootstrap, 7, topic, 1)[0] == ErrorCode.none
    with RawConnection(broker.bootstrap) as connection:
        for _ in range(2):
            batch = build_batch([(None, b"v" * 300_000)], int(time.time() * 1000))
            assert raw_produce(connection, topic, batch)[0] == 0
    assert alter_quotas(broker.bootstrap, {"client-id": RAW_CLIENT}, consumer_byte_rate=50_000)[0] == ErrorCode.none
    partition = fetch_v12.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                         log_start_offset=-1, partition_max_bytes=10 * MIB)
    answer = raw_request(broker.bootstrap, FETCH, 12, cluster_id=None, replica_id=-1, min_bytes=1,
                         max_wait=datetime.timedelta(milliseconds=10), max_bytes=10 * MIB, isolation_level=0,
                         session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
                         topics=(fetch_v12.FetchTopic(topic=topic, partitions=(partition,)),))
    assert answer.throttle_time == datetime.timedelta(0)
    assert 300_000 < len(answer.responses[0].partitions[0].records) < 301_000


# ---------------------------------------------------------------- throttle times, muting, mutations


@pytest.fixture(scope="module")
def small_windows() -> Iterator[BrokerProcess]:
    """Windows short enough that one request shows Kafka's formulas with round numbers."""
    config = {"quota.window.num": "2", "quota.window.size.seconds": "2", "controller.quota.window.num": "2",
              "controller.quota.window.size.seconds": "1", "num.partitions": "1"}
    with running_broker(config) as started:
        yield started


def test_a_throttled_produce_carries_kafkas_throttle_time_and_mutes_only_its_connection(
        small_windows: BrokerProcess) -> None:
    bootstrap = small_windows.bootstrap
    assert alter_quotas(bootstrap, {"client-id": RAW_CLIENT}, producer_byte_rate=100_000)[0] == ErrorCode.none
    body = produce_body("throttled", build_batch([(None, b"v" * 300_000)], int(time.time() * 1000)))
    with RawConnection(bootstrap) as muted, RawConnection(bootstrap) as other:
        header = muted.header(PRODUCE, 9)
        muted.send_frame(header + body)
        answer = muted.read_frame()
        throttle_ms = _produce_throttle_ms(answer)
        request_size = len(header) + len(body)
        # the rate over (2 - 1) windows of 2 s: (size / 2 s - quota) / quota * 2000 ms
        assert throttle_ms == round((request_size / 2 - 100_000) / 100_000 * 2000)
        started = time.monotonic()
        muted.call(API_VERSIONS, 3, client_software_name="t", client_software_version="1")
        waited_on_muted = time.monotonic() - started
        started = time.monotonic()
        other.call(API_VERSIONS, 3, client_software_name="t", client_software_version="1")
        waited_on_other = time.monotonic() - started
    assert waited_on_muted >= 0.9 * throttle_ms / 1000
    assert waited_on_other < 0.5


def test_request_percentage_throttles_by_handler_time_at_most_one_window(small_windows: BrokerProcess) -> None:
    assert alter_quotas(small_windows.bootstrap, {"client-id": "busy"}, request_percentage=0.0001)[0] == ErrorCode.none
    with RawConnection(small_windows.bootstrap) as connection:
        connection.send_frame(connection.header(API_VERSIONS, 3, client_id=b"busy") + b"".join(
            codec.encode(ApiVersionsRequest(client_software_name="t", client_software_version="1"))))
        answer, _ = entity_reader(ApiVersionsResponse)(connection.read_frame(), 4)
    assert answer.throttle_time == datetime.timedelta(seconds=2)  # capped at quota.window.size.seconds


def test_metered_handlers_still_wait_and_answer_as_before(small_windows: BrokerProcess) -> None:
    """Under a request_percentage quota every handler runs step by step under a timer: acks=all
    answers that wait for the ISR and fetches that long-poll still complete."""
    bootstrap = small_windows.bootstrap
    assert alter_quotas(bootstrap, {"user": None}, request_percentage=1e6)[0] == ErrorCode.none
    try:
        produce_all(bootstrap, "metered", [(None, b"%d" % i) for i in range(50)], acks="all")
        values = [m.value() for m in consume_partition(bootstrap, "metered", 0, 50)]
        assert values == [b"%d" % i for i in range(50)]
    finally:
        assert alter_quotas(bootstrap, {"user": None}, request_percentage=None)[0] == ErrorCode.none


def _produce_throttle_ms(frame: bytes) -> int:
    response, _ = entity_reader(ProduceResponse)(frame, 5)  # a request's bytes count whatever its answer
    return round(response.throttle_time.total_seconds() * 1000)


def _create_topic(bootstrap: str, version: int, name: str, partitions: int) -> tuple[ErrorCode, int]:
    from kio.schema.create_topics.v7 import request as v7

    topic = v7.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1, assignments=(),
                              configs=())
    answer = raw_request(bootstrap, CREATE_TOPICS, version, topics=(topic,), timeout=datetime.timedelta(seconds=10),
                         validate_only=False)
    return answer.topics[0].error_code, round(answer.throttle_time.total_seconds() * 1000)


def test_controller_mutation_rate_refuses_strict_versions_and_throttles_older_ones(
        small_windows: BrokerProcess) -> None:
    bootstrap = small_windows.bootstrap
    assert alter_quotas(bootstrap, {"user": None}, controller_mutation_rate=1.0)[0] == ErrorCode.none
    # a bucket of 1/s * 2 windows * 1 s = 2 partitions, full: any one creation goes through
    assert _create_topic(bootstrap, 7, "five-a", 5) == (ErrorCode.none, 0)
    code, throttle_ms = _create_topic(bootstrap, 7, "five-b", 5)  # 3 partitions below zero at 1/s
    assert code == ErrorCode.throttling_quota_exceeded
    assert 2000 < throttle_ms <= 3000
    assert wait_until(lambda: _create_topic(bootstrap, 5, "five-c", 1)[0] == ErrorCode.none, timeout=5)
    code, throttle_ms = _create_topic(bootstrap, 5, "five-d", 1)  # v5: never refused, throttled
    assert code == ErrorCode.none and throttle_ms > 0
    grow = raw_request(bootstrap, CREATE_PARTITIONS, 3, timeout=datetime.timedelta(seconds=10), validate_only=False,
                       topics=(create_partitions_v3.CreatePartitionsTopic(name="five-a", count=6, assignments=None),))
    assert grow.results[0].error_code == ErrorCode.throttling_quota_exceeded
    delete = raw_request(bootstrap, DELETE_TOPICS, 6, timeout=datetime.timedelta(seconds=10),
                         topics=(delete_topics_v6.DeleteTopicState(name="five-a", topic_id=uuid.UUID(int=0)),))
    assert delete.responses[0].error_code == ErrorCode.throttling_quota_exceeded
    assert alter_quotas(bootstrap, {"user": None}, controller_mutation_rate=None)[0] == ErrorCode.none


# ---------------------------------------------------------------- the APIs


def test_alter_client_quotas_refuses_what_kafka_refuses_and_validate_only_writes_nothing(
        small_windows: BrokerProcess) -> None:
    bootstrap = small_windows.bootstrap
    refusals = [
        ({"client-id": "c"}, {"no_such_quota": 1.0}, ErrorCode.invalid_request,
         "Invalid configuration key no_such_quota"),
        ({"client-id": "c"}, {"producer_byte_rate": -5.0}, ErrorCode.invalid_request,
         "Quota producer_byte_rate must be greater than 0"),
        ({"client-id": "c"}, {"consumer_byte_rate": 1.5}, ErrorCode.invalid_request,
         "consumer_byte_rate cannot be a fractional value."),
        ({}, {"producer_byte_rate": 1.0}, ErrorCode.invalid_request, "Invalid empty client quota entity"),
        ({"user": ""}, {"producer_byte_rate": 1.0}, ErrorCode.invalid_request, "Empty user not supported"),
        ({"group": "g"}, {"producer_byte_rate": 1.0}, ErrorCode.unsupported_version,
         "Unhandled client quota entity type: group"),
        ({"ip": "127.0.0.1", "user": "u"}, {"producer_byte_rate": 1.0}, ErrorCode.invalid_request,
         "Invalid quota entity combination, IP quota should not be combined with User or ClientId"),
        ({"ip": "no.such.host"}, {"connection_creation_rate": 5.0}, ErrorCode.invalid_request,
         "no.such.host is not a valid IP or resolvable host."),
        ({"ip": "10.0.0.1"}, {"producer_byte_rate": 1.0}, ErrorCode.invalid_request,
         "Invalid configuration key producer_byte_rate"),
        ({"client-id": "c"}, {"connection_creation_rate": 1.0}, ErrorCode.invalid_request,
         "Invalid configuration key connection_creation_rate"),
        ({"ip": None}, {"connection_creation_rate": 2.5}, ErrorCode.invalid_request,
         "connection_creation_rate cannot be a fractional value."),
    ]
    for entity, values, code, message in refusals:
        assert alter_quotas(bootstrap, entity, **values) == (code, message)
    assert alter_quotas(bootstrap, {"client-id": "dry"}, validate_only=True, request_percentage=12.5) == \
        (ErrorCode.none, None)
    assert described(bootstrap, (component("client-id", 0, "dry"),)) == {}
    assert described(bootstrap, (component("client-id", 0, "c"),)) == {}
    assert described(bootstrap, (component("ip", 2),)) == {}


def test_describe_client_quotas_matches_exact_default_and_any_names_strictly_or_not(
        small_windows: BrokerProcess) -> None:
    bootstrap = small_windows.bootstrap
    for entity, rate in (({"user": "dana"}, 1000.0), ({"user": "dana", "client-id": "app"}, 2000.0),
                         ({"user": None, "client-id": None}, 3000.0), ({"client-id": None}, 4000.0)):
        assert alter_quotas(bootstrap, entity, producer_byte_rate=rate)[0] == ErrorCode.none
    dana, dana_app = (("user", "dana"),), (("user", "dana"), ("client-id", "app"))
    defaults, client_default = (("user", None), ("client-id", None)), (("client-id", None),)
    assert described(bootstrap, (component("user", 0, "dana"),), strict=True) == {dana: {"producer_byte_rate": 1000}}
    assert set(described(bootstrap, (component("user", 0, "dana"),))) == {dana, dana_app}
    assert set(described(bootstrap, (component("user", 1),))) == {defaults}
    assert set(described(bootstrap, (component("user", 2), component("client-id", 2)), strict=True)) == \
        {dana_app, defaults}
    assert set(described(bootstrap, (component("client-id", 1),), strict=True)) == {client_default}
    refused = raw_request(bootstrap, DESCRIBE_CLIENT_QUOTAS, 1, strict=False,
                          components=(component("user", 2), component("user", 0, "x")))
    assert (refused.error_code, refused.error_message) == (
        ErrorCode.invalid_request, "Entity type user cannot appear more than once in the filter.")
    refused = raw_request(bootstrap, DESCRIBE_CLIENT_QUOTAS, 1, strict=False, components=(component("topic", 2),))
    assert refused.error_code == ErrorCode.unsupported_version and refused.entries is None


def test_logbus_quotas_alters_and_describes_like_kafka_configs(small_windows: BrokerProcess) -> None:
    def logbus_quotas(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "logbus", "quotas", *args, "--bootstrap-server",
                               small_windows.bootstrap], capture_output=True, text=True, timeout=60)

    done = logbus_quotas("alter", "--user", "erin", "--client-id", "etl", "--add-config",
                         "producer_byte_rate=1048576,request_percentage=25.5")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Completed updating config for user-principal 'erin', client-id 'etl'.\n"
    assert logbus_quotas("alter", "--user", "erin", "--client-id", "etl", "--delete-config",
                         "request_percentage").returncode == 0
    shown = logbus_quotas("describe", "--user", "erin", "--client-id", "etl")
    assert shown.stdout == "Quota configs for user-principal 'erin', client-id 'etl' are producer_byte_rate=1048576.0\n"
    refused = logbus_quotas("alter", "--client-defaults", "--add-config", "producer_byte_rate=0.5")
    assert refused.returncode == 1
    assert "INVALID_REQUEST: producer_byte_rate cannot be a fractional value." in refused.stderr
    for entity in (["--ip-defaults"], ["--ip", "10.9.8.7"]):
        assert logbus_quotas("alter", *entity, "--add-config", "connection_creation_rate=1000").returncode == 0
    shown = logbus_quotas("describe", "--ip", "10.9.8.7")
    assert shown.stdout == "Quota configs for ip '10.9.8.7' are connection_creation_rate=1000.0\n"
    assert described(small_windows.bootstrap, (component("ip", 1),)) == \
        {(("ip", None),): {"connection_creation_rate": 1000}}
    assert set(described(small_windows.bootstrap, (component("ip", 2),))) == {(("ip", None),), (("ip", "10.9.8.7"),)}
    for entity in (["--ip-defaults"], ["--ip", "10.9.8.7"]):
        assert logbus_quotas("alter", *entity, "--delete-config", "connection_creation_rate").returncode == 0
    assert described(small_windows.bootstrap, (component("ip", 2),)) == {}


# ---------------------------------------------------------------- durability and the cluster


def test_quotas_survive_a_restart(tmp_path: Path) -> None:
    with running_broker(data_dir=str(tmp_path / "data")) as broker:
        assert alter_quotas(broker.bootstrap, {"user": "frank", "client-id": None}, consumer_byte_rate=4096)[0] == \
            ErrorCode.none
        assert alter_quotas(broker.bootstrap, {"ip": "10.1.2.3"}, connection_creation_rate=7)[0] == ErrorCode.none
        broker.stop()
        broker.restart()
        assert described(broker.bootstrap) == {(("user", "frank"), ("client-id", None)): {"consumer_byte_rate": 4096},
                                               (("ip", "10.1.2.3"),): {"connection_creation_rate": 7}}


def test_a_quota_altered_through_one_broker_applies_on_another(tmp_path: Path, zookeeper: ZooKeeperServer) -> None:
    with running_cluster(2, zookeeper=zookeeper) as cluster:
        first, second = cluster.brokers[1].bootstrap, cluster.brokers[2].bootstrap
        assert alter_quotas(first, {"client-id": RAW_CLIENT}, producer_byte_rate=10_000)[0] == ErrorCode.none
        assert alter_quotas(first, {"user": "gus", "client-id": "app"}, request_percentage=50.0)[0] == ErrorCode.none
        assert alter_quotas(first, {"user": "gus"}, consumer_byte_rate=1000)[0] == ErrorCode.none
        assert alter_quotas(first, {"ip": "10.1.2.3"}, connection_creation_rate=7)[0] == ErrorCode.none
        expected = {(("client-id", RAW_CLIENT),): {"producer_byte_rate": 10_000},
                    (("user", "gus"), ("client-id", "app")): {"request_percentage": 50.0},
                    (("user", "gus"),): {"consumer_byte_rate": 1000},
                    (("ip", "10.1.2.3"),): {"connection_creation_rate": 7}}
        wait_until(lambda: described(second) == expected, message="the quotas on broker 2")
        body = produce_body("anywhere", build_batch([(None, b"v" * 100_000)], int(time.time() * 1000)))
        with RawConnection(second) as connection:
            connection.send_frame(connection.header(PRODUCE, 9) + body)
            assert _produce_throttle_ms(connection.read_frame()) > 0  # 100 KB at 10 KB/s
        _assert_kafka_layout(cluster.config["zookeeper.connect"])
        assert alter_quotas(second, {"client-id": RAW_CLIENT}, producer_byte_rate=None)[0] == ErrorCode.none
        wait_until(lambda: (("client-id", RAW_CLIENT),) not in described(first), message="the removal on broker 1")


def _assert_kafka_layout(connect: str) -> None:
    client = KazooClient(hosts=connect)
    client.start(10)
    try:
        raw, _ = client.get(f"/config/clients/{RAW_CLIENT}")
        assert json.loads(raw) == {"version": 1, "config": {"producer_byte_rate": "10000"}}
        raw, _ = client.get("/config/users/gus")
        assert json.loads(raw) == {"version": 1, "config": {"consumer_byte_rate": "1000"}}
        raw, _ = client.get("/config/users/gus/clients/app")
        assert json.loads(raw) == {"version": 1, "config": {"request_percentage": "50.0"}}
        raw, _ = client.get("/config/ips/10.1.2.3")
        assert json.loads(raw) == {"version": 1, "config": {"connection_creation_rate": "7"}}
        changes = [json.loads(client.get(f"/config/changes/{c}")[0])["entity_path"]
                   for c in client.get_children("/config/changes")]
        assert {f"clients/{RAW_CLIENT}", "users/gus/clients/app", "users/gus", "ips/10.1.2.3"} <= set(changes)
    finally:
        client.stop()
        client.close()

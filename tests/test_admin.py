"""Admin APIs against a real broker: topics, partitions, configs, records, cluster, with real clients."""

from __future__ import annotations

import glob
import os
import socket
import struct
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from datetime import timedelta
from functools import cache
from typing import Any

import kafka
import kafka.admin as kp
import kafka.errors as kafka_errors
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from helpers import LIST_OFFSETS, QUIET, consume_partition, produce_all, wait_until
from kafka.admin import KafkaAdminClient
from kio.schema.delete_topics.v6 import request as delete_topics_v6
from kio.schema.describe_configs.v4 import request as describe_configs_v4
from kio.schema.incremental_alter_configs.v1 import request as incremental_v1
from kio.schema.list_offsets.v7 import request as list_offsets_v7
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.offset_for_leader_epoch.v2 import request as leader_epoch_v2
from kio.schema.offset_for_leader_epoch.v4 import request as leader_epoch_v4
from kio.schema.types import TopicName
from kio.serial import entity_reader
from kio.static.primitive import i16, i32

from logbus.protocol import codec
from logbus.testing import BrokerProcess, running_broker

API_VERSIONS, METADATA, DELETE_TOPICS, OFFSET_FOR_LEADER_EPOCH, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = (
    18, 3, 20, 23, 32, 44,
)
NO_ID = uuid.UUID(int=0)
FUTURE_TIMEOUT_S = 15
BROKER_CONFIG = {"num.partitions": "1", "log.retention.hours": "24", "log.retention.check.interval.ms": "100"}


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    """One broker for the module; each test uses its own topics."""
    with running_broker(config=BROKER_CONFIG) as started:
        yield started


# ---------------------------------------------------------------------------- raw protocol


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _unknown_tags(*tags: tuple[int, bytes]) -> bytes:
    """A tagged-field section holding tags no schema knows."""
    body = b"".join(_uvarint(tag) + _uvarint(len(value)) + value for tag, value in tags)
    return _uvarint(len(tags)) + body


def _exchange(bootstrap: str, api_key: int, version: int, body: bytes) -> Any:
    """Send one request on a fresh socket (a flexible one with an unknown tag in its header too);
    decode the response with kio."""
    host, port = bootstrap.rsplit(":", 1)
    client_id = b"raw-test"
    flexible = codec.is_flexible(api_key, version)
    header = struct.pack(">hhih", api_key, version, 7, len(client_id)) + client_id
    frame = header + (_unknown_tags((9, b"hdr")) if flexible else b"") + body
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
        response = _recv_exactly(sock, size)
    assert struct.unpack_from(">i", response)[0] == 7
    offset = 5 if flexible and api_key != API_VERSIONS else 4  # flexible response header: empty tag section
    value, used = entity_reader(codec.response_class(api_key, version))(response, offset)
    assert offset + used == len(response)
    return value


def _request(bootstrap: str, api_key: int, version: int, **fields: Any) -> Any:
    """A kio request built from `fields`, exchanged over a raw socket."""
    body = b"".join(codec.encode(codec.request_class(api_key, version)(**fields)))
    return _exchange(bootstrap, api_key, version, body)


def _recv_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        assert chunk, "broker closed the connection"
        data += chunk
    return data


def _with_trailing_tags(body: bytes, *tags: tuple[int, bytes]) -> bytes:
    """Replace the (empty) top-level tag section that ends a flexible body."""
    assert body.endswith(b"\x00")
    return body[:-1] + _unknown_tags(*tags)


def test_api_versions_v3_with_unknown_tagged_field(broker: BrokerProcess) -> None:
    request = codec.request_class(API_VERSIONS, 3)(client_software_name="raw", client_software_version="1")
    body = _with_trailing_tags(b"".join(codec.encode(request)), (5, b"\xaa\xbb"), (300, b"x" * 200))
    response = _exchange(broker.bootstrap, API_VERSIONS, 3, body)
    assert response.error_code == 0
    assert {api.api_key for api in response.api_keys} >= {API_VERSIONS, METADATA}


def test_metadata_v12_with_unknown_tags_at_every_level(broker: BrokerProcess) -> None:
    request = codec.request_class(METADATA, 12)(
        topics=(metadata_v12.MetadataRequestTopic(topic_id=NO_ID, name="tagged-topic"),),
        allow_auto_topic_creation=True, include_topic_authorized_operations=False,
    )
    body = b"".join(codec.encode(request))
    name_end = body.index(b"tagged-topic") + len(b"tagged-topic")
    assert body[name_end] == 0  # the topic entity's empty tag section
    body = body[:name_end] + _unknown_tags((42, b"\x01\x02\x03")) + body[name_end + 1:]
    body = _with_trailing_tags(body, (77, b""))
    response = _exchange(broker.bootstrap, METADATA, 12, body)
    assert [t.name for t in response.topics] == ["tagged-topic"]
    assert response.topics[0].error_code == 0
    assert len(response.topics[0].partitions) == 1


def test_unknown_tag_running_past_the_frame_closes_only_that_connection(broker: BrokerProcess) -> None:
    request = codec.request_class(API_VERSIONS, 3)(client_software_name="raw", client_software_version="1")
    body = b"".join(codec.encode(request))[:-1] + _uvarint(1) + _uvarint(5) + _uvarint(50) + b"short"
    with pytest.raises(AssertionError, match="closed the connection"):
        _exchange(broker.bootstrap, API_VERSIONS, 3, body)
    healthy = codec.request_class(API_VERSIONS, 3)(client_software_name="raw", client_software_version="1")
    response = _exchange(broker.bootstrap, API_VERSIONS, 3, b"".join(codec.encode(healthy)))
    assert response.error_code == 0


# ---------------------------------------------------------------------------- confluent-kafka AdminClient


@cache
def admin(bootstrap: str) -> AdminClient:
    """One client per broker, kept alive: a client collected before its futures resolve fails them."""
    return AdminClient({"bootstrap.servers": bootstrap, **QUIET})


def kafka_error(future: Future) -> KafkaError:
    """The KafkaError a failed admin future carries."""
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=FUTURE_TIMEOUT_S)
    return raised.value.args[0]


def create(bootstrap: str, name: str, partitions: int = 1, **configs: str) -> None:
    futures = admin(bootstrap).create_topics([NewTopic(name, partitions, config=configs)])
    futures[name].result(timeout=FUTURE_TIMEOUT_S)


def topic_configs(bootstrap: str, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ResourceType.TOPIC, name)
    return admin(bootstrap).describe_configs([resource])[resource].result(timeout=FUTURE_TIMEOUT_S)


def overrides(bootstrap: str, name: str) -> dict[str, str]:
    return {
        key: entry.value for key, entry in topic_configs(bootstrap, name).items()
        if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    }


def incremental(bootstrap: str, name: str, *entries: tuple[str, str | None, AlterConfigOpType]) -> Future:
    resource = ConfigResource(
        ResourceType.TOPIC, name,
        incremental_configs=[ConfigEntry(k, v, incremental_operation=op) for k, v, op in entries],
    )
    return admin(bootstrap).incremental_alter_configs([resource])[resource]


def partition_dirs(broker: BrokerProcess, topic: str) -> list[str]:
    return sorted(d for d in os.listdir(broker.data_dir) if d.rsplit("-", 1)[0] == topic)


def test_create_topics_validate_only_and_configs(broker: BrokerProcess) -> None:
    client = admin(broker.bootstrap)
    dry = client.create_topics([NewTopic("dry-run", 2, config={"retention.ms": "5000"})], validate_only=True)
    assert dry["dry-run"].result(timeout=FUTURE_TIMEOUT_S) is None
    assert "dry-run" not in client.list_topics(timeout=10).topics
    assert partition_dirs(broker, "dry-run") == []

    create(broker.bootstrap, "with-configs", 2, **{"retention.ms": "5000", "cleanup.policy": "compact"})
    assert overrides(broker.bootstrap, "with-configs") == {"retention.ms": "5000", "cleanup.policy": "compact"}
    assert partition_dirs(broker, "with-configs") == ["with-configs-0", "with-configs-1"]

    bad = client.create_topics([NewTopic("bad-config", 1, config={"retention.ms": "soon"})])
    assert kafka_error(bad["bad-config"]).code() == KafkaError.INVALID_CONFIG
    unknown = client.create_topics([NewTopic("unknown-config", 1, config={"no.such.config": "1"})])
    assert kafka_error(unknown["unknown-config"]).code() == KafkaError.INVALID_CONFIG
    assert not {"bad-config", "unknown-config"} & set(client.list_topics(timeout=10).topics)


def test_describe_configs_defaults_sources_and_synonyms(broker: BrokerProcess) -> None:
    create(broker.bootstrap, "described", 1, **{"retention.bytes": "100000"})
    configs = topic_configs(broker.bootstrap, "described")
    assert {"retention.ms", "segment.bytes", "cleanup.policy", "max.message.bytes"} <= set(configs)

    override = configs["retention.bytes"]
    assert (override.value, override.source) == ("100000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert [(s.name, s.value, s.source) for s in override.synonyms.values()] == [
        ("retention.bytes", "100000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
        ("log.retention.bytes", "-1", ConfigSource.DEFAULT_CONFIG.value),
    ]
    # The module's broker sets log.retention.hours=24. Kafka lists retention.ms's synonyms from its
    # broker key log.retention.ms on, dropping the hours entries before it: none, source DEFAULT_CONFIG.
    from_broker = configs["retention.ms"]
    assert (from_broker.value, from_broker.source) == (str(24 * 3_600_000), ConfigSource.DEFAULT_CONFIG.value)
    assert from_broker.synonyms == {}
    policy = configs["cleanup.policy"]
    assert [(s.name, s.value, s.source) for s in policy.synonyms.values()] == [
        ("log.cleanup.policy", "delete", ConfigSource.DEFAULT_CONFIG.value)]
    default = configs["segment.bytes"]
    assert (default.value, default.source) == (str(1 << 30), ConfigSource.DEFAULT_CONFIG.value)
    assert not default.is_read_only and not default.is_sensitive


def test_describe_configs_of_the_broker(broker: BrokerProcess) -> None:
    resource = ConfigResource(ResourceType.BROKER, "0")
    configs = admin(broker.bootstrap).describe_configs([resource])[resource].result(timeout=FUTURE_TIMEOUT_S)
    hours = configs["log.retention.hours"]
    assert (hours.value, hours.source, hours.is_read_only) == ("24", ConfigSource.STATIC_BROKER_CONFIG.value, True)
    assert configs["num.io.threads"].source == ConfigSource.DEFAULT_CONFIG.value

    # Clients route a broker resource to that broker, so ask this one about another id directly.
    response = _request(
        broker.bootstrap, DESCRIBE_CONFIGS, 4, include_synonyms=False, include_documentation=False,
        resources=(describe_configs_v4.DescribeConfigsResource(resource_type=4, resource_name="7",
                                                               configuration_keys=None),),
    )
    assert [(r.resource_name, r.error_code) for r in response.results] == [("7", KafkaError.INVALID_REQUEST)]


def test_describe_configs_documentation_and_types(broker: BrokerProcess) -> None:
    create(broker.bootstrap, "documented", 1)
    response = _request(
        broker.bootstrap, DESCRIBE_CONFIGS, 4, include_synonyms=True, include_documentation=True,
        resources=(describe_configs_v4.DescribeConfigsResource(
            resource_type=2, resource_name="documented", configuration_keys=("retention.ms", "cleanup.policy"),
        ),),
    )
    configs = {c.name: c for c in response.results[0].configs}
    assert set(configs) == {"retention.ms", "cleanup.policy"}
    assert (configs["retention.ms"].config_type, configs["cleanup.policy"].config_type) == (5, 7)  # LONG, LIST
    assert "log.retention" in configs["retention.ms"].documentation
    assert list(configs) == ["cleanup.policy", "retention.ms"]  # Kafka's order, not the request's
    assert [s.name for s in configs["retention.ms"].synonyms] == []  # hours entries precede log.retention.ms


def test_describe_configs_of_unknown_topic(broker: BrokerProcess) -> None:
    resource = ConfigResource(ResourceType.TOPIC, "never-created")
    error = kafka_error(admin(broker.bootstrap).describe_configs([resource])[resource])
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_alter_configs_replaces_the_whole_set(broker: BrokerProcess) -> None:
    create(broker.bootstrap, "altered", 1, **{"retention.ms": "60000", "max.message.bytes": "5000"})
    resource = ConfigResource(ResourceType.TOPIC, "altered", set_config={"segment.bytes": "1048576"})
    admin(broker.bootstrap).alter_configs([resource])[resource].result(timeout=FUTURE_TIMEOUT_S)
    assert overrides(broker.bootstrap, "altered") == {"segment.bytes": "1048576"}

    dry = ConfigResource(ResourceType.TOPIC, "altered", set_config={"segment.bytes": "2097152"})
    admin(broker.bootstrap).alter_configs([dry], validate_only=True)[dry].result(timeout=FUTURE_TIMEOUT_S)
    assert overrides(broker.bootstrap, "altered") == {"segment.bytes": "1048576"}

    invalid = ConfigResource(ResourceType.TOPIC, "altered", set_config={"segment.bytes": "-5"})
    assert kafka_error(admin(broker.bootstrap).alter_configs([invalid])[invalid]).code() == KafkaError.INVALID_CONFIG
    missing = ConfigResource(ResourceType.TOPIC, "not-there", set_config={"segment.bytes": "1048576"})
    error = kafka_error(admin(broker.bootstrap).alter_configs([missing])[missing])
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert overrides(broker.bootstrap, "altered") == {"segment.bytes": "1048576"}


def test_incremental_alter_configs_operations(broker: BrokerProcess) -> None:
    create(broker.bootstrap, "incremental", 1, **{"retention.ms": "60000"})
    set_, delete = AlterConfigOpType.SET, AlterConfigOpType.DELETE
    append, subtract = AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT

    incremental(broker.bootstrap, "incremental", ("flush.messages", "10", set_)).result(timeout=FUTURE_TIMEOUT_S)
    assert overrides(broker.bootstrap, "incremental") == {"retention.ms": "60000", "flush.messages": "10"}
    incremental(broker.bootstrap, "incremental", ("retention.ms", None, delete)).result(timeout=FUTURE_TIMEOUT_S)
    assert overrides(broker.bootstrap, "incremental") == {"flush.messages": "10"}
    assert topic_configs(broker.bootstrap, "incremental")["retention.ms"].value == str(24 * 3_600_000)

    incremental(broker.bootstrap, "incremental", ("cleanup.policy", "compact", append)).result(FUTURE_TIMEOUT_S)
    assert overrides(broker.bootstrap, "incremental")["cleanup.policy"] == "delete,compact"
    incremental(broker.bootstrap, "incremental", ("cleanup.policy", "delete", subtract)).result(FUTURE_TIMEOUT_S)
    assert overrides(broker.bootstrap, "incremental")["cleanup.policy"] == "compact"

    dry = ConfigResource(ResourceType.TOPIC, "incremental",
                         incremental_configs=[ConfigEntry("flush.messages", "99", incremental_operation=set_)])
    admin(broker.bootstrap).incremental_alter_configs([dry], validate_only=True)[dry].result(FUTURE_TIMEOUT_S)
    assert overrides(broker.bootstrap, "incremental")["flush.messages"] == "10"

    not_a_list = incremental(broker.bootstrap, "incremental", ("retention.ms", "5", append))
    assert kafka_error(not_a_list).code() == KafkaError.INVALID_CONFIG
    bad_value = incremental(broker.bootstrap, "incremental", ("cleanup.policy", "shred", set_))
    assert kafka_error(bad_value).code() == KafkaError.INVALID_CONFIG
    unknown = incremental(broker.bootstrap, "missing-topic", ("flush.messages", "1", set_))
    assert kafka_error(unknown).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert overrides(broker.bootstrap, "incremental") == {"flush.messages": "10", "cleanup.policy": "compact"}


def test_config_changes_reach_the_live_log(broker: BrokerProcess) -> None:
    create(broker.bootstrap, "live", 1)
    produce_all(broker.bootstrap, "live", [(None, b"x" * 1000)] * 20)
    segment_files = lambda: sorted(glob.glob(os.path.join(broker.data_dir, "live-0", "*.log")))  # noqa: E731
    assert len(segment_files()) == 1

    incremental(broker.bootstrap, "live", ("segment.bytes", "4096", AlterConfigOpType.SET)).result(
        timeout=FUTURE_TIMEOUT_S
    )
    produce_all(broker.bootstrap, "live", [(None, b"y" * 1000)] * 20, **{"linger.ms": 0, "batch.num.messages": 1})
    assert len(segment_files()) >= 4, "segment.bytes did not make the log roll"

    incremental(broker.bootstrap, "live", ("retention.ms", "1", AlterConfigOpType.SET)).result(
        timeout=FUTURE_TIMEOUT_S
    )
    wait_until(lambda: len(segment_files()) == 1, message="retention.ms to delete old segments")
    assert consume_offsets(broker.bootstrap, "live") == (40, 40), "every record expired, the log end stays"


def produce_to(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    """Records keyed by their value (compacted topics want keys) into one partition, all acknowledged."""
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": bootstrap, **QUIET})
    for value in values:
        producer.produce(topic, value, key=value, partition=partition, on_delivery=lambda e, _m: e and errors.append(e))
    assert producer.flush(10) == 0
    assert not errors, errors


def consume_offsets(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "admin-tests", **QUIET})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()


def test_delete_topic_removes_data_and_name_can_be_reused(broker: BrokerProcess) -> None:
    create(broker.bootstrap, "doomed", 2, **{"retention.bytes": "123456"})
    produce_all(broker.bootstrap, "doomed", [(b"k", b"old")] * 5)
    assert partition_dirs(broker, "doomed") == ["doomed-0", "doomed-1"]

    admin(broker.bootstrap).delete_topics(["doomed"])["doomed"].result(timeout=FUTURE_TIMEOUT_S)
    assert partition_dirs(broker, "doomed") == []
    assert "doomed" not in admin(broker.bootstrap).list_topics(timeout=10).topics

    create(broker.bootstrap, "doomed", 1)
    assert partition_dirs(broker, "doomed") == ["doomed-0"]
    assert overrides(broker.bootstrap, "doomed") == {}
    assert consume_offsets(broker.bootstrap, "doomed") == (0, 0)
    produce_all(broker.bootstrap, "doomed", [(None, b"new")])
    assert [m.value() for m in consume_partition(broker.bootstrap, "doomed", 0, 1)] == [b"new"]

    missing = admin(broker.bootstrap).delete_topics(["never-was"])["never-was"]
    assert kafka_error(missing).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_partitions(broker: BrokerProcess) -> None:
    create(broker.bootstrap, "growing", 1)
    client = admin(broker.bootstrap)
    dry = client.create_partitions([NewPartitions("growing", 5)], validate_only=True)["growing"]
    dry.result(timeout=FUTURE_TIMEOUT_S)
    assert partition_dirs(broker, "growing") == ["growing-0"]

    client.create_partitions([NewPartitions("growing", 3)])["growing"].result(timeout=FUTURE_TIMEOUT_S)
    assert partition_dirs(broker, "growing") == ["growing-0", "growing-1", "growing-2"]
    assert len(client.list_topics("growing", timeout=10).topics["growing"].partitions) == 3
    produce_to(broker.bootstrap, "growing", 2, [b"to partition 2"])
    assert [m.value() for m in consume_partition(broker.bootstrap, "growing", 2, 1)] == [b"to partition 2"]

    fewer = client.create_partitions([NewPartitions("growing", 2)])["growing"]
    assert kafka_error(fewer).code() == KafkaError.INVALID_PARTITIONS
    same = client.create_partitions([NewPartitions("growing", 3)])["growing"]
    assert kafka_error(same).code() == KafkaError.INVALID_PARTITIONS
    unknown = client.create_partitions([NewPartitions("no-such-topic", 3)])["no-such-topic"]
    assert kafka_error(unknown).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_delete_records_advances_the_log_start(broker: BrokerProcess) -> None:
    create(broker.bootstrap, "trimmed", 1)
    produce_all(broker.bootstrap, "trimmed", [(None, str(i).encode()) for i in range(10)])
    client = admin(broker.bootstrap)

    deleted = client.delete_records([TopicPartition("trimmed", 0, 4)])
    assert next(iter(deleted.values())).result(timeout=FUTURE_TIMEOUT_S).low_watermark == 4
    assert consume_offsets(broker.bootstrap, "trimmed") == (4, 10)
    assert [m.value() for m in consume_partition(broker.bootstrap, "trimmed", 0, 6, start=-2)] == [
        str(i).encode() for i in range(4, 10)
    ]
    lower = client.delete_records([TopicPartition("trimmed", 0, 2)])
    assert next(iter(lower.values())).result(timeout=FUTURE_TIMEOUT_S).low_watermark == 4

    beyond = client.delete_records([TopicPartition("trimmed", 0, 11)])
    assert kafka_error(next(iter(beyond.values()))).code() == KafkaError.OFFSET_OUT_OF_RANGE
    to_high_watermark = client.delete_records([TopicPartition("trimmed", 0, -1)])
    assert next(iter(to_high_watermark.values())).result(timeout=FUTURE_TIMEOUT_S).low_watermark == 10
    assert consume_offsets(broker.bootstrap, "trimmed") == (10, 10)


def test_describe_cluster(broker: BrokerProcess) -> None:
    cluster = admin(broker.bootstrap).describe_cluster().result(timeout=FUTURE_TIMEOUT_S)
    assert cluster.cluster_id
    assert cluster.controller.id == 0
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(0, "127.0.0.1", broker.port)]


def test_authorized_operations_without_an_authorizer_are_every_supported_one(broker: BrokerProcess) -> None:
    create(broker.bootstrap, "described-ops")
    client = admin(broker.bootstrap)
    described = client.describe_topics(TopicCollection(["described-ops"]), include_authorized_operations=True)
    topic = described["described-ops"].result(timeout=FUTURE_TIMEOUT_S)
    assert {op.name for op in topic.authorized_operations} == {
        "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"
    }
    cluster = client.describe_cluster(include_authorized_operations=True).result(timeout=FUTURE_TIMEOUT_S)
    assert {op.name for op in cluster.authorized_operations} == {
        "CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE"
    }
    not_asked = client.describe_topics(TopicCollection(["described-ops"]))["described-ops"]
    assert not_asked.result(timeout=FUTURE_TIMEOUT_S).authorized_operations is None


def test_metadata_v10_answers_cluster_operations_only_when_asked(broker: BrokerProcess) -> None:
    for asked, expected in ((True, 0b1_1111_1010_0000), (False, -(2**31))):
        response = _request(broker.bootstrap, METADATA, 10, topics=None, allow_auto_topic_creation=False,
                            include_cluster_authorized_operations=asked, include_topic_authorized_operations=asked)
        assert response.cluster_authorized_operations == expected
        topic_operations = {t.topic_authorized_operations for t in response.topics}
        assert topic_operations == ({0b1101_1111_1000} if asked else {-(2**31)})


# ---------------------------------------------------------------------------- kafka-python KafkaAdminClient


@pytest.fixture
def python_admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield client
    client.close()


def test_kafka_python_topic_lifecycle(broker: BrokerProcess, python_admin: KafkaAdminClient) -> None:
    created = python_admin.create_topics([kp.NewTopic("kp-topic", 1, 1, topic_configs={"retention.ms": "100000"})])
    result = created["topics"][0] if isinstance(created, dict) else created.topics[0]
    assert result["error_code"] == 0 and result["topic_id"] != str(uuid.UUID(int=0))
    assert result["configs"]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"

    resource = kp.ConfigResource(kp.ConfigResourceType.TOPIC, "kp-topic", configs={"segment.bytes": "200000"})
    assert python_admin.alter_configs([resource], incremental=False) == {"topic": {"kp-topic": "OK"}}
    described = python_admin.describe_configs([kp.ConfigResource(kp.ConfigResourceType.TOPIC, "kp-topic")])
    modified = described["topic"]["kp-topic"]
    assert {k: v["value"] for k, v in modified.items()} == {"retention.ms": "100000", "segment.bytes": "200000"}

    python_admin.create_partitions({"kp-topic": kp.NewPartitions(3)})
    assert partition_dirs(broker, "kp-topic") == ["kp-topic-0", "kp-topic-1", "kp-topic-2"]
    with pytest.raises(kafka_errors.InvalidPartitionsError):
        python_admin.create_partitions({"kp-topic": kp.NewPartitions(2)})

    produce_to(broker.bootstrap, "kp-topic", 0, [b"a", b"b", b"c"])
    deleted = python_admin.delete_records({kafka.TopicPartition("kp-topic", 0): -1})
    assert deleted[kafka.TopicPartition("kp-topic", 0)]["low_watermark"] == 3
    assert consume_offsets(broker.bootstrap, "kp-topic") == (3, 3)

    python_admin.delete_topics(["kp-topic"])
    assert "kp-topic" not in python_admin.list_topics()
    assert partition_dirs(broker, "kp-topic") == []


def test_kafka_python_describe_cluster(broker: BrokerProcess, python_admin: KafkaAdminClient) -> None:
    cluster = python_admin.describe_cluster()
    assert cluster["controller_id"] == 0
    assert [(b["broker_id"], b["port"]) for b in cluster["brokers"]] == [(0, broker.port)]
    assert set(cluster["authorized_operations"]) == {
        "CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE",
    }


# ---------------------------------------------------------------------------- restarts


def test_configs_partitions_and_log_start_survive_restarts() -> None:
    with running_broker(config={"num.partitions": "1"}) as own:
        create(own.bootstrap, "durable", 1, **{"retention.ms": "3600000"})
        incremental(own.bootstrap, "durable", ("cleanup.policy", "compact", AlterConfigOpType.SET)).result(
            FUTURE_TIMEOUT_S
        )
        admin(own.bootstrap).create_partitions([NewPartitions("durable", 2)])["durable"].result(FUTURE_TIMEOUT_S)
        produce_to(own.bootstrap, "durable", 1, [b"k%d" % i for i in range(5)])
        trimmed = admin(own.bootstrap).delete_records([TopicPartition("durable", 1, 2)])
        assert next(iter(trimmed.values())).result(FUTURE_TIMEOUT_S).low_watermark == 2
        expected = {"retention.ms": "3600000", "cleanup.policy": "compact"}

        assert own.stop() == 0
        own.restart()
        assert overrides(own.bootstrap, "durable") == expected
        assert consume_offsets(own.bootstrap, "durable", 1) == (2, 5)
        assert len(admin(own.bootstrap).list_topics("durable", timeout=10).topics["durable"].partitions) == 2

        incremental(own.bootstrap, "durable", ("retention.ms", None, AlterConfigOpType.DELETE)).result(
            FUTURE_TIMEOUT_S
        )
        own.kill()  # the metadata store writes (and fsyncs) every change before answering
        own.restart()
        assert overrides(own.bootstrap, "durable") == {"cleanup.policy": "compact"}


# ---------------------------------------------------------------------------- APIs without a client call


def test_offset_for_leader_epoch(broker: BrokerProcess) -> None:
    create(broker.bootstrap, "epochs", 1)
    produce_to(broker.bootstrap, "epochs", 0, [b"a", b"b", b"c"])

    def ask(version: int, schema: Any, topic: str, current: int, epoch: int) -> tuple[int, int, int]:
        extra = {"replica_id": -1} if version >= 3 else {}
        response = _request(broker.bootstrap, OFFSET_FOR_LEADER_EPOCH, version, **extra, topics=(
            schema.OffsetForLeaderTopic(topic=topic, partitions=(
                schema.OffsetForLeaderPartition(partition=0, current_leader_epoch=current, leader_epoch=epoch),
            )),
        ))
        answer = response.topics[0].partitions[0]
        return answer.error_code, answer.leader_epoch, answer.end_offset

    assert ask(4, leader_epoch_v4, "epochs", -1, 0) == (0, 0, 3)
    assert ask(2, leader_epoch_v2, "epochs", 0, 0) == (0, 0, 3)
    assert ask(4, leader_epoch_v4, "epochs", 3, 0)[0] == KafkaError.UNKNOWN_LEADER_EPOCH
    assert ask(4, leader_epoch_v4, "no-epochs-here", -1, 0)[0] == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_list_offsets_checks_the_leader_epoch_the_client_names(broker: BrokerProcess) -> None:
    """As Kafka's fetchOffsetForTimestamp (localLogWithEpochOrThrow): a v4+ current leader epoch
    newer than the partition's is UNKNOWN_LEADER_EPOCH (the client retries), -1 is unchecked."""
    create(broker.bootstrap, "offsets-epochs", 1)
    produce_to(broker.bootstrap, "offsets-epochs", 0, [b"a"])

    def ask(current: int) -> tuple[int, int]:
        partition = codec.make(list_offsets_v7.ListOffsetsPartition, partition_index=0, current_leader_epoch=current,
                               timestamp=-1)
        response = _request(broker.bootstrap, LIST_OFFSETS, 7, replica_id=-1, isolation_level=0, topics=(
            codec.make(list_offsets_v7.ListOffsetsTopic, name="offsets-epochs", partitions=(partition,)),))
        answer = response.topics[0].partitions[0]
        return answer.error_code, answer.offset

    assert ask(-1) == (0, 1)
    assert ask(0) == (0, 1)
    assert ask(3)[0] == KafkaError.UNKNOWN_LEADER_EPOCH


def _topic_id(bootstrap: str, name: str) -> uuid.UUID:
    response = _request(
        bootstrap, METADATA, 12, allow_auto_topic_creation=False, include_topic_authorized_operations=False,
        topics=(metadata_v12.MetadataRequestTopic(topic_id=NO_ID, name=name),),
    )
    return response.topics[0].topic_id


def test_delete_topics_by_id(broker: BrokerProcess) -> None:
    create(broker.bootstrap, "by-id", 1)
    topic_id = _topic_id(broker.bootstrap, "by-id")
    unknown_id = uuid.uuid4()

    def delete(*states: delete_topics_v6.DeleteTopicState) -> list[tuple[str | None, int]]:
        response = _request(broker.bootstrap, DELETE_TOPICS, 6, topics=states, timeout=timedelta(seconds=5))
        return [(r.name, r.error_code) for r in response.responses]

    both = delete_topics_v6.DeleteTopicState(name="by-id", topic_id=topic_id)
    assert delete(both) == [("by-id", KafkaError.INVALID_REQUEST)]
    assert delete(delete_topics_v6.DeleteTopicState(name=None, topic_id=unknown_id)) == [
        (None, KafkaError.UNKNOWN_TOPIC_ID)
    ]
    assert delete(delete_topics_v6.DeleteTopicState(name=None, topic_id=topic_id)) == [("by-id", 0)]
    assert partition_dirs(broker, "by-id") == []
    assert "by-id" not in admin(broker.bootstrap).list_topics(timeout=10).topics


def test_admin_request_with_unknown_tags_is_applied(broker: BrokerProcess) -> None:
    create(broker.bootstrap, "tagged-config", 1)
    request = codec.request_class(INCREMENTAL_ALTER_CONFIGS, 1)(
        validate_only=False,
        resources=(incremental_v1.AlterConfigsResource(resource_type=2, resource_name="tagged-config", configs=(
            incremental_v1.AlterableConfig(name="retention.ms", config_operation=0, value="123456"),
        )),),
    )
    body = b"".join(codec.encode(request))
    value_end = body.index(b"123456") + len(b"123456")
    assert body[value_end] == 0  # the config entry's empty tag section
    body = body[:value_end] + _unknown_tags((3, b"future"), (1000, b"")) + body[value_end + 1:]
    response = _exchange(broker.bootstrap, INCREMENTAL_ALTER_CONFIGS, 1, body)
    assert [r.error_code for r in response.responses] == [0]
    assert overrides(broker.bootstrap, "tagged-config") == {"retention.ms": "123456"}



def _create_topic_and_hang_up(bootstrap: str, name: str) -> None:
    """Send CreateTopics v7 and close the connection without reading the answer."""
    from kio.schema.create_topics.v7 import request as create_v7

    topic = create_v7.CreatableTopic(
        name=TopicName(name), num_partitions=i32(2), replication_factor=i16(1), assignments=(), configs=()
    )
    request = create_v7.CreateTopicsRequest(topics=(topic,), timeout=timedelta(seconds=5), validate_only=False)
    frame = struct.pack(">hhih", 19, 7, 1, 0) + b"\x00" + b"".join(codec.encode(request))
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)


def test_topics_created_by_clients_that_hang_up_at_once_are_still_served(broker: BrokerProcess) -> None:
    """A client that hangs up cancels its request; the topic it asked for must still open."""
    names = [f"hang-up-{i}" for i in range(20)]
    for name in names:
        _create_topic_and_hang_up(broker.bootstrap, name)
    for name in names:
        wait_until(lambda name=name: name in admin(broker.bootstrap).list_topics(timeout=5).topics,
                   message=f"{name} created")
        produce_all(broker.bootstrap, name, [(f"key-{k}".encode(), b"served") for k in range(10)])
        assert sum(consume_offsets(broker.bootstrap, name, p)[1] for p in (0, 1)) == 10

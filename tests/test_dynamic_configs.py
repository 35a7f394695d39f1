"""Dynamic broker configs (KIP-226) and KIP-848 group configs through DescribeConfigs,
IncrementalAlterConfigs and AlterConfigs, against real brokers and real clients."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from helpers import METADATA, QUIET, RawConnection, raw_request, wait_until
from kazoo.client import KazooClient

from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.testing import BrokerProcess, running_broker, running_cluster

DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44
TIMEOUT_S = 15
SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
GROUP_CONFIG = 8  # ConfigSource.DYNAMIC_GROUP_CONFIG


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker(config={"num.partitions": "1", "log.retention.hours": "24"}) as started:
        yield started


@functools.cache
def admin(bootstrap: str) -> AdminClient:
    """One client per broker, kept: a client collected before its futures resolve fails them."""
    return AdminClient({"bootstrap.servers": bootstrap, **QUIET})


def alter(bootstrap: str, kind: ResourceType, name: str, *changes: tuple[str, str | None, AlterConfigOpType]) -> None:
    resource = ConfigResource(kind, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op) for key, value, op in changes])
    admin(bootstrap).incremental_alter_configs([resource])[resource].result(TIMEOUT_S)


def refusal(bootstrap: str, kind: ResourceType, name: str, key: str, value: str) -> KafkaError:
    with pytest.raises(KafkaException) as refused:
        alter(bootstrap, kind, name, (key, value, SET))
    return refused.value.args[0]


def describe(bootstrap: str, kind: ResourceType, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(kind, name)
    return admin(bootstrap).describe_configs([resource])[resource].result(TIMEOUT_S)


def raw_alter(bootstrap: str, name: str, *changes: tuple[str, str | None, int], kind: int = 4) -> Any:
    """IncrementalAlterConfigs v1 as a raw request: clients cannot name the cluster default ("")."""
    from kio.schema.incremental_alter_configs.v1 import request as v1

    return raw_request(bootstrap, INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=(
        v1.AlterConfigsResource(resource_type=kind, resource_name=name, configs=tuple(
            v1.AlterableConfig(name=key, config_operation=op, value=value) for key, value, op in changes)),
    )).responses[0]


def raw_describe(bootstrap: str, name: str, kind: int = 4, keys: tuple[str, ...] | None = None) -> Any:
    from kio.schema.describe_configs.v4 import request as v4

    return raw_request(bootstrap, DESCRIBE_CONFIGS, 4, include_synonyms=True, include_documentation=False,
                       resources=(v4.DescribeConfigsResource(resource_type=kind, resource_name=name,
                                                             configuration_keys=keys),)).results[0]


# ---------------------------------------------------------------- broker configs


def test_dynamic_broker_configs_are_stored_described_and_kept_across_a_restart(tmp_path) -> None:
    data = str(tmp_path / "data")
    with running_broker(config={"log.retention.hours": "24"}, data_dir=data) as started:
        alter(started.bootstrap, ResourceType.BROKER, "0", ("log.retention.ms", "3600000", SET),
              ("sasl.kerberos.min.time.before.relogin", "60000", SET), ("num.io.threads", "4", SET))
        assert raw_alter(started.bootstrap, "", ("log.cleaner.threads", "2", 0)).error_code == 0
    with running_broker(config={"log.retention.hours": "24"}, data_dir=data) as again:
        configs = describe(again.bootstrap, ResourceType.BROKER, "0")
        ms = configs["log.retention.ms"]
        assert (ms.value, ms.source, ms.is_read_only) == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
        raw = raw_describe(again.bootstrap, "0", keys=("log.retention.ms",)).configs[0]
        assert [(s.name, s.value, s.source) for s in raw.synonyms] == [
            ("log.retention.ms", "3600000", 2), ("log.retention.hours", "24", 4), ("log.retention.hours", "168", 5)]
        custom = configs["sasl.kerberos.min.time.before.relogin"]  # a key logbus does not use: kept as Kafka keeps it
        assert (custom.value, custom.source) == ("60000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        assert configs["num.io.threads"].value == "4"
        hours = configs["log.retention.hours"]
        assert (hours.source, hours.is_read_only) == (ConfigSource.STATIC_BROKER_CONFIG.value, True)
        default = raw_describe(again.bootstrap, "")  # the cluster default lists only its own configs
        assert [(c.name, c.value, c.config_source) for c in default.configs] == [("log.cleaner.threads", "2", 3)]

        topic = describe_topic_after_create(again.bootstrap, "dyn-retention")
        retention = topic["retention.ms"]  # a topic without an override takes the dynamic value
        assert (retention.value, retention.source) == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)


def describe_topic_after_create(bootstrap: str, name: str) -> dict[str, ConfigEntry]:
    from confluent_kafka.admin import NewTopic

    admin(bootstrap).create_topics([NewTopic(name, 1, 1)])[name].result(TIMEOUT_S)
    return describe(bootstrap, ResourceType.TOPIC, name)


def test_read_only_and_per_broker_keys_are_refused_as_kafka_refuses_them(broker: BrokerProcess) -> None:
    hours = refusal(broker.bootstrap, ResourceType.BROKER, "0", "log.retention.hours", "1")
    assert (hours.code(), hours.str()) == (KafkaError.INVALID_REQUEST,
                                           "Cannot update these configs dynamically: Set(log.retention.hours)")
    keystore = refusal(broker.bootstrap, ResourceType.BROKER, "0", "ssl.keystore.location", "/k.pem")
    assert keystore.code() == KafkaError.INVALID_REQUEST and "listener prefix" in keystore.str()
    bad = refusal(broker.bootstrap, ResourceType.BROKER, "0", "log.retention.ms", "soon")
    assert bad.code() == KafkaError.INVALID_REQUEST
    too_big = refusal(broker.bootstrap, ResourceType.BROKER, "0", "num.io.threads", str(1 << 31))
    assert too_big.code() == KafkaError.INVALID_REQUEST and "Not a number of type INT" in too_big.str()
    at_default = raw_alter(broker.bootstrap, "", ("listener.name.plaintext.ssl.keystore.location", "/k.pem", 0))
    assert at_default.error_code == KafkaError.INVALID_REQUEST
    assert "broker id must be specified" in at_default.error_message
    append = raw_alter(broker.bootstrap, "0", ("num.io.threads", "2", 2))
    assert append.error_code == KafkaError.INVALID_CONFIG  # APPEND on a non-list key
    assert describe(broker.bootstrap, ResourceType.BROKER, "0")["log.retention.hours"].value == "24"


def test_a_dynamic_default_applies_at_once_to_topics_without_an_override(broker: BrokerProcess) -> None:
    """message.max.bytes set for the whole cluster: the next produce to a topic without its own
    max.message.bytes is held to it; a topic that overrides it is not."""
    from confluent_kafka.admin import NewTopic

    client = admin(broker.bootstrap)
    topics = [NewTopic("dyn-plain", 1, 1), NewTopic("dyn-own", 1, 1, config={"max.message.bytes": "1000000"})]
    for future in client.create_topics(topics).values():
        future.result(TIMEOUT_S)
    assert raw_alter(broker.bootstrap, "", ("message.max.bytes", "2000", 0)).error_code == 0
    try:
        plain = describe(broker.bootstrap, ResourceType.TOPIC, "dyn-plain")["max.message.bytes"]
        assert (plain.value, plain.source) == ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        assert produce_error(broker.bootstrap, "dyn-plain", 5000) == KafkaError.MSG_SIZE_TOO_LARGE
        assert produce_error(broker.bootstrap, "dyn-own", 5000) is None
    finally:
        assert raw_alter(broker.bootstrap, "", ("message.max.bytes", None, 1)).error_code == 0
    assert produce_error(broker.bootstrap, "dyn-plain", 5000) is None


def produce_error(bootstrap: str, topic: str, size: int) -> int | None:
    """The error of one record of `size` bytes, sent uncompressed (None: written)."""
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 10_000_000, **QUIET})
    errors: list[KafkaError | None] = []
    producer.produce(topic, b"x" * size, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(TIMEOUT_S)
    assert len(errors) == 1
    return None if errors[0] is None else errors[0].code()


# ---------------------------------------------------------------- group configs


def test_group_configs_are_described_with_defaults_and_overrides(broker: BrokerProcess) -> None:
    fresh = describe(broker.bootstrap, ResourceType.GROUP, "no-such-group")  # any group, existing or not
    assert {name: (entry.value, entry.source) for name, entry in fresh.items()} == {
        "consumer.session.timeout.ms": ("45000", 5), "consumer.heartbeat.interval.ms": ("5000", 5),
        "share.session.timeout.ms": ("45000", 5), "share.heartbeat.interval.ms": ("5000", 5),
        "share.record.lock.duration.ms": ("30000", 5), "share.auto.offset.reset": ("latest", 5),
        "share.isolation.level": ("read_uncommitted", 5), "streams.session.timeout.ms": ("45000", 5),
        "streams.heartbeat.interval.ms": ("5000", 5), "streams.num.standby.replicas": ("0", 5),
    }
    alter(broker.bootstrap, ResourceType.GROUP, "configured", ("consumer.session.timeout.ms", "50000", SET),
          ("share.auto.offset.reset", "earliest", SET))
    configured = describe(broker.bootstrap, ResourceType.GROUP, "configured")
    session = configured["consumer.session.timeout.ms"]
    assert (session.value, session.source) == ("50000", GROUP_CONFIG)
    assert [(s.name, s.value, s.source) for s in session.synonyms.values()] == [
        ("consumer.session.timeout.ms", "50000", GROUP_CONFIG), ("group.consumer.session.timeout.ms", "45000", 5)]
    assert configured["share.auto.offset.reset"].value == "earliest"
    alter(broker.bootstrap, ResourceType.GROUP, "configured", ("consumer.session.timeout.ms", None, DELETE))
    assert describe(broker.bootstrap, ResourceType.GROUP, "configured")["consumer.session.timeout.ms"].source == 5
    assert raw_describe(broker.bootstrap, "", kind=32).error_code == KafkaError.INVALID_REQUEST


BOUNDED = {  # group config -> (broker key suffix, Kafka's default, min, max)
    "consumer.session.timeout.ms": ("consumer.{}session.timeout.ms", 45000, 45000, 60000),
    "consumer.heartbeat.interval.ms": ("consumer.{}heartbeat.interval.ms", 5000, 5000, 15000),
    "share.session.timeout.ms": ("share.{}session.timeout.ms", 45000, 45000, 60000),
    "share.heartbeat.interval.ms": ("share.{}heartbeat.interval.ms", 5000, 5000, 15000),
    "share.record.lock.duration.ms": ("share.{}record.lock.duration.ms", 30000, 15000, 60000),
    "streams.session.timeout.ms": ("streams.{}session.timeout.ms", 45000, 45000, 60000),
    "streams.heartbeat.interval.ms": ("streams.{}heartbeat.interval.ms", 5000, 5000, 15000),
}


def test_group_configs_take_their_defaults_and_bounds_from_the_broker() -> None:
    """Each group.<kind>.<setting> is the group config's default; each group.<kind>.min/max.<setting>
    refuses a group value outside it (INVALID_CONFIG, Kafka's message naming the broker key)."""
    config = {"group.streams.num.standby.replicas": "1", "group.streams.max.standby.replicas": "1"}
    for suffix, default, low, high in BOUNDED.values():
        config |= {f"group.{suffix.format('')}": str(default + 1000), f"group.{suffix.format('min.')}": str(low + 100),
                   f"group.{suffix.format('max.')}": str(high - 100)}
    with running_broker(config=config) as started:
        described = describe(started.bootstrap, ResourceType.GROUP, "g")
        for name, (_suffix, default, _low, _high) in BOUNDED.items():
            entry = described[name]
            assert (entry.value, entry.source) == (str(default + 1000), ConfigSource.STATIC_BROKER_CONFIG.value), name
        assert described["streams.num.standby.replicas"].value == "1"
        for name, (suffix, _default, low, high) in BOUNDED.items():
            below = refusal(started.bootstrap, ResourceType.GROUP, "g", name, str(low + 50))
            assert (below.code(), below.str()) == (
                KafkaError.INVALID_CONFIG, f"{name} must be greater than or equal to group.{suffix.format('min.')}")
            above = refusal(started.bootstrap, ResourceType.GROUP, "g", name, str(high - 50))
            assert (above.code(), above.str()) == (
                KafkaError.INVALID_CONFIG, f"{name} must be less than or equal to group.{suffix.format('max.')}")
        standby = refusal(started.bootstrap, ResourceType.GROUP, "g", "streams.num.standby.replicas", "2")
        assert standby.str() == "streams.num.standby.replicas must be less than or equal to " \
                                "group.streams.max.standby.replicas"
        unknown = refusal(started.bootstrap, ResourceType.GROUP, "g", "consumer.no.such.key", "1")
        assert (unknown.code(), unknown.str()) == (KafkaError.INVALID_CONFIG,
                                                   "Unknown group config name: consumer.no.such.key")
        assert refusal(started.bootstrap, ResourceType.GROUP, "g", "share.isolation.level", "dirty").code() == \
            KafkaError.INVALID_CONFIG
        alter(started.bootstrap, ResourceType.GROUP, "g", ("consumer.session.timeout.ms", "48000", SET))
        assert describe(started.bootstrap, ResourceType.GROUP, "g")["consumer.session.timeout.ms"].value == "48000"


# ---------------------------------------------------------------- in a ZooKeeper cluster


def test_broker_and_group_configs_reach_every_broker_through_zookeeper(zookeeper: ZooKeeperServer) -> None:
    with running_cluster(2, zookeeper=zookeeper) as cluster:
        first, second = cluster.brokers[1], cluster.brokers[2]
        assert raw_alter(first.bootstrap, "", ("log.retention.ms", "7200000", 0)).error_code == 0
        alter(first.bootstrap, ResourceType.GROUP, "shared/group", ("consumer.heartbeat.interval.ms", "6000", SET))

        def seen_on_second() -> bool:
            retention = describe(second.bootstrap, ResourceType.BROKER, "2")["log.retention.ms"]
            heartbeat = describe(second.bootstrap, ResourceType.GROUP, "shared/group")["consumer.heartbeat.interval.ms"]
            return (retention.value, retention.source, heartbeat.value) == ("7200000", 3, "6000")

        wait_until(seen_on_second, timeout=TIMEOUT_S)
        zk = KazooClient(hosts=cluster.config["zookeeper.connect"])
        zk.start(timeout=TIMEOUT_S)
        try:
            assert b'"log.retention.ms":"7200000"' in zk.get("/config/brokers/<default>")[0]
            assert b"6000" in zk.get("/config/groups/shared%2Fgroup")[0]
        finally:
            zk.stop()
            zk.close()


def test_librdkafka_0081s_broker_and_group_alterations(broker: BrokerProcess) -> None:
    """The sequence librdkafka's 0081-admin test helper sends: a custom broker key with a list
    APPEND, then DELETE and SUBTRACT; a group's SET then DELETE."""
    append, subtract = AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT
    alter(broker.bootstrap, ResourceType.BROKER, "0", ("background.threads", "9", SET),
          ("log.cleanup.policy", "compact", append))
    configs = describe(broker.bootstrap, ResourceType.BROKER, "0")
    assert (configs["background.threads"].value, configs["log.cleanup.policy"].value) == ("9", "delete,compact")
    alter(broker.bootstrap, ResourceType.BROKER, "0", ("background.threads", "", DELETE),
          ("log.cleanup.policy", "compact", subtract))
    configs = describe(broker.bootstrap, ResourceType.BROKER, "0")
    assert "background.threads" not in configs and configs["log.cleanup.policy"].value == "delete"
    alter(broker.bootstrap, ResourceType.BROKER, "0", ("log.cleanup.policy", "", DELETE))
    assert describe(broker.bootstrap, ResourceType.BROKER, "0")["log.cleanup.policy"].source == 5

    alter(broker.bootstrap, ResourceType.GROUP, "my-group", ("consumer.session.timeout.ms", "50000", SET))
    alter(broker.bootstrap, ResourceType.GROUP, "my-group", ("consumer.session.timeout.ms", "", DELETE))
    assert describe(broker.bootstrap, ResourceType.GROUP, "my-group")["consumer.session.timeout.ms"].value == "45000"


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_alter_configs_replaces_a_groups_whole_set(broker: BrokerProcess) -> None:
    alter(broker.bootstrap, ResourceType.GROUP, "legacy", ("share.isolation.level", "read_committed", SET))
    resource = ConfigResource(ResourceType.GROUP, "legacy", set_config={"consumer.heartbeat.interval.ms": "6000"})
    admin(broker.bootstrap).alter_configs([resource])[resource].result(TIMEOUT_S)
    configs = describe(broker.bootstrap, ResourceType.GROUP, "legacy")
    own = {name for name, entry in configs.items() if entry.source == GROUP_CONFIG}
    assert own == {"consumer.heartbeat.interval.ms"}  # the isolation level went back to its default


def test_a_dynamic_connection_limit_holds_for_the_next_connection(broker: BrokerProcess) -> None:
    def connect() -> RawConnection:
        return RawConnection(broker.bootstrap, source="127.0.0.2")

    def served(connection: RawConnection) -> bool:
        return connection.call(METADATA, 12, topics=(), allow_auto_topic_creation=False,
                               include_topic_authorized_operations=False).brokers[0].port > 0

    assert raw_alter(broker.bootstrap, "0", ("max.connections.per.ip", "2", 0)).error_code == 0
    try:
        with connect() as first, connect() as second:
            assert served(first) and served(second)
            with connect() as third:
                assert third.closed_by_broker(), "a third connection from 127.0.0.2 was kept"
    finally:
        assert raw_alter(broker.bootstrap, "0", ("max.connections.per.ip", None, 1)).error_code == 0
    with connect() as first, connect() as second, connect() as third:
        assert served(first) and served(second) and served(third)

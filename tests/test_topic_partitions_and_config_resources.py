"""DescribeTopicPartitions (key 75, KIP-966 paging) and ListConfigResources (key 74, KIP-1142)
against a real broker, through kafka-python's KafkaAdminClient and raw requests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import kafka.admin as kp
import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from helpers import raw_request
from kafka.admin import KafkaAdminClient
from kio.schema.describe_topic_partitions.v0 import request as dtp_v0
from kio.schema.errors import ErrorCode

from logbus.testing import BrokerProcess, running_broker

API_VERSIONS, DESCRIBE_TOPIC_PARTITIONS, LIST_CONFIG_RESOURCES = 18, 75, 74
PARTITION_CAP = 6  # the broker's max.request.partition.size.limit
TOPICS = {"dtp-a": 3, "dtp-b": 2, "dtp-c": 4}
NO_ID = uuid.UUID(int=0)
ALL_TOPIC_OPERATIONS = 0b1101_1111_1000  # READ WRITE CREATE DELETE ALTER DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker(config={"max.request.partition.size.limit": str(PARTITION_CAP)}) as started:
        client = KafkaAdminClient(bootstrap_servers=started.bootstrap)
        try:
            client.create_topics([kp.NewTopic(name, count, 1) for name, count in TOPICS.items()])
        finally:
            client.close()
        yield started


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield client
    client.close()


def pages(admin: KafkaAdminClient, topics: list[str], limit: int) -> list[tuple[list[tuple[str, int]], Any]]:
    """Every page of a paged description: the (topic, partition) pairs of each and its next cursor."""
    found, cursor = [], None
    for _ in range(50):
        page = admin.describe_topic_partitions(topics, response_partition_limit=limit, cursor=cursor)
        cursor = page["next_cursor"]
        found.append(([(t["name"], p["partition_index"]) for t in page["topics"] for p in t["partitions"]], cursor))
        if cursor is None:
            return found
    raise AssertionError("paging did not end")


def test_api_versions_advertises_both_apis_in_their_kafka_41_ranges(broker: BrokerProcess) -> None:
    answer = raw_request(broker.bootstrap, API_VERSIONS, 3, client_software_name="t", client_software_version="1")
    ranges = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert ranges[DESCRIBE_TOPIC_PARTITIONS] == (0, 0)
    assert ranges[LIST_CONFIG_RESOURCES] == (0, 1)


def test_kafka_python_pages_through_topics_by_cursor(admin: KafkaAdminClient) -> None:
    assert pages(admin, ["dtp-c", "dtp-a", "dtp-b"], 2) == [
        ([("dtp-a", 0), ("dtp-a", 1)], {"topic_name": "dtp-a", "partition_index": 2}),
        ([("dtp-a", 2), ("dtp-b", 0)], {"topic_name": "dtp-b", "partition_index": 1}),
        ([("dtp-b", 1), ("dtp-c", 0)], {"topic_name": "dtp-c", "partition_index": 1}),
        ([("dtp-c", 1), ("dtp-c", 2)], {"topic_name": "dtp-c", "partition_index": 3}),
        ([("dtp-c", 3)], None),
    ]


def test_a_limit_used_up_at_a_topics_end_points_at_the_next_topic(admin: KafkaAdminClient) -> None:
    """As Kafka: the cursor names partition 0 of the next topic, not the end of the full one."""
    assert pages(admin, ["dtp-a", "dtp-b", "dtp-c"], 5) == [
        ([("dtp-a", 0), ("dtp-a", 1), ("dtp-a", 2), ("dtp-b", 0), ("dtp-b", 1)],
         {"topic_name": "dtp-c", "partition_index": 0}),
        ([("dtp-c", 0), ("dtp-c", 1), ("dtp-c", 2), ("dtp-c", 3)], None),
    ]


def test_the_limit_is_capped_by_max_request_partition_size_limit(admin: KafkaAdminClient) -> None:
    first = admin.describe_topic_partitions(["dtp-a", "dtp-b", "dtp-c"], response_partition_limit=2000)
    assert sum(len(t["partitions"]) for t in first["topics"]) == PARTITION_CAP
    assert first["next_cursor"] == {"topic_name": "dtp-c", "partition_index": 1}
    one = admin.describe_topic_partitions(["dtp-a"], response_partition_limit=0)  # at least one partition
    assert [len(t["partitions"]) for t in one["topics"]] == [1]


def test_unknown_and_illegal_topics_get_their_errors(admin: KafkaAdminClient) -> None:
    page = admin.describe_topic_partitions(["dtp-b", "dtp-missing", "bad name!"])
    by_name = {t["name"]: t for t in page["topics"]}
    assert [t["name"] for t in page["topics"]] == ["bad name!", "dtp-b", "dtp-missing"]
    assert by_name["dtp-missing"]["error_code"] == ErrorCode.unknown_topic_or_partition
    assert by_name["bad name!"]["error_code"] == ErrorCode.invalid_topic_exception
    assert by_name["dtp-missing"]["partitions"] == [] and by_name["dtp-missing"]["topic_id"] is None  # zero id
    assert by_name["dtp-b"]["error_code"] == 0 and len(by_name["dtp-b"]["partitions"]) == 2
    assert page["next_cursor"] is None


def test_partitions_carry_leader_replicas_and_empty_elr(broker: BrokerProcess) -> None:
    answer = raw_request(broker.bootstrap, DESCRIBE_TOPIC_PARTITIONS, 0,
                         topics=(dtp_v0.TopicRequest(name="dtp-b"),), response_partition_limit=10, cursor=None)
    (topic,) = answer.topics
    assert (topic.error_code, topic.name, topic.is_internal) == (ErrorCode.none, "dtp-b", False)
    assert topic.topic_id not in (None, NO_ID) and topic.topic_authorized_operations == ALL_TOPIC_OPERATIONS
    assert [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes, p.offline_replicas,
             p.eligible_leader_replicas, p.last_known_elr) for p in topic.partitions] == [
        (0, 0, (0,), (0,), (), (), ()), (1, 0, (0,), (0,), (), (), ())]


def test_every_topic_from_a_cursor_on(broker: BrokerProcess) -> None:
    """An empty topic list is every topic; the cursor starts at its topic and partition."""
    answer = raw_request(broker.bootstrap, DESCRIBE_TOPIC_PARTITIONS, 0, topics=(), response_partition_limit=100,
                         cursor=dtp_v0.Cursor(topic_name="dtp-b", partition_index=1))
    described = [(t.name, p.partition_index) for t in answer.topics for p in t.partitions if t.name.startswith("dtp-")]
    assert described == [("dtp-b", 1), ("dtp-c", 0), ("dtp-c", 1), ("dtp-c", 2), ("dtp-c", 3)]


@pytest.mark.parametrize("cursor", [dtp_v0.Cursor(topic_name="dtp-c", partition_index=0),
                                    dtp_v0.Cursor(topic_name="dtp-a", partition_index=-1)])
def test_a_cursor_the_request_cannot_have_is_invalid_request(broker: BrokerProcess, cursor: Any) -> None:
    """A cursor on a topic the request does not name, or on a negative partition: Kafka's
    INVALID_REQUEST on every named topic."""
    answer = raw_request(broker.bootstrap, DESCRIBE_TOPIC_PARTITIONS, 0, response_partition_limit=10, cursor=cursor,
                         topics=(dtp_v0.TopicRequest(name="dtp-a"), dtp_v0.TopicRequest(name="dtp-b")))
    assert [(t.name, t.error_code, t.partitions) for t in answer.topics] == [
        ("dtp-a", ErrorCode.invalid_request, ()), ("dtp-b", ErrorCode.invalid_request, ())]


def test_list_config_resources_v1_lists_brokers_and_topics(broker: BrokerProcess, admin: KafkaAdminClient) -> None:
    listed = admin.list_config_resources()
    assert listed["broker"] == ["0"]
    assert set(TOPICS) <= set(listed["topic"])
    assert set(listed) == {"broker", "topic"}  # no group or client-metrics configs here
    assert admin.list_config_resources(["TOPIC"]) == {"topic": listed["topic"]}
    assert admin.list_config_resources(["GROUP", "CLIENT_METRICS", "BROKER_LOGGER"]) == {}
    refused = raw_request(broker.bootstrap, LIST_CONFIG_RESOURCES, 1, resource_types=(2, 1))  # 1: UNKNOWN
    assert (refused.error_code, refused.config_resources) == (ErrorCode.unsupported_version, ())


def test_list_config_resources_lists_groups_with_a_config_set(broker: BrokerProcess) -> None:
    """Kafka lists a group once a dynamic config is set on it (KIP-848 group configs)."""
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ResourceType.GROUP, "lcr-group", incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET)])
    client.incremental_alter_configs([resource])[resource].result(timeout=15)
    answer = raw_request(broker.bootstrap, LIST_CONFIG_RESOURCES, 1, resource_types=(32,))
    assert (answer.error_code, [(r.resource_name, r.resource_type) for r in answer.config_resources]) == (
        ErrorCode.none, [("lcr-group", 32)])


def test_list_config_resources_v0_is_client_metrics_only(broker: BrokerProcess) -> None:
    answer = raw_request(broker.bootstrap, LIST_CONFIG_RESOURCES, 0)
    assert (answer.error_code, answer.config_resources) == (ErrorCode.none, ())

"""Kafka's ZooKeeper-mode znode codecs (`cluster/zk_data.py`), in process: what each writes is
what Kafka writes, and what it reads back is what was written."""

from __future__ import annotations

import json

import pytest

from logbus.cluster.metadata import PartitionState
from logbus.cluster.zk_data import (
    EXTENDED_ACL_CHANGES,
    LITERAL_ACL_CHANGES,
    acl_path,
    decode_acl_change,
    decode_state,
    encode_acl_change,
    encode_assignment,
    encode_state,
    read_entity_config,
    read_user_credentials,
    state_path,
    topic_path,
)
from logbus.security.acl import PatternType, ResourcePattern, ResourceType


def test_a_partition_state_is_kafkas_json_and_reads_back() -> None:
    raw = encode_state(PartitionState(2, 7, [1, 2, 3], [2, 3]), controller_epoch=4)
    assert json.loads(raw) == {"controller_epoch": 4, "leader": 2, "version": 1, "leader_epoch": 7, "isr": [2, 3]}
    assert decode_state(raw) == (2, 7, [2, 3])
    assert state_path("t", 5) == "/brokers/topics/t/partitions/5/state"


def test_a_znode_that_is_no_partition_state_is_refused() -> None:
    with pytest.raises(KeyError):
        decode_state(b'{"leader": 1}')
    with pytest.raises(ValueError):
        decode_state(b"not json")


def test_an_assignment_lists_replicas_and_only_the_reassignments_in_progress() -> None:
    partitions = [PartitionState(1, 0, [1, 2], [1, 2]),
                  PartitionState(2, 0, [2, 3, 1], [2, 3], adding_replicas=[1], removing_replicas=[3])]
    assert json.loads(encode_assignment("id-1", partitions)) == {
        "version": 3, "topic_id": "id-1", "partitions": {"0": [1, 2], "1": [2, 3, 1]},
        "adding_replicas": {"1": [1]}, "removing_replicas": {"1": [3]}}
    assert topic_path("t") == "/brokers/topics/t"


@pytest.mark.parametrize("pattern_type, root", [(PatternType.LITERAL, LITERAL_ACL_CHANGES),
                                                (PatternType.PREFIXED, EXTENDED_ACL_CHANGES)])
def test_an_acl_change_notification_names_its_resource(pattern_type: PatternType, root: str) -> None:
    pattern = ResourcePattern(ResourceType.TOPIC, "orders:eu", pattern_type)
    prefix, data = encode_acl_change(pattern)
    assert prefix == f"{root}/acl_changes_"
    assert decode_acl_change(root, data) == pattern


def test_a_literal_acl_change_is_kafkas_type_colon_name() -> None:
    _prefix, data = encode_acl_change(ResourcePattern(ResourceType.GROUP, "g", PatternType.LITERAL))
    assert data == b"Group:g"
    with pytest.raises(ValueError):
        decode_acl_change(LITERAL_ACL_CHANGES, b"no resource")


def test_acls_are_kept_per_resource_under_their_pattern_type() -> None:
    assert acl_path(ResourcePattern(ResourceType.TOPIC, "t", PatternType.LITERAL)) == "/kafka-acl/Topic/t"
    assert acl_path(ResourcePattern(ResourceType.TOPIC, "t", PatternType.PREFIXED)) == \
        "/kafka-acl-extended/prefixed/Topic/t"


def test_an_entity_config_is_its_config_map_and_an_empty_znode_none() -> None:
    assert read_entity_config(b'{"version":1,"config":{"producer_byte_rate":"1024"}}') == {
        "producer_byte_rate": "1024"}
    assert read_entity_config(b"") == {} and read_entity_config(None) == {}
    assert read_user_credentials(b'{"version":1,"config":{"producer_byte_rate":"1024"}}') == {}, "quotas only"

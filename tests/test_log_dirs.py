"""DescribeLogDirs and AlterReplicaLogDirs for the broker's data dir, with kafka-python's admin client."""

from __future__ import annotations

import os
from collections.abc import Iterator

import kafka.errors as kafka_errors
import pytest
from helpers import produce_all, raw_request
from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient, NewTopic
from kio.schema.describe_log_dirs.v1 import request as describe_log_dirs_v1

from logbus.testing import BrokerProcess, running_broker

DESCRIBE_LOG_DIRS = 35


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker() as started:
        yield started


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield client
    client.close()


def test_describe_log_dirs_reports_the_data_dir_and_partition_sizes(broker: BrokerProcess,
                                                                    admin: KafkaAdminClient) -> None:
    admin.create_topics([NewTopic("sized", 1, 1), NewTopic("other", 2, 1)])
    produce_all(broker.bootstrap, "sized", [(None, b"x" * 1000)] * 5)
    [answer] = admin.describe_log_dirs()
    assert answer["broker"] == 0
    [log_dir] = answer["log_dirs"]
    assert log_dir["error_code"] == 0
    assert log_dir["log_dir"] == os.path.abspath(broker.data_dir)
    volume = os.statvfs(broker.data_dir)
    assert log_dir["total_bytes"] == volume.f_blocks * volume.f_frsize
    assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
    sizes = {(t["name"], p["partition_index"]): p["partition_size"]
             for t in log_dir["topics"] for p in t["partitions"]}
    assert sizes[("sized", 0)] > 5000 and sizes[("other", 0)] == sizes[("other", 1)] == 0

    [only] = admin.describe_log_dirs(topic_partitions={"other": [1, 7], "never-created": [0]})
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in only["log_dirs"][0]["topics"]] == [
        ("other", [1])
    ], "only the named partitions this broker hosts"


def test_describe_log_dirs_v1(broker: BrokerProcess) -> None:
    response = raw_request(broker.bootstrap, DESCRIBE_LOG_DIRS, 1, topics=(
        describe_log_dirs_v1.DescribableLogDirTopic(topic="absent", partitions=(0,)),
    ))
    here = os.path.abspath(broker.data_dir)
    assert [(r.error_code, r.log_dir, r.topics) for r in response.results] == [(0, here, ())]


def test_alter_replica_log_dirs(broker: BrokerProcess, admin: KafkaAdminClient) -> None:
    admin.create_topics([NewTopic("moved", 1, 1)])
    here = os.path.abspath(broker.data_dir)
    answers = admin.alter_replica_log_dirs({
        TopicPartitionReplica("moved", 0, 0): here,
        TopicPartitionReplica("moved", 5, 0): here,
        TopicPartitionReplica("elsewhere", 0, 0): "/not/a/log/dir",
    })
    assert answers == {
        TopicPartitionReplica("moved", 0, 0): kafka_errors.NoError,
        TopicPartitionReplica("moved", 5, 0): kafka_errors.ReplicaNotAvailableError,
        TopicPartitionReplica("elsewhere", 0, 0): kafka_errors.LogDirNotFoundError,
    }

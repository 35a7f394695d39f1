"""ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments on a single broker,
answered as a one-broker Kafka answers them, at every served version (real broker process)."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import QUIET, RawConnection
from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from logbus.testing import BrokerProcess, running_broker

ELECT, ALTER, LIST = 43, 45, 46
TIMEOUT = datetime.timedelta(seconds=10)


@pytest.fixture(scope="module")
def broker() -> BrokerProcess:
    with running_broker() as started:
        client = AdminClient({"bootstrap.servers": started.bootstrap, **QUIET})
        client.create_topics([NewTopic("two", 2, 1)])["two"].result(15)
        yield started


def request_module(api_key: int, version: int):  # noqa: ANN201 - a kio module
    return load_payload_module(api_key, version, EntityType.request)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_elect_leaders_is_not_needed_on_one_broker(broker: BrokerProcess, version: int) -> None:
    module = request_module(ELECT, version)
    with RawConnection(broker.bootstrap) as connection:
        named = connection.call(ELECT, version, election_type=0, timeout=TIMEOUT, topic_partitions=(
            module.TopicPartitions(topic="two", partitions=(0, 1, 7)),))
        everything = connection.call(ELECT, version, election_type=0, timeout=TIMEOUT, topic_partitions=None)
    codes = {(r.topic, p.partition_id): p.error_code
             for r in named.replica_election_results for p in r.partition_result}
    assert codes == {("two", 0): ErrorCode.election_not_needed, ("two", 1): ErrorCode.election_not_needed,
                     ("two", 7): ErrorCode.unknown_topic_or_partition}
    every = {(r.topic, p.partition_id) for r in everything.replica_election_results for p in r.partition_result}
    assert {("two", 0), ("two", 1)} <= every


def test_confluent_kafka_elect_leaders_hears_not_needed(broker: BrokerProcess) -> None:
    from confluent_kafka import ElectionType

    client = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    result = client.elect_leaders(ElectionType.PREFERRED, [TopicPartition("two", 0)]).result(15)
    error = result[TopicPartition("two", 0)]
    assert error is not None and error.code() == ErrorCode.election_not_needed


@pytest.mark.parametrize("version", [0, 1])
def test_reassignments_on_one_broker(broker: BrokerProcess, version: int) -> None:
    module = request_module(ALTER, version)

    def alter(replicas: tuple[int, ...] | None, partition: int = 0) -> int:
        with RawConnection(broker.bootstrap) as connection:
            answer = connection.call(ALTER, version, timeout=TIMEOUT, allow_replication_factor_change=True, topics=(
                module.ReassignableTopic(name="two", partitions=(
                    module.ReassignablePartition(partition_index=partition, replicas=replicas),)),))
        return answer.responses[0].partitions[0].error_code

    assert alter((0,)) == ErrorCode.none, "the assignment in place"
    assert alter((5,)) == ErrorCode.invalid_replica_assignment, "no broker 5"
    assert alter((0, 0)) == ErrorCode.invalid_replica_assignment, "a broker twice"
    assert alter(()) == ErrorCode.invalid_replica_assignment
    assert alter(None) == ErrorCode.no_reassignment_in_progress
    assert alter((0,), partition=9) == ErrorCode.unknown_topic_or_partition
    with RawConnection(broker.bootstrap) as connection:
        listed = connection.call(LIST, 0, timeout=TIMEOUT, topics=None)
    assert listed.error_code == ErrorCode.none and listed.topics == ()


def logbus(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "logbus", *args, "--bootstrap-server", broker.bootstrap],
                          capture_output=True, text=True, timeout=60)


def test_reassign_generate_execute_verify_round_trip(broker: BrokerProcess, tmp_path: Path) -> None:
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "two"}]}))
    generated = logbus(broker, "reassign", "--generate", "--topics-to-move-json-file", str(topics),
                       "--broker-list", "0")
    assert generated.returncode == 0, generated.stderr
    proposed = json.loads(generated.stdout.split("Proposed partition reassignment configuration\n")[1])
    assert sorted((p["partition"], p["replicas"]) for p in proposed["partitions"]) == [(0, [0]), (1, [0])]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(proposed))
    executed = logbus(broker, "reassign", "--execute", "--reassignment-json-file", str(plan))
    assert executed.returncode == 0, executed.stdout + executed.stderr
    assert "Successfully started partition reassignments for two-0,two-1" in executed.stdout
    verified = logbus(broker, "reassign", "--verify", "--reassignment-json-file", str(plan))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "Reassignment of partition two-0 is completed." in verified.stdout
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "two", "partition": 0, "replicas": [3]}]}))
    refused = logbus(broker, "reassign", "--execute", "--reassignment-json-file", str(plan))
    assert refused.returncode == 1 and "INVALID_REPLICA_ASSIGNMENT" in refused.stdout.upper()


def test_elect_leaders_reports_valid_replicas_already_elected(broker: BrokerProcess) -> None:
    done = logbus(broker, "elect-leaders", "--election-type", "preferred", "--topic", "two")
    assert done.returncode == 0, done.stderr
    assert "Valid replica already elected for partitions two-0, two-1" in done.stdout

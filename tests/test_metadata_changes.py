"""Metadata changes against a real broker: written before they apply, never half done.

Producer ids survive a kill -9; a full disk refuses InitProducerId, DeleteTopics and CreatePartitions
with an error and leaves everything as it was, and the same request works once there is room.
"""

from __future__ import annotations

import datetime
import os
import time

from helpers import CREATE_TOPICS, INIT_PRODUCER_ID, RawConnection, ballast, raw_request
from kio.index import load_payload_module
from kio.schema.create_partitions.v3 import request as create_partitions_v3
from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.metadata.v12 import request as metadata_v12
from kio.static.constants import EntityType

from logbus.protocol.codec import make
from logbus.testing import running_broker

DELETE_TOPICS, CREATE_PARTITIONS = 20, 37
NONE, COORDINATOR_LOAD_IN_PROGRESS, KAFKA_STORAGE_ERROR = 0, 14, 56
TIMEOUT = datetime.timedelta(seconds=10)


def init_producer_id(bootstrap: str) -> tuple[int, int]:
    response = raw_request(bootstrap, INIT_PRODUCER_ID, 4, transactional_id=None,
                           transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1, producer_epoch=-1)
    return int(response.error_code), int(response.producer_id)


def create_topic(bootstrap: str, name: str, partitions: int) -> int:
    topic = create_topics_v7.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1, assignments=(),
                                  configs=())
    response = raw_request(bootstrap, CREATE_TOPICS, 7, topics=(topic,), timeout=TIMEOUT, validate_only=False)
    return int(response.topics[0].error_code)


def delete_topic(bootstrap: str, name: str) -> int:
    response = raw_request(bootstrap, DELETE_TOPICS, 5, topic_names=(name,), timeout=TIMEOUT)
    return int(response.responses[0].error_code)


def grow_topic(bootstrap: str, name: str, count: int) -> int:
    wanted = create_partitions_v3.CreatePartitionsTopic(name=name, count=count, assignments=None)
    response = raw_request(bootstrap, CREATE_PARTITIONS, 3, topics=(wanted,), timeout=TIMEOUT, validate_only=False)
    return int(response.results[0].error_code)


def partition_count(bootstrap: str, name: str) -> int:
    with RawConnection(bootstrap) as connection:
        response = connection.call(3, 12, topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name=name),),
                                   allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    topic = response.topics[0]
    return len(topic.partitions) if topic.error_code == NONE else -1


def test_producer_ids_are_never_reused_after_a_kill() -> None:
    with running_broker() as broker:
        seen = set()
        for _ in range(3):
            error, producer_id = init_producer_id(broker.bootstrap)
            assert error == NONE and producer_id >= 0
            assert producer_id not in seen, f"producer id {producer_id} handed out twice"
            seen.add(producer_id)
            broker.kill()
            broker.restart()


def test_a_full_disk_refuses_metadata_changes_and_changes_nothing(small_disk: str) -> None:
    with running_broker(data_dir=os.path.join(small_disk, "data")) as broker:
        assert create_topic(broker.bootstrap, "kept", 2) == NONE
        weight = ballast(small_disk, 0)
        try:
            assert init_producer_id(broker.bootstrap) == (COORDINATOR_LOAD_IN_PROGRESS, -1), "retriable"
            assert delete_topic(broker.bootstrap, "kept") == KAFKA_STORAGE_ERROR
            assert grow_topic(broker.bootstrap, "kept", 4) == KAFKA_STORAGE_ERROR
            assert partition_count(broker.bootstrap, "kept") == 2, "the topic is fully in place"
            assert sorted(d for d in os.listdir(broker.data_dir) if d.startswith("kept-")) == ["kept-0", "kept-1"]
        finally:
            os.unlink(weight)
        assert init_producer_id(broker.bootstrap) == (NONE, 0), "the refused allocation handed out nothing"
        assert grow_topic(broker.bootstrap, "kept", 4) == NONE
        assert partition_count(broker.bootstrap, "kept") == 4
        assert delete_topic(broker.bootstrap, "kept") == NONE, "a retry works"
        assert partition_count(broker.bootstrap, "kept") == -1
        assert not [d for d in os.listdir(broker.data_dir) if d.startswith("kept-")]
        broker.stop()
        broker.restart()
        assert partition_count(broker.bootstrap, "kept") == -1, "the deletion was persisted"


# ------------------------------------------------------------------------ partition bounds

POLICY_VIOLATION = 44


def create_topics(bootstrap: str, *wanted: tuple[str, int]) -> list[int]:
    topics = tuple(create_topics_v7.CreatableTopic(name=name, num_partitions=count, replication_factor=1,
                                                   assignments=(), configs=()) for name, count in wanted)
    response = raw_request(bootstrap, CREATE_TOPICS, 7, topics=topics, timeout=TIMEOUT, validate_only=False)
    return [int(topic.error_code) for topic in response.topics]


def test_a_request_for_millions_of_partitions_is_refused_at_once() -> None:
    with running_broker() as broker:
        started = time.monotonic()
        assert create_topics(broker.bootstrap, ("huge", 2**24)) == [POLICY_VIOLATION]
        assert create_topics(broker.bootstrap, ("a", 6000), ("b", 6000)) == [POLICY_VIOLATION] * 2, "in all"
        assert create_topic(broker.bootstrap, "small", 1) == NONE
        assert grow_topic(broker.bootstrap, "small", 2**24) == POLICY_VIOLATION
        assert time.monotonic() - started < 5, "answered at once"
        assert [partition_count(broker.bootstrap, name) for name in ("huge", "a", "b", "small")] == [-1, -1, -1, 1]
        assert not [d for d in os.listdir(broker.data_dir) if d.startswith(("huge-", "a-", "b-"))]


def test_max_partitions_bounds_the_partitions_a_broker_hosts() -> None:
    with running_broker(config={"max.partitions": "10", "num.partitions": "4"}) as broker:
        assert create_topic(broker.bootstrap, "six", 6) == NONE
        assert create_topic(broker.bootstrap, "five", 5) == POLICY_VIOLATION
        assert grow_topic(broker.bootstrap, "six", 11) == POLICY_VIOLATION
        assert grow_topic(broker.bootstrap, "six", 10) == NONE
        assert partition_count(broker.bootstrap, "six") == 10
        assert auto_create(broker.bootstrap, "auto") == POLICY_VIOLATION, "auto-creation is bounded too"
        assert partition_count(broker.bootstrap, "five") == -1


def test_max_partitions_counts_the_topics_a_request_creates_before_them() -> None:
    """A request's topics are written together: each one's bound counts the ones before it."""
    with running_broker(config={"max.partitions": "10"}) as broker:
        assert create_topics(broker.bootstrap, ("a", 4), ("b", 5), ("c", 2), ("d", 1)) == [
            NONE, NONE, POLICY_VIOLATION, NONE]
        assert [partition_count(broker.bootstrap, name) for name in "abcd"] == [4, 5, -1, 1]


def metadata_topics(connection: RawConnection, version: int, names: list[str] | None) -> tuple:
    """The topics of a Metadata answer at `version`: for `names`, or all (None)."""
    module = load_payload_module(3, version, EntityType.request)
    if names is None:
        topics = () if version == 0 else None
    else:
        topics = tuple(make(module.MetadataRequestTopic, name=name, topic_id=None) for name in names)
    return connection.call(3, version, topics=topics, allow_auto_topic_creation=False,
                           include_topic_authorized_operations=True, include_cluster_authorized_operations=False).topics


def test_the_all_topics_answer_matches_the_named_one_in_every_version_after_changes() -> None:
    """The all-topics answer, and one naming existing topics only, are spliced from each topic's
    encoding, kept until that topic changes; both match an answer built whole (one naming an
    invalid topic name too, left out here)."""
    with running_broker() as broker:
        assert create_topics(broker.bootstrap, ("a", 2), ("b", 3), ("c", 1)) == [NONE] * 3
        with RawConnection(broker.bootstrap) as connection:
            for step in ("created", "grown", "deleted"):
                names = ["a", "b"] if step == "deleted" else ["a", "b", "c"]
                for version in range(14):
                    built = tuple(t for t in metadata_topics(connection, version, [*names, "not a topic!"])
                                  if t.name != "not a topic!")
                    assert metadata_topics(connection, version, None) == built, f"v{version} {step}"
                    assert metadata_topics(connection, version, names) == built, f"v{version} {step}"
                if step == "created":
                    assert grow_topic(broker.bootstrap, "b", 5) == NONE
                elif step == "grown":
                    assert delete_topic(broker.bootstrap, "c") == NONE
            assert [len(t.partitions) for t in metadata_topics(connection, 12, None)] == [2, 5]


def auto_create(bootstrap: str, name: str) -> int:
    with RawConnection(bootstrap) as connection:
        response = connection.call(3, 12, topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name=name),),
                                   allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    return int(response.topics[0].error_code)

"""Internal topics belong to the broker: clients cannot delete `__consumer_offsets` or change its
partition count, and auto-creation refuses what CreateTopics refuses."""

from __future__ import annotations

import datetime

from helpers import METADATA, RawConnection, raw_request, wait_until
from kio.schema.create_partitions.v3 import request as create_partitions_v3
from kio.schema.metadata.v12 import request as metadata_v12

from logbus.testing import running_broker

FIND_COORDINATOR, DELETE_TOPICS, CREATE_PARTITIONS = 10, 20, 37
NONE, INVALID_REPLICATION_FACTOR, INVALID_REQUEST = 0, 38, 42
OFFSETS = "__consumer_offsets"
TIMEOUT = datetime.timedelta(seconds=10)


def metadata(bootstrap: str, name: str, allow_create: bool = False) -> tuple[int, int]:
    """(error code, partition count) of one topic."""
    with RawConnection(bootstrap) as connection:
        response = connection.call(METADATA, 12, topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name=name),),
                                   allow_auto_topic_creation=allow_create, include_topic_authorized_operations=False)
    topic = response.topics[0]
    return int(topic.error_code), len(topic.partitions)


def test_consumer_offsets_cannot_be_deleted_or_grown() -> None:
    with running_broker(config={"offsets.topic.num.partitions": "3"}) as broker:
        found = raw_request(broker.bootstrap, FIND_COORDINATOR, 3, key="g", key_type=0)
        assert found.error_code == NONE
        wait_until(lambda: metadata(broker.bootstrap, OFFSETS) == (NONE, 3), message="__consumer_offsets")

        deleted = raw_request(broker.bootstrap, DELETE_TOPICS, 5, topic_names=(OFFSETS,), timeout=TIMEOUT)
        assert deleted.responses[0].error_code == INVALID_REQUEST
        assert "internal" in deleted.responses[0].error_message
        grown = raw_request(
            broker.bootstrap, CREATE_PARTITIONS, 3, validate_only=False, timeout=TIMEOUT,
            topics=(create_partitions_v3.CreatePartitionsTopic(name=OFFSETS, count=6, assignments=None),),
        )
        assert grown.results[0].error_code == INVALID_REQUEST
        broker.stop()
        broker.restart()
        assert metadata(broker.bootstrap, OFFSETS) == (NONE, 3), "still there, unchanged, after a restart"


def test_auto_creation_refuses_more_replicas_than_brokers() -> None:
    with running_broker(config={"default.replication.factor": "3"}) as broker:
        assert metadata(broker.bootstrap, "three-replicas", allow_create=True) == (INVALID_REPLICATION_FACTOR, 0)
        assert metadata(broker.bootstrap, "three-replicas") != (NONE, 1), "nothing was created"

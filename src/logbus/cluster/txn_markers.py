"""Transaction markers: writing one to a partition this broker leads, as WriteTxnMarkers does.

A marker is appended with acks=all semantics (Kafka's KafkaApis.handleWriteTxnMarkersRequest
appends with required acks -1): refused below min.insync.replicas, then awaited until every ISR
member has it, and only then announced to the marker listeners (the group coordinator), so that
offsets committed in a transaction become visible no earlier than the marker is durable in the
ISR.
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from ..errors import KafkaApiError
from .partition import NotEnoughReplicasError, NotLeaderError
from .replica_manager import ReplicaManager

log = logging.getLogger(__name__)

# Kafka's request.timeout.ms default, which bounds its marker appends' wait for the ISR (logbus
# has no such key: nothing else waits on it).
MARKER_TIMEOUT_S = 30.0


async def write_marker(replicas: ReplicaManager, topic: str, index: int, producer_id: int, producer_epoch: int,
                       commit: bool, coordinator_epoch: int, timeout: float) -> ErrorCode:
    """Write a COMMIT or ABORT marker to partition `topic`-`index` as its leader, wait up to
    `timeout` seconds for the ISR to have it, then call the marker listeners.

    Answers as Kafka does: UNKNOWN_TOPIC_OR_PARTITION (not hosted here), NOT_LEADER_OR_FOLLOWER,
    NOT_ENOUGH_REPLICAS (before the append), INVALID_PRODUCER_EPOCH and
    TRANSACTION_COORDINATOR_FENCED (the log refuses the epochs), KAFKA_STORAGE_ERROR (the disk),
    then REQUEST_TIMED_OUT / NOT_ENOUGH_REPLICAS_AFTER_APPEND / NOT_LEADER_OR_FOLLOWER while
    waiting for the ISR; a listener that fails makes it UNKNOWN_SERVER_ERROR, as Kafka answers
    when the group coordinator cannot complete the offsets.
    """
    partition = replicas.get(topic, index)
    if partition is None:
        return ErrorCode.unknown_topic_or_partition
    try:
        info = partition.append_control_marker(producer_id, producer_epoch, commit, coordinator_epoch)
        await replicas.flush_if_due(partition)
    except NotLeaderError:
        return ErrorCode.not_leader_or_follower
    except NotEnoughReplicasError:
        return ErrorCode.not_enough_replicas
    except KafkaApiError as exc:
        return exc.code
    except OSError as exc:
        log.warning("cannot write a transaction marker to %s: %s", partition, exc)
        return ErrorCode.kafka_storage_error
    verdict = await partition.wait_replicated(info.last_offset + 1, timeout)
    if verdict is not None:
        return verdict
    try:
        replicas.marker_written(partition, producer_id, commit)
    except Exception:  # noqa: BLE001 - a listener's bug must not leave the marker unanswered
        log.exception("a marker listener failed for producer %d on %s", producer_id, partition)
        return ErrorCode.unknown_server_error
    return ErrorCode.none

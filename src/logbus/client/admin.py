"""Admin helpers the CLI tools and the console share, on the blocking client: the log dirs of
brokers as kafka-log-dirs.sh reports them (DescribeLogDirs, which confluent-kafka's AdminClient
lacks), and `KEY=VALUE` config entries as kafka-topics.sh and kafka-configs.sh read them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from ..protocol.codec import make
from .client import Client

DESCRIBE_LOG_DIRS = 35
DESCRIBE_LOG_DIRS_VERSION = 2
# Kafka's tool prints the exception a log dir's error code maps to; these are the ones a broker sends.
ERROR_NAMES = {
    ErrorCode.kafka_storage_error: "org.apache.kafka.common.errors.KafkaStorageException",
    ErrorCode.cluster_authorization_failed: "org.apache.kafka.common.errors.ClusterAuthorizationException",
}


def describe_log_dirs(client: Client, broker_ids: Iterable[int] | None = None,
                      topics: Collection[str] = ()) -> dict[str, Any]:
    """kafka-log-dirs.sh's JSON document (`{"brokers": [...], "version": 1}`) for `broker_ids`
    (default: every broker of the cluster), with the partitions of `topics` (default: all)."""
    if broker_ids is None:
        client.partitions(())
        broker_ids = sorted(client.brokers)
    module = load_payload_module(DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION, EntityType.request)
    request = make(module.DescribeLogDirsRequest, topics=None)
    brokers = []
    for broker_id in broker_ids:
        response = client.call_broker(broker_id, DESCRIBE_LOG_DIRS, request, DESCRIBE_LOG_DIRS_VERSION)
        brokers.append({"broker": broker_id, "logDirs": [_log_dir(result, topics) for result in response.results]})
    return {"brokers": brokers, "version": 1}


def _log_dir(result: Any, topics: Collection[str]) -> dict[str, Any]:
    error = None if result.error_code == ErrorCode.none else ERROR_NAMES.get(result.error_code, result.error_code.name)
    partitions = [
        {"partition": f"{topic.name}-{p.partition_index}", "size": p.partition_size, "offsetLag": p.offset_lag,
         "isFuture": p.is_future_key}
        for topic in result.topics if not topics or topic.name in topics
        for p in topic.partitions
    ]
    return {"logDir": result.log_dir, "error": error, "partitions": partitions}


def parse_key_values(items: list[str], option: str) -> dict[str, str]:
    """`["k=v", ...]` -> `{"k": "v"}`; ValueError naming `option` for an item without `=`."""
    values: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{option} expects KEY=VALUE, got {item!r}")
        values[key.strip()] = value.strip()
    return values

"""Authorized operations as Kafka reports them when no authorizer is configured.

Metadata (v8+) and DescribeCluster answer a bitfield of AclOperation codes (bit n set = operation
n allowed). Without an authorizer Kafka allows, and reports, every operation the resource type
supports (`AclEntry.supportedOperations`); INT32_MIN means "not requested".
"""

from __future__ import annotations

from enum import IntEnum

NOT_REQUESTED = -(2**31)


class AclOperation(IntEnum):
    """Kafka's AclOperation codes (org.apache.kafka.common.acl.AclOperation)."""

    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


def _bitfield(*operations: AclOperation) -> int:
    return sum(1 << op for op in operations)


Op = AclOperation
TOPIC_OPERATIONS = _bitfield(
    Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS
)
CLUSTER_OPERATIONS = _bitfield(
    Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE
)


def authorized(operations: int, requested: bool) -> int:
    """The bitfield to answer: `operations` when the client asked for it, else NOT_REQUESTED."""
    return operations if requested else NOT_REQUESTED

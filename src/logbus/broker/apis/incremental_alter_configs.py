"""IncrementalAlterConfigs (key 44): serves v0–v1.

Per config an operation on the topic's current overrides: SET (0), DELETE (1, back to the
default), APPEND (2) and SUBTRACT (3) on list configs (`cleanup.policy`; starting from the
effective value). The result is validated as a whole before anything is stored;
`validate_only` stops there. Stored overrides persist in the metadata store and reach the
topic's live logs at once. Errors per resource: UNKNOWN_TOPIC_OR_PARTITION, INVALID_CONFIG
(unknown name, bad value, APPEND/SUBTRACT on a non-list config, any broker config: those are
static here), INVALID_REQUEST (duplicate keys or resources, unknown operation, another broker's
id, unsupported resource type).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...cluster.metadata import TopicMetadata
from ..context import RequestContext
from ..topic_configs import alter_config_resources, apply_incremental

if TYPE_CHECKING:
    from ..broker import Broker

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    return await alter_config_resources(ctx, request, API_KEY, _operations_applied)


def _operations_applied(broker: Broker, topic: TopicMetadata, resource: Any) -> dict[str, str]:
    ops = [(config.name, config.config_operation, config.value) for config in resource.configs]
    return apply_incremental(broker, topic, ops)

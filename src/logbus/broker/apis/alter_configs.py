"""AlterConfigs (key 33): serves v0–v2.

The legacy, whole-set form: a topic's overrides become exactly the configs given (a config
left out returns to its default; a null value is left out). Validated as a whole before
anything is stored; `validate_only` stops there. Stored overrides persist in the metadata
store and reach the topic's live logs at once. Errors per resource: UNKNOWN_TOPIC_OR_PARTITION,
INVALID_CONFIG (unknown name, bad value, any broker config: those are static here),
INVALID_REQUEST (duplicate keys or resources, another broker's id, unsupported resource type).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...cluster.metadata import TopicMetadata
from ..context import RequestContext
from ..topic_configs import alter_config_resources, validated

if TYPE_CHECKING:
    from ..broker import Broker

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    return await alter_config_resources(ctx, request, API_KEY, _whole_set)


def _whole_set(broker: Broker, topic: TopicMetadata, resource: Any) -> dict[str, str]:
    """The configs given become the topic's overrides, all of them."""
    return validated(broker, {config.name: config.value for config in resource.configs})

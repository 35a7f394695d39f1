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

from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import make, response_class, response_module
from ..context import RequestContext
from ..topic_configs import (
    ResourceType,
    apply_incremental,
    check_broker_resource,
    check_once,
    refuse_broker_changes,
    repeated_resources,
    resource_type,
    store_topic_configs,
    topic_resource,
)
from ..topics import TopicError

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    repeated = repeated_resources(request.resources)
    responses = []
    for resource in request.resources:
        error, message = ErrorCode.none, None
        try:
            check_once(resource, repeated)
            await _alter(ctx, resource, request.validate_only)
        except TopicError as exc:
            error, message = exc.code, exc.message
        responses.append(make(
            module.AlterConfigsResourceResponse, error_code=error, error_message=message,
            resource_type=resource.resource_type, resource_name=resource.resource_name,
        ))
    return make(response_class(API_KEY, ctx.api_version), responses=tuple(responses))


async def _alter(ctx: RequestContext, resource: Any, validate_only: bool) -> None:
    if resource_type(resource.resource_type) is ResourceType.BROKER:
        check_broker_resource(ctx.broker, resource.resource_name)
        if resource.configs:
            raise refuse_broker_changes(config.name for config in resource.configs)
        return
    topic = topic_resource(ctx.broker, resource.resource_name)
    ops = [(config.name, config.config_operation, config.value) for config in resource.configs]
    configs = apply_incremental(ctx.broker, topic, ops)
    if not validate_only:
        await store_topic_configs(ctx.broker, topic.name, configs)

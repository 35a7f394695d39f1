"""AlterConfigs (key 33): serves v0–v2.

The legacy, whole-set form: a topic's overrides become exactly the configs given (a config
left out returns to its default; a null value is left out). Validated as a whole before
anything is stored; `validate_only` stops there. Stored overrides persist in the metadata
store and reach the topic's live logs at once. Errors per resource: UNKNOWN_TOPIC_OR_PARTITION,
INVALID_CONFIG (unknown name, bad value, any broker config: those are static here),
INVALID_REQUEST (duplicate keys or resources, another broker's id, unsupported resource type).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import make, response_class, response_module
from ..context import RequestContext
from ..topic_configs import (
    ResourceType,
    check_broker_resource,
    check_once,
    check_unique,
    refuse_broker_changes,
    repeated_resources,
    resource_type,
    store_topic_configs,
    topic_resource,
    validated,
)
from ..topics import TopicError

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2


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
    check_unique([config.name for config in resource.configs])
    if resource_type(resource.resource_type) is ResourceType.BROKER:
        check_broker_resource(ctx.broker, resource.resource_name)
        if resource.configs:
            raise refuse_broker_changes(config.name for config in resource.configs)
        return
    topic = topic_resource(ctx.broker, resource.resource_name)
    configs = validated({config.name: config.value for config in resource.configs})
    if not validate_only:
        await store_topic_configs(ctx.broker, topic.name, configs)

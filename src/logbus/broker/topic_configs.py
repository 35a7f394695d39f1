"""Config resources as DescribeConfigs, AlterConfigs and IncrementalAlterConfigs see them.

A resource is a topic (type 2) or a broker (type 4, named by its id; "" is the cluster-wide
default). Topic overrides are validated by `config.validate_topic_configs` and stored in the
metadata store, which announces the change so that the topic's logs pick it up. Broker
configs are static (server.properties and --set): they are described, never altered.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ..cluster.metadata import TopicMetadata
from ..config import TOPIC_KEYS, ConfigError, ConfigType, describe_topic_configs, validate_topic_configs
from ..errors import KafkaApiError
from ..protocol.codec import make, response_class, response_module
from ..security import acl
from .authorization import require, require_cluster
from .topics import metadata_change

if TYPE_CHECKING:
    from .broker import Broker
    from .context import RequestContext

NewOverrides = Callable[["Broker", TopicMetadata, Any], dict[str, str]]


class ResourceType(IntEnum):
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


class AlterOp(IntEnum):
    """IncrementalAlterConfigs operations."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def resource_type(code: int) -> ResourceType:
    try:
        resource = ResourceType(code)
    except ValueError:
        raise KafkaApiError(ErrorCode.invalid_request, f"Unsupported resource type {code}") from None
    if resource is ResourceType.BROKER_LOGGER:
        raise KafkaApiError(ErrorCode.invalid_request, "Broker loggers are not configurable on this broker")
    return resource


def topic_resource(broker: Broker, name: str) -> TopicMetadata:
    topic = broker.metadata.topic(name)
    if topic is None:
        raise KafkaApiError(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist")
    return topic


def check_broker_resource(broker: Broker, name: str) -> None:
    """Kafka's rule: a broker resource names this broker's id, or "" for the cluster default."""
    if name not in ("", str(broker.broker_id)):
        raise KafkaApiError(
            ErrorCode.invalid_request,
            f"Unexpected broker id, expected {broker.broker_id} or empty string, but received {name}",
        )


def refuse_broker_changes(names: Iterable[str]) -> KafkaApiError:
    return KafkaApiError(
        ErrorCode.invalid_config,
        f"Cannot update these configs dynamically: {sorted(names)}; set them in server.properties",
    )


def validated(broker: Broker, configs: Mapping[str, str | None]) -> dict[str, str]:
    """Topic overrides checked by name and value, and together with the broker's defaults
    (e.g. min.compaction.lag.ms <= max.compaction.lag.ms); INVALID_CONFIG otherwise."""
    try:
        return validate_topic_configs(configs, broker.config)
    except ConfigError as exc:
        raise KafkaApiError(ErrorCode.invalid_config, str(exc)) from None


def repeated_resources(resources: Iterable[Any]) -> set[tuple[int, str]]:
    """(type, name) of resources a request names more than once: Kafka rejects each of them."""
    counts = Counter((r.resource_type, r.resource_name) for r in resources)
    return {key for key, count in counts.items() if count > 1}


def check_once(resource: Any, repeated: set[tuple[int, str]]) -> None:
    if (resource.resource_type, resource.resource_name) in repeated:
        raise KafkaApiError(ErrorCode.invalid_request, f"Duplicate resource {resource.resource_name}")


def check_unique(names: list[str]) -> None:
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise KafkaApiError(ErrorCode.invalid_request, f"Error due to duplicate config keys: {duplicates}")


def apply_incremental(broker: Broker, topic: TopicMetadata, ops: list[tuple[str, int, str | None]]) -> dict[str, str]:
    """The topic's overrides after SET / DELETE / APPEND / SUBTRACT operations (validated)."""
    overrides = dict(topic.configs)
    effective = {c.name: c.text for c in describe_topic_configs(broker.config, overrides)}
    for name, code, value in ops:
        op = _alter_op(code)
        if name not in TOPIC_KEYS:
            raise KafkaApiError(ErrorCode.invalid_config, f"Unknown topic config name: {name}")
        if op is AlterOp.SET:
            overrides[name] = value
        elif op is AlterOp.DELETE:
            overrides.pop(name, None)
        else:
            overrides[name] = _list_op(name, op, effective.get(name), value)
    return validated(broker, overrides)


def _alter_op(code: int) -> AlterOp:
    try:
        return AlterOp(code)
    except ValueError:
        raise KafkaApiError(ErrorCode.invalid_request, f"Unknown config operation {code}") from None


def _list_op(name: str, op: AlterOp, current: str | None, value: str | None) -> str:
    """APPEND adds missing items to a list config, SUBTRACT removes them (Kafka: list types only)."""
    if TOPIC_KEYS[name].key.type is not ConfigType.LIST:
        raise KafkaApiError(
            ErrorCode.invalid_config, f"Config value {op.name.lower()} is not allowed for config key: {name}"
        )
    items = [item.strip() for item in (current or "").split(",") if item.strip()]
    changes = [item.strip() for item in (value or "").split(",") if item.strip()]
    if op is AlterOp.APPEND:
        items += [item for item in changes if item not in items]
    else:
        items = [item for item in items if item not in changes]
    return ",".join(items)


async def store_topic_configs(broker: Broker, name: str, configs: dict[str, str]) -> None:
    with metadata_change(name):
        await broker.metadata.set_topic_configs(name, configs)


def require_config_access(ctx: RequestContext, resource: Any, operation: acl.AclOperation) -> None:
    """DescribeConfigs/AlterConfigs (`operation`) on a topic, or on the cluster for a broker's
    configs, as Kafka authorizes them (TOPIC_/CLUSTER_AUTHORIZATION_FAILED)."""
    if resource_type(resource.resource_type) is ResourceType.TOPIC:
        require(ctx, operation, acl.ResourceType.TOPIC, resource.resource_name)
    else:
        require_cluster(ctx, operation)


async def alter_config_resources(ctx: RequestContext, request: Any, api_key: int, new_overrides: NewOverrides) -> Any:
    """The AlterConfigs / IncrementalAlterConfigs response: the two differ only in how a
    resource's configs become the topic's new overrides (`new_overrides`, validated)."""
    module = response_module(api_key, ctx.api_version)
    repeated = repeated_resources(request.resources)
    responses = []
    for resource in request.resources:
        error, message = ErrorCode.none, None
        try:
            check_once(resource, repeated)
            require_config_access(ctx, resource, acl.AclOperation.ALTER_CONFIGS)
            await _alter_resource(ctx.broker, resource, request.validate_only, new_overrides)
        except KafkaApiError as exc:
            error, message = exc.code, exc.message
        responses.append(make(
            module.AlterConfigsResourceResponse, error_code=error, error_message=message,
            resource_type=resource.resource_type, resource_name=resource.resource_name,
        ))
    return make(response_class(api_key, ctx.api_version), responses=tuple(responses))


async def _alter_resource(broker: Broker, resource: Any, validate_only: bool, new_overrides: NewOverrides) -> None:
    check_unique([config.name for config in resource.configs])
    if resource_type(resource.resource_type) is ResourceType.BROKER:
        check_broker_resource(broker, resource.resource_name)
        if resource.configs:
            raise refuse_broker_changes(config.name for config in resource.configs)
        return
    topic = topic_resource(broker, resource.resource_name)
    configs = new_overrides(broker, topic, resource)
    if not validate_only:
        await store_topic_configs(broker, topic.name, configs)

"""Config resources as DescribeConfigs, AlterConfigs and IncrementalAlterConfigs see them.

A resource is a topic (type 2), a broker (type 4, named by its id; "" is the cluster-wide
default) or a group (type 32, KIP-848 group configs). Topic overrides are validated by
`config.validate_topic_configs` and stored with the topic; broker and group configs are stored
as the metadata store's entity configs (`brokers/<id>`, `brokers/<default>`, `groups/<g>`). The
store announces each change: a topic's logs, or the broker's dynamic layers, pick it up.
Broker changes are checked as Kafka's DynamicBrokerConfig checks them (INVALID_REQUEST: a
read-only key, a TLS key without its listener prefix, a per-broker key at the cluster default, a
bad value); keys logbus does not declare are custom configs, stored as Kafka stores them. Group
changes as GroupConfig.validate (INVALID_CONFIG: unknown name, bad value, out of the broker's bounds).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ..cluster.metadata import TopicMetadata
from ..config import (
    BROKER_KEYS,
    DYNAMIC_KEYS,
    GROUP_KEYS,
    LISTENER_ONLY_KEYS,
    PER_BROKER_KEYS,
    TOPIC_KEYS,
    ConfigError,
    ConfigKey,
    ConfigType,
    declared_key,
    describe_topic_configs,
    listener_base_key,
    validate_group_configs,
    validate_topic_configs,
)
from ..errors import KafkaApiError
from ..protocol.codec import make, response_class, response_module
from ..security import acl
from .authorization import require, require_cluster

if TYPE_CHECKING:
    from .broker import Broker
    from .context import RequestContext

Operation = tuple[str, int, "str | None"]  # name, AlterOp code, value
BROKER_DEFAULT = "<default>"  # the entity name of the cluster-wide broker default
CLUSTER_LEVEL_LISTENER_KEYS = frozenset({"max.connections", "max.connection.creation.rate"})


class ResourceType(IntEnum):
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    GROUP = 32


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


def broker_entity(name: str) -> str:
    """The entity path of a broker resource: this broker's own configs, or the cluster default."""
    return f"brokers/{name or BROKER_DEFAULT}"


def group_entity(name: str) -> str:
    if not name:
        raise KafkaApiError(ErrorCode.invalid_request, "Group name must not be empty")
    return f"groups/{name}"


def validated(broker: Broker, configs: Mapping[str, str | None]) -> dict[str, str]:
    """Topic overrides checked by name and value, and together with the broker's defaults
    (e.g. min.compaction.lag.ms <= max.compaction.lag.ms); ConfigError (INVALID_CONFIG) otherwise."""
    return validate_topic_configs(configs, broker.config)


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


def _apply_incremental(broker: Broker, topic: TopicMetadata, ops: list[Operation]) -> dict[str, str]:
    """The topic's overrides after SET / DELETE / APPEND / SUBTRACT operations (validated); a list
    operation starts from the effective value."""
    effective = {c.name: c.text for c in describe_topic_configs(broker.config, topic.configs)}
    for name, _code, _value in ops:
        if name not in TOPIC_KEYS:
            raise KafkaApiError(ErrorCode.invalid_config, f"Unknown topic config name: {name}")
    overrides = apply_operations(topic.configs, ops, lambda n: TOPIC_KEYS[n].key, effective.get)
    return validated(broker, overrides)


def apply_operations(current: Mapping[str, str], ops: list[Operation], key_of: Callable[[str], ConfigKey | None],
                     base: Callable[[str], str | None]) -> dict[str, str]:
    """`current` after the operations; APPEND and SUBTRACT (list keys only) start from `base(name)`."""
    configs = dict(current)
    for name, code, value in ops:
        op = _alter_op(code)
        if op is not AlterOp.DELETE and value is None:
            raise KafkaApiError(ErrorCode.invalid_request, f"Null value not supported for : {name}")
        if op is AlterOp.SET:
            configs[name] = value  # type: ignore[assignment]
        elif op is AlterOp.DELETE:
            configs.pop(name, None)
        else:
            configs[name] = _list_op(name, key_of(name), op, configs.get(name, base(name)), value)
    return configs


def _alter_op(code: int) -> AlterOp:
    try:
        return AlterOp(code)
    except ValueError:
        raise KafkaApiError(ErrorCode.invalid_request, f"Unknown config operation {code}") from None


def _list_op(name: str, key: ConfigKey | None, op: AlterOp, current: str | None, value: str | None) -> str:
    """APPEND adds missing items to a list config, SUBTRACT removes them (Kafka: list types only)."""
    if key is None:
        raise KafkaApiError(ErrorCode.invalid_config, f"Unknown config name: {name}")
    if key.type is not ConfigType.LIST:
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


def validate_broker_configs(configs: Mapping[str, str], per_broker: bool) -> None:
    """Kafka's DynamicBrokerConfig.validateConfigs on a broker resource's whole new config
    (INVALID_REQUEST, as ConfigAdminManager answers its ConfigException)."""
    _refuse({n for n in configs if n in BROKER_KEYS and n not in DYNAMIC_KEYS},
            "Cannot update these configs dynamically")
    _refuse({n for n in configs if n in LISTENER_ONLY_KEYS},
            "These security configs can be dynamically updated only per-listener using the listener prefix")
    for name, text in configs.items():
        key = declared_key(name)
        try:
            if key is not None:
                key.parse(text)
        except ConfigError as exc:  # INVALID_CONFIG elsewhere; ConfigAdminManager's answer here
            raise KafkaApiError(ErrorCode.invalid_request, exc.message) from None
    if not per_broker:
        _refuse({n for n in configs if n in PER_BROKER_KEYS or _per_broker_listener_key(n)},
                "Cannot update these configs at default cluster level, broker id must be specified")


def _per_broker_listener_key(name: str) -> bool:
    base = listener_base_key(name)
    return base is not None and base not in CLUSTER_LEVEL_LISTENER_KEYS


def _refuse(names: set[str], reason: str) -> None:
    if names:
        raise KafkaApiError(ErrorCode.invalid_request, f"{reason}: Set({', '.join(sorted(names))})")


async def store_topic_configs(broker: Broker, name: str, configs: dict[str, str]) -> None:
    await broker.metadata.set_topic_configs(name, configs)


def require_config_access(ctx: RequestContext, resource: Any, operation: acl.AclOperation) -> None:
    """DescribeConfigs/AlterConfigs (`operation`) on a topic or a group, or on the cluster for a
    broker's configs, as Kafka authorizes them (TOPIC_/GROUP_/CLUSTER_AUTHORIZATION_FAILED)."""
    kind = resource_type(resource.resource_type)
    if kind is ResourceType.TOPIC:
        require(ctx, operation, acl.ResourceType.TOPIC, resource.resource_name)
    elif kind is ResourceType.GROUP:
        require(ctx, operation, acl.ResourceType.GROUP, resource.resource_name)
    else:
        require_cluster(ctx, operation)


async def alter_config_resources(ctx: RequestContext, request: Any, api_key: int, incremental: bool) -> Any:
    """The AlterConfigs / IncrementalAlterConfigs response: the two differ only in how a
    resource's configs become its new ones (`incremental`: operations on the current ones;
    else the whole set)."""
    module = response_module(api_key, ctx.api_version)
    repeated = repeated_resources(request.resources)
    responses = []
    for resource in request.resources:
        error, message = ErrorCode.none, None
        try:
            check_once(resource, repeated)
            require_config_access(ctx, resource, acl.AclOperation.ALTER_CONFIGS)
            await _alter_resource(ctx.broker, resource, request.validate_only, incremental)
        except KafkaApiError as exc:
            error, message = exc.code, exc.message
        responses.append(make(
            module.AlterConfigsResourceResponse, error_code=error, error_message=message,
            resource_type=resource.resource_type, resource_name=resource.resource_name,
        ))
    return make(response_class(api_key, ctx.api_version), responses=tuple(responses))


def _operations(resource: Any) -> list[Operation]:
    return [(config.name, config.config_operation, config.value) for config in resource.configs]


def _whole_set(resource: Any) -> dict[str, str]:
    """AlterConfigs: the configs given, all of them (a null value is Kafka's INVALID_REQUEST)."""
    nulls = [config.name for config in resource.configs if config.value is None]
    if nulls:
        raise KafkaApiError(ErrorCode.invalid_request, f"Null value not supported for : {', '.join(nulls)}")
    return {config.name: config.value for config in resource.configs}


async def _alter_resource(broker: Broker, resource: Any, validate_only: bool, incremental: bool) -> None:
    check_unique([config.name for config in resource.configs])
    kind = resource_type(resource.resource_type)
    if kind is ResourceType.TOPIC:
        await _alter_topic(broker, resource, validate_only, incremental)
        return
    if kind is ResourceType.BROKER:
        check_broker_resource(broker, resource.resource_name)
        entity = broker_entity(resource.resource_name)
    else:
        entity = group_entity(resource.resource_name)
    current = broker.metadata.entity_configs().get(entity, {})
    if incremental:
        configs = apply_operations(current, _operations(resource), *_list_keys(kind, current))
    else:
        configs = _whole_set(resource)
    if kind is ResourceType.BROKER:
        validate_broker_configs(configs, per_broker=resource.resource_name != "")
    else:
        _validated_group(broker, configs)
    if not validate_only:
        await broker.metadata.set_entity_configs(entity, configs)  # a failed write: nothing changed


async def _alter_topic(broker: Broker, resource: Any, validate_only: bool, incremental: bool) -> None:
    topic = topic_resource(broker, resource.resource_name)
    if incremental:
        configs = _apply_incremental(broker, topic, _operations(resource))
    else:
        configs = validated(broker, {config.name: config.value for config in resource.configs})
    if not validate_only:
        await store_topic_configs(broker, topic.name, configs)


def _validated_group(broker: Broker, configs: Mapping[str, str]) -> None:
    """Kafka's GroupConfig.validate, its refusals ConfigError (INVALID_CONFIG)."""
    validate_group_configs(configs, broker.config)


def _list_keys(kind: ResourceType, current: Mapping[str, str]) -> tuple[Callable[[str], ConfigKey | None],
                                                                          Callable[[str], str | None]]:
    """A broker or group resource's keys, and where a list operation starts: the stored value,
    else the key's default (Kafka's prepareIncrementalConfigs)."""
    keys = BROKER_KEYS if kind is ResourceType.BROKER else {n: g.key for n, g in GROUP_KEYS.items()}

    def base(name: str) -> str | None:
        key = keys.get(name)
        return current.get(name, None if key is None else key.default)

    return keys.get, base

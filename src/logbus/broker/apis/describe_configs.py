"""DescribeConfigs (key 32): serves v1–v4.

Entries are listed in Kafka's order (a java.util.HashMap's: clients' tests compare by position)
with Kafka's sources and synonyms (ConfigHelper): a config's own value first (a topic override:
DYNAMIC_TOPIC_CONFIG; a group's: DYNAMIC_GROUP_CONFIG), then its broker key in each layer that
sets it (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG,
DEFAULT_CONFIG), the entries before the broker key's own name dropped as Kafka drops them (so
`retention.ms` with only `log.retention.hours` set has none). Topics: every topic config.
Brokers by id: every broker config and the custom ones set, read-only unless Kafka updates it
dynamically; "" (the cluster default): only the dynamic default configs. Groups (KIP-848, any
name, existing or not): every group config. v3+ config types and, on request, documentation.
PASSWORD keys are marked sensitive and their values withheld, as Kafka withholds them.
`configuration_keys` null or empty means all. Errors per resource: UNKNOWN_TOPIC_OR_PARTITION,
INVALID_REQUEST (another broker's id, an empty group name, unsupported resource type).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...config import (
    BROKER_KEYS,
    DYNAMIC_KEYS,
    GROUP_KEYS,
    TOPIC_KEYS,
    ConfigSource,
    ConfigType,
    ConfigValue,
    declared_key,
    describe_group_configs,
    describe_topic_configs,
    java_hash_order,
)
from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation
from ..context import RequestContext
from ..topic_configs import (
    ResourceType,
    check_broker_resource,
    group_entity,
    require_config_access,
    resource_type,
    topic_resource,
)

API_KEY = 32
MIN_VERSION = 1
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    synonyms = request.include_synonyms
    documentation = getattr(request, "include_documentation", False)
    results = []
    for resource in request.resources:
        try:
            described = _describe(ctx, resource)
        except KafkaApiError as exc:
            results.append(_result(module, resource, (), exc.code, exc.message))
            continue
        wanted = resource.configuration_keys
        configs = tuple(
            _entry(module, value, read_only, synonyms, documentation)
            for value, read_only in described
            if not wanted or value.name in wanted
        )
        results.append(_result(module, resource, configs, ErrorCode.none, None))
    return make(response_class(API_KEY, ctx.api_version), results=tuple(results))


def _describe(ctx: RequestContext, resource: Any) -> list[tuple[ConfigValue, bool]]:
    """(config, read-only) pairs of one resource."""
    broker = ctx.broker
    require_config_access(ctx, resource, AclOperation.DESCRIBE_CONFIGS)
    kind = resource_type(resource.resource_type)
    if kind is ResourceType.TOPIC:
        topic = topic_resource(broker, resource.resource_name)
        return [(value, False) for value in describe_topic_configs(broker.config, topic.configs)]
    if kind is ResourceType.GROUP:
        overrides = broker.metadata.entity_configs().get(group_entity(resource.resource_name), {})
        return [(value, False) for value in describe_group_configs(broker.config, overrides)]
    check_broker_resource(broker, resource.resource_name)
    if resource.resource_name:
        return [(broker.config.describe(name), name not in DYNAMIC_KEYS) for name in broker.config.described_names()]
    return [(_cluster_default(ctx, name, text), name not in DYNAMIC_KEYS)
            for name, text in _in_kafka_order(broker.config.dynamic(per_broker=False))]


def _in_kafka_order(configs: dict[str, str]) -> list[tuple[str, str]]:
    return [(name, configs[name]) for name in java_hash_order(list(configs))]


def _cluster_default(ctx: RequestContext, name: str, text: str) -> ConfigValue:
    """A cluster-default entry: its stored value, only its DYNAMIC_DEFAULT_BROKER_CONFIG synonyms."""
    described = ctx.broker.config.describe(name)
    synonyms = tuple(s for s in described.synonyms if s[2] is ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
    return ConfigValue(name, text, text, source, described.type, synonyms)


def _entry(module: Any, value: ConfigValue, read_only: bool, synonyms: bool, documentation: bool) -> Any:
    sensitive = value.type == ConfigType.PASSWORD  # as Kafka: named, never shown (a key, a JAAS password)
    return make(
        module.DescribeConfigsResourceResult, name=value.name, value=None if sensitive else value.text,
        read_only=read_only, config_source=int(value.source), is_sensitive=sensitive,
        synonyms=tuple(
            make(module.DescribeConfigsSynonym, name=name, value=None if sensitive else text, source=int(source))
            for name, text, source in value.synonyms
        ) if synonyms else (),
        config_type=int(value.type), documentation=_documentation(value.name) if documentation else None,
    )


def _documentation(name: str) -> str | None:
    """A topic config's text is its first broker synonym's (the keys describe the same setting)."""
    topic_key = TOPIC_KEYS.get(name)
    if topic_key is not None:
        for synonym, _convert in topic_key.synonyms:
            if BROKER_KEYS[synonym].doc:
                return f"{BROKER_KEYS[synonym].doc} (topic override of {synonym})"
        return topic_key.key.doc or None
    key = GROUP_KEYS[name].key if name in GROUP_KEYS else declared_key(name)
    return (key.doc or None) if key is not None else None


def _result(module: Any, resource: Any, configs: tuple, error: ErrorCode, message: str | None) -> Any:
    return make(
        module.DescribeConfigsResult, error_code=error, error_message=message,
        resource_type=resource.resource_type, resource_name=resource.resource_name, configs=configs,
    )

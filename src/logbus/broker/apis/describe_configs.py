"""DescribeConfigs (key 32): serves v1–v4.

Topics: every topic config with its effective value and source (DYNAMIC_TOPIC_CONFIG for an
override, STATIC_BROKER_CONFIG when a broker synonym such as `log.retention.hours` is set,
DEFAULT_CONFIG otherwise). Brokers (named by id, or "" for the cluster default): every broker
config, read-only (they are static here). v1+ synonyms on request (the override first, then
the broker keys in the order Kafka consults them, unset ones left out); v3+ config types and,
on request, documentation. PASSWORD keys (TLS key passwords, `sasl.jaas.config`) are
marked sensitive and their values withheld, as Kafka withholds them. `configuration_keys` null
means all. Errors per resource: UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST (another broker's
id, unsupported resource type).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...config import BROKER_KEYS, TOPIC_KEYS, ConfigType, ConfigValue, describe_topic_configs
from ...errors import KafkaApiError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation
from ..context import RequestContext
from ..topic_configs import ResourceType, check_broker_resource, require_config_access, resource_type, topic_resource

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
            if wanted is None or value.name in wanted
        )
        results.append(_result(module, resource, configs, ErrorCode.none, None))
    return make(response_class(API_KEY, ctx.api_version), results=tuple(results))


def _describe(ctx: RequestContext, resource: Any) -> list[tuple[ConfigValue, bool]]:
    """(config, read-only) pairs of one resource."""
    broker = ctx.broker
    require_config_access(ctx, resource, AclOperation.DESCRIBE_CONFIGS)
    if resource_type(resource.resource_type) is ResourceType.TOPIC:
        topic = topic_resource(broker, resource.resource_name)
        return [(value, False) for value in describe_topic_configs(broker.config, topic.configs)]
    check_broker_resource(broker, resource.resource_name)
    return [(broker.config.describe(name), True) for name in BROKER_KEYS]


def _entry(module: Any, value: ConfigValue, read_only: bool, synonyms: bool, documentation: bool) -> Any:
    sensitive = value.type == ConfigType.PASSWORD  # as Kafka: named, never shown (a key, a JAAS password)
    return make(
        module.DescribeConfigsResourceResult, name=value.name, value=None if sensitive else value.text,
        read_only=read_only, config_source=int(value.source), is_sensitive=sensitive,
        synonyms=tuple(
            make(module.DescribeConfigsSynonym, name=name, value=None if sensitive else text, source=int(source))
            for name, text, source in value.synonyms
            if text is not None
        ) if synonyms else (),
        config_type=int(value.type), documentation=_documentation(value.name) if documentation else None,
    )


def _documentation(name: str) -> str | None:
    """A topic config's text is its first broker synonym's (the keys describe the same setting)."""
    topic_key = TOPIC_KEYS.get(name)
    if topic_key is None:
        return BROKER_KEYS[name].doc or None
    for synonym, _convert in topic_key.synonyms:
        if BROKER_KEYS[synonym].doc:
            return f"{BROKER_KEYS[synonym].doc} (topic override of {synonym})"
    return topic_key.key.doc or None


def _result(module: Any, resource: Any, configs: tuple, error: ErrorCode, message: str | None) -> Any:
    return make(
        module.DescribeConfigsResult, error_code=error, error_message=message,
        resource_type=resource.resource_type, resource_name=resource.resource_name, configs=configs,
    )

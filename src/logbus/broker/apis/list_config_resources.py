"""ListConfigResources (key 74; ListClientMetricsResources before Kafka 4.1): serves v0–v1.

The config resources of the types asked for (v1 `resource_types`; none named: every type the
version knows). v0 knows client metrics only; v1 also topics, brokers, broker loggers and
groups (KIP-1142). A type the version does not know makes the whole answer UNSUPPORTED_VERSION,
as Kafka's.

What there is to list here: brokers (those with an endpoint on the request's listener, by id,
as Kafka), topics (all of them, by name) and groups that have a dynamic config set (KIP-848
group configs, by name; Kafka lists a group only then). logbus keeps no client-metrics
configs, so there are none of those; broker loggers are not configurable here (DescribeConfigs
refuses them), so none are listed either, where Kafka names one per broker.

Needs DescribeConfigs on the cluster (CLUSTER_AUTHORIZATION_FAILED otherwise), as in Kafka.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation
from ..authorization import require_cluster
from ..context import RequestContext
from ..topic_configs import ResourceType

API_KEY = 74
MIN_VERSION = 0
MAX_VERSION = 1

CLIENT_METRICS = 16
GROUP = 32
KNOWN_TYPES = {
    0: frozenset({CLIENT_METRICS}),
    1: frozenset({ResourceType.TOPIC, ResourceType.BROKER, ResourceType.BROKER_LOGGER, CLIENT_METRICS, GROUP}),
}


async def handle(ctx: RequestContext, request: Any) -> Any:
    known = KNOWN_TYPES[ctx.api_version]
    wanted = set(getattr(request, "resource_types", ())) or known
    require_cluster(ctx, AclOperation.DESCRIBE_CONFIGS)
    if not wanted <= known:
        return _answer(ctx, ErrorCode.unsupported_version, [])
    return _answer(ctx, ErrorCode.none, _listed(ctx, wanted))


def _listed(ctx: RequestContext, wanted: set[int]) -> list[tuple[str, int]]:
    """(name, type) of the resources of the `wanted` types, in Kafka's order of types."""
    metadata = ctx.broker.metadata
    listed: list[tuple[str, int]] = []
    if ResourceType.BROKER in wanted:
        brokers = sorted(b.broker_id for b in metadata.brokers() if b.endpoint(ctx.listener_name) is not None)
        listed += [(str(broker_id), ResourceType.BROKER) for broker_id in brokers]
    if ResourceType.TOPIC in wanted:
        listed += [(name, ResourceType.TOPIC) for name in sorted(metadata.topics())]
    if GROUP in wanted:
        listed += [(name, GROUP) for name in _configured_groups(metadata.entity_configs())]
    return listed


def _configured_groups(entity_configs: dict[str, dict[str, str]]) -> list[str]:
    """The groups with a dynamic config set, by name (entity paths `groups/<group>`)."""
    return sorted(entity.removeprefix("groups/") for entity, configs in entity_configs.items()
                  if entity.startswith("groups/") and configs)


def _answer(ctx: RequestContext, error: ErrorCode, resources: list[tuple[str, int]]) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    return make(
        response_class(API_KEY, ctx.api_version), error_code=error,
        config_resources=tuple(
            make(module.ConfigResource, resource_name=name, resource_type=int(kind)) for name, kind in resources
        ),
    )

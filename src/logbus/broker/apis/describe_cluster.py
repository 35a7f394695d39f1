"""DescribeCluster (key 60): serves v0–v2.

Cluster id, controller and the registered brokers. v1 `endpoint_type`: 1 (brokers) only; a
broker cannot describe controllers (UNSUPPORTED_ENDPOINT_TYPE), as in Kafka. v2
`include_fenced_brokers`: no broker here is ever fenced. `include_cluster_authorized_operations`
reports the principal's cluster operations (every one without an authorizer; 0 to a principal
that may not Describe the cluster, as Kafka). Each broker is given by its endpoint on the
listener the request came in on (brokers without it are left out).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import make, response_class, response_module
from ...security.acl import CLUSTER_NAME, ResourceType
from ..authorization import authorized_operations
from ..context import RequestContext

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 2

BROKERS_ENDPOINT = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    metadata = ctx.broker.metadata
    endpoint_type = getattr(request, "endpoint_type", BROKERS_ENDPOINT)
    error, message, brokers = ErrorCode.none, None, ()
    if endpoint_type != BROKERS_ENDPOINT:
        error = ErrorCode.unsupported_endpoint_type
        message = f"Endpoint type {endpoint_type} is not served by a broker"
    else:
        endpoints = [(b, b.endpoint(ctx.listener_name)) for b in sorted(metadata.brokers(), key=lambda b: b.broker_id)]
        brokers = tuple(
            make(module.DescribeClusterBroker, broker_id=b.broker_id, host=endpoint.host, port=endpoint.port,
                 rack=b.rack, is_fenced=False)
            for b, endpoint in endpoints if endpoint is not None
        )
    return make(
        response_class(API_KEY, ctx.api_version), error_code=error, error_message=message,
        endpoint_type=endpoint_type, cluster_id=metadata.cluster_id, controller_id=metadata.controller_id,
        brokers=brokers,
        cluster_authorized_operations=authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME,
                                                            request.include_cluster_authorized_operations),
    )

"""What API handlers call to authorize a request: one place, whatever the handler.

Without `authorizer.class.name` the broker has no authorizer and every check here is one
attribute test that allows (the produce and fetch paths pay nothing more). With one, each check
asks `security.acl.Authorizer` about the connection's principal and address.

Inter-broker requests (a follower's Fetch with ClusterAction, WriteTxnMarkers) are checked like
any other: in Kafka the brokers' own principal must be a super user (or hold ClusterAction on
the cluster); until TLS or SASL gives brokers an identity that principal is User:ANONYMOUS.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..config import BrokerConfig
from ..errors import (
    ClusterAuthorizationError,
    GroupAuthorizationError,
    KafkaApiError,
    SecurityDisabledError,
    TopicAuthorizationError,
    TransactionalIdAuthorizationError,
)
from ..security.acl import (
    CLUSTER_NAME,
    NOT_REQUESTED,
    AclOperation,
    AclTable,
    Authorizer,
    ResourceType,
    all_operations,
    parse_super_users,
)
from .context import RequestContext

Op = AclOperation
DENIED: dict[ResourceType, Callable[[str], KafkaApiError]] = {
    ResourceType.TOPIC: TopicAuthorizationError,
    ResourceType.GROUP: GroupAuthorizationError,
    ResourceType.CLUSTER: ClusterAuthorizationError,
    ResourceType.TRANSACTIONAL_ID: TransactionalIdAuthorizationError,
}


def make_authorizer(config: BrokerConfig, acls: Callable[[], AclTable]) -> Authorizer | None:
    """The broker's authorizer over the store's `acls`, or None when `authorizer.class.name` is
    empty (authorization off)."""
    if not config["authorizer.class.name"]:
        return None
    return Authorizer(acls, parse_super_users(config["super.users"]), config["allow.everyone.if.no.acl.found"])


def authorize(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    authorizer = ctx.broker.authorizer
    return authorizer is None or authorizer.authorize(ctx.principal, ctx.client_host, operation, resource_type, name)


def authorize_cluster(ctx: RequestContext, operation: AclOperation) -> bool:
    return authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def require(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str) -> None:
    """Raise the resource type's refusal (*_AUTHORIZATION_FAILED) unless allowed."""
    refused = denial(ctx, operation, resource_type, name)
    if refused is not None:
        raise refused


def denial(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
           name: str) -> KafkaApiError | None:
    """The refusal (*_AUTHORIZATION_FAILED) of `operation` on the resource, None when allowed: for
    a handler that answers one part of a request with it and goes on with the others."""
    if authorize(ctx, operation, resource_type, name):
        return None
    return DENIED[resource_type](_refusal(operation, resource_type, name))


def require_cluster(ctx: RequestContext, operation: AclOperation) -> None:
    require(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def require_acl_admin(ctx: RequestContext, operation: AclOperation) -> None:
    """The ACL APIs: SECURITY_DISABLED without an authorizer, then `operation` on the cluster."""
    if ctx.broker.authorizer is None:
        raise SecurityDisabledError
    require_cluster(ctx, operation)


def authorized_names(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
                     names: Iterable[str]) -> set[str]:
    """The names among `names` that the request may do `operation` on (each decided once)."""
    unique = set(names)
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return unique
    return {n for n in unique if authorizer.authorize(ctx.principal, ctx.client_host, operation, resource_type, n)}


def authorize_by_resource_type(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType) -> bool:
    authorizer = ctx.broker.authorizer
    return authorizer is None or authorizer.authorize_by_resource_type(
        ctx.principal, ctx.client_host, operation, resource_type)


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str, requested: bool) -> int:
    """The authorized-operations bitfield to answer for a resource: INT32_MIN when not requested;
    every supported operation when there is no authorizer; 0 when the principal may not Describe
    the resource (as Kafka reports it)."""
    if not requested:
        return NOT_REQUESTED
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return all_operations(resource_type)
    if not authorizer.authorize(ctx.principal, ctx.client_host, Op.DESCRIBE, resource_type, name):
        return 0
    return authorizer.authorized_operations(ctx.principal, ctx.client_host, resource_type, name)


def _refusal(operation: AclOperation, resource_type: ResourceType, name: str) -> str:
    if resource_type is ResourceType.CLUSTER:
        return f"Not authorized to {operation.name} the cluster"
    return f"Not authorized to {operation.name} {resource_type.name} {name}"

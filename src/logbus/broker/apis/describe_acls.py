"""DescribeAcls (key 29): serves v1–v3.

The ACLs a filter selects (resource type, name or null, pattern type LITERAL/PREFIXED/ANY/MATCH,
principal, host, operation, permission), grouped by resource pattern. MATCH selects what would
apply to the named resource: LITERAL equal or `*`, PREFIXED a prefix of it. SECURITY_DISABLED
without an authorizer; CLUSTER_AUTHORIZATION_FAILED without Describe on the cluster;
INVALID_REQUEST for a filter with UNKNOWN fields.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclBinding, AclOperation, InvalidAclError, filter_from_wire
from ..authorization import require_acl_admin
from ..context import RequestContext

API_KEY = 29
MIN_VERSION = 1
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: Any) -> Any:
    cls = response_class(API_KEY, ctx.api_version)
    require_acl_admin(ctx, AclOperation.DESCRIBE)
    acl_filter = filter_from_wire(request.resource_type_filter, request.resource_name_filter,
                                  request.pattern_type_filter, request.principal_filter, request.host_filter,
                                  request.operation, request.permission_type)
    try:
        acl_filter.validate()
    except InvalidAclError as exc:
        return _error(cls, exc.code, exc.message)
    module = response_module(API_KEY, ctx.api_version)
    resources = []
    for pattern, entries in sorted(ctx.broker.metadata.acls().items(),
                                   key=lambda item: (item[0].resource_type, item[0].name, item[0].pattern_type)):
        acls = tuple(
            make(module.AclDescription, principal=e.principal, host=e.host, operation=e.operation,
                 permission_type=e.permission)
            for e in sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission))
            if acl_filter.matches(AclBinding(pattern, e)))
        if acls:
            resources.append(make(module.DescribeAclsResource, resource_type=pattern.resource_type,
                                  resource_name=pattern.name, pattern_type=pattern.pattern_type, acls=acls))
    return make(cls, error_code=ErrorCode.none, error_message=None, resources=tuple(resources))


def _error(cls: type, code: ErrorCode, message: str) -> Any:
    return make(cls, error_code=code, error_message=message, resources=())

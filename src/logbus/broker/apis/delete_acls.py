"""DeleteAcls (key 31): serves v1–v3.

Each filter (as DescribeAcls') removes the ACLs it selects and answers them. SECURITY_DISABLED
without an authorizer; CLUSTER_AUTHORIZATION_FAILED without Alter on the cluster;
INVALID_REQUEST for a filter with UNKNOWN fields. The removals of all filters are written
together, then applied: a failed write is KAFKA_STORAGE_ERROR for every filter that matched
something and removes nothing.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...cluster.metadata import MetadataWriteError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclBinding, AclOperation, InvalidAclError, bindings, filter_from_wire
from ..authorization import require_acl_admin
from ..context import RequestContext

API_KEY = 31
MIN_VERSION = 1
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    results = await _delete(ctx, request.filters)
    return make(response_class(API_KEY, ctx.api_version), filter_results=tuple(
        make(module.DeleteAclsFilterResult, error_code=code, error_message=message,
             matching_acls=tuple(_matching(module, b) for b in matched))
        for code, message, matched in results))


_Result = tuple[ErrorCode, str | None, list[AclBinding]]


async def _delete(ctx: RequestContext, filters: tuple[Any, ...]) -> list[_Result]:
    require_acl_admin(ctx, AclOperation.ALTER)
    existing = bindings(ctx.broker.metadata.acls())
    results: list[_Result] = []
    for raw in filters:
        acl_filter = filter_from_wire(raw.resource_type_filter, raw.resource_name_filter, raw.pattern_type_filter,
                                      raw.principal_filter, raw.host_filter, raw.operation, raw.permission_type)
        try:
            acl_filter.validate()
        except InvalidAclError as exc:
            results.append((exc.code, exc.message, []))
            continue
        results.append((ErrorCode.none, None, [b for b in existing if acl_filter.matches(b)]))
    removed = list({b for _code, _message, matched in results for b in matched})
    if removed:
        try:
            await ctx.broker.metadata.alter_acls([], removed)
        except MetadataWriteError as exc:
            return [(exc.code, str(exc), []) if matched else (code, message, matched)
                    for code, message, matched in results]
    return results


def _matching(module: Any, binding: AclBinding) -> Any:
    pattern, entry = binding.pattern, binding.entry
    return make(module.DeleteAclsMatchingAcl, error_code=ErrorCode.none, error_message=None,
                resource_type=pattern.resource_type, resource_name=pattern.name, pattern_type=pattern.pattern_type,
                principal=entry.principal, host=entry.host, operation=entry.operation,
                permission_type=entry.permission)

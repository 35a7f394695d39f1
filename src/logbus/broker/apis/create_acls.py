"""CreateAcls (key 30): serves v1–v3.

Each creation is a resource pattern (LITERAL or PREFIXED) and an entry (principal, host,
operation, ALLOW/DENY). Without an authorizer every creation is SECURITY_DISABLED, as Kafka
answers; without Alter on the cluster, CLUSTER_AUTHORIZATION_FAILED. A bad binding (pattern
type MATCH/ANY, operation ANY, an unparsable principal, a cluster not named kafka-cluster, an
empty name) is INVALID_REQUEST on its own; the valid ones are written together, then applied
(a failed write is KAFKA_STORAGE_ERROR for each and changes nothing). Creating an ACL that
exists succeeds and changes nothing.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...cluster.metadata import MetadataWriteError
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclBinding, AclOperation, InvalidAclError, binding_from_wire, validate_binding
from ..authorization import require_acl_admin
from ..context import RequestContext

API_KEY = 30
MIN_VERSION = 1
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    results = await _create(ctx, request.creations)
    return make(response_class(API_KEY, ctx.api_version), results=tuple(
        make(module.AclCreationResult, error_code=code, error_message=message) for code, message in results))


async def _create(ctx: RequestContext, creations: tuple[Any, ...]) -> list[tuple[ErrorCode, str | None]]:
    require_acl_admin(ctx, AclOperation.ALTER)
    results: list[tuple[ErrorCode, str | None]] = []
    valid: list[AclBinding] = []
    for creation in creations:
        binding = binding_from_wire(creation.resource_type, creation.resource_name, creation.resource_pattern_type,
                                    creation.principal, creation.host, creation.operation, creation.permission_type)
        try:
            validate_binding(binding)
            ctx.broker.metadata.check_acl_pattern(binding.pattern)
        except InvalidAclError as exc:
            results.append((exc.code, exc.message))
            continue
        valid.append(binding)
        results.append((ErrorCode.none, None))
    if valid:
        try:
            await ctx.broker.metadata.alter_acls(valid, [])
        except MetadataWriteError as exc:
            return [(exc.code, str(exc)) if code is ErrorCode.none else (code, message)
                    for code, message in results]
    return results

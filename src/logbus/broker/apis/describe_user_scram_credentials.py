"""DescribeUserScramCredentials (key 50): serves v0, as Kafka 4.1 advertises it.

Names each user's SCRAM mechanisms and iteration counts, never a salt or key. No users (null or
empty) describes every user that has a credential. Per user, as Kafka's ZkAdminManager answers:
DUPLICATE_RESOURCE for a user asked twice, RESOURCE_NOT_FOUND for one without credentials.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import make, response_class, response_module
from ...security.scram import MECHANISMS, ScramCredential
from ..context import RequestContext

API_KEY = 50
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)
    credentials = ctx.broker.metadata.scram_credentials()
    asked = [user.name for user in request.users or ()]
    if not asked:
        results = [_found(module, user, credentials[user]) for user in sorted(credentials)]
    else:
        counts = Counter(asked)
        results = [_describe(module, user, counts[user], credentials.get(user)) for user in dict.fromkeys(asked)]
    return make(response_class(API_KEY, ctx.api_version), throttle_time=timedelta(0), error_code=ErrorCode.none,
                error_message=None, results=tuple(results))


def _describe(module: Any, user: str, times_asked: int, found: dict[str, ScramCredential] | None) -> Any:
    if times_asked > 1:
        return _error(module, user, ErrorCode.duplicate_resource,
                      f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}")
    if not found:
        return _error(module, user, ErrorCode.resource_not_found,
                      f"Attempt to describe a user credential that does not exist: {user}")
    return _found(module, user, found)


def _found(module: Any, user: str, found: dict[str, ScramCredential]) -> Any:
    infos = tuple(make(module.CredentialInfo, mechanism=MECHANISMS[name].code, iterations=credential.iterations)
                  for name, credential in sorted(found.items()))
    return make(module.DescribeUserScramCredentialsResult, user=user, error_code=ErrorCode.none,
                error_message=None, credential_infos=infos)


def _error(module: Any, user: str, code: ErrorCode, message: str) -> Any:
    return make(module.DescribeUserScramCredentialsResult, user=user, error_code=code, error_message=message,
                credential_infos=())

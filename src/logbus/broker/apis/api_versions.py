"""ApiVersions (key 18): serves v0–v4.

Lists every API in the registry with the range Kafka 4.1 advertises. A request at a version
above v4 is answered in v0 with UNSUPPORTED_VERSION and the list, so the client retries at
a version both sides know (the server handles that before decoding).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import make, response_class, response_module
from . import registry

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4


@cache
def _response(version: int, error: ErrorCode = ErrorCode.none) -> Any:
    module = response_module(API_KEY, version)
    keys = tuple(
        make(module.ApiVersion, api_key=spec.key, min_version=spec.min_version,
             max_version=spec.max_version)
        for spec in sorted(registry().values(), key=lambda s: s.key)
    )
    return make(
        response_class(API_KEY, version), error_code=error, api_keys=keys,
        supported_features=(), finalized_features=(), finalized_features_epoch=-1,
        zk_migration_ready=False,
    )


def unsupported_version_response() -> Any:
    return _response(0, ErrorCode.unsupported_version)


async def handle(ctx: Any, request: Any) -> Any:
    return _response(ctx.api_version)

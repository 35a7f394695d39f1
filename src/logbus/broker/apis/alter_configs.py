"""AlterConfigs (key 33): serves v0–v2.

The legacy, whole-set form: a resource's configs become exactly the configs given (a config
left out returns to its default). Topics, brokers (an id or "" for the cluster default) and
groups; see `topic_configs` for how each is validated and stored. Validated as a whole before
anything is stored; `validate_only` stops there. Errors per resource: UNKNOWN_TOPIC_OR_PARTITION,
INVALID_CONFIG (topic or group: unknown name, bad value), INVALID_REQUEST (a null value,
duplicate keys or resources, another broker's id, a broker key Kafka does not update
dynamically, an empty group name, unsupported resource type).
"""

from __future__ import annotations

from typing import Any

from ..context import RequestContext
from ..topic_configs import alter_config_resources

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    return await alter_config_resources(ctx, request, API_KEY, incremental=False)

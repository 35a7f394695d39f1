"""IncrementalAlterConfigs (key 44): serves v0–v1.

Per config an operation on the resource's current configs: SET (0), DELETE (1, back to the
default), APPEND (2) and SUBTRACT (3) on list configs (a topic's from its effective value, a
broker's from its stored dynamic value or else the default). Topics, brokers (an id or "" for
the cluster default) and groups; see `topic_configs` for how each is validated and stored. The
result is validated as a whole before anything is stored; `validate_only` stops there. Errors
per resource: UNKNOWN_TOPIC_OR_PARTITION, INVALID_CONFIG (unknown topic or group config name,
bad topic or group value, APPEND/SUBTRACT on a non-list config), INVALID_REQUEST (a null value
to set, duplicate keys or resources, unknown operation, another broker's id, a broker key Kafka
does not update dynamically, an empty group name, unsupported resource type).
"""

from __future__ import annotations

from typing import Any

from ..context import RequestContext
from ..topic_configs import alter_config_resources

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    return await alter_config_resources(ctx, request, API_KEY, incremental=True)

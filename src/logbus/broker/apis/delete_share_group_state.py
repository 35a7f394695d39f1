"""DeleteShareGroupState (key 86): serves v0, Kafka 4.2's range.

An inter-broker API of the share coordinator (coordinator/share_coordinator.py): a share-partition's
state goes (tombstones in `__share_group_state`); one never initialized is deleted already. See
broker/share_state_requests.py for authorization and errors.
"""

from __future__ import annotations

from typing import Any

from ...coordinator.share_records import ShareKey
from ..context import RequestContext
from ..share_state_requests import serve

API_KEY = 86
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    async def answer(key: ShareKey, _partition: Any) -> dict[str, Any]:
        await ctx.broker.share_coordinator.delete(key)
        return {}
    return serve(ctx, request, API_KEY, "DeleteStateResult", answer)

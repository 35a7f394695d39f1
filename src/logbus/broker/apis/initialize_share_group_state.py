"""InitializeShareGroupState (key 83): serves v0, Kafka 4.2's range.

An inter-broker API of the share coordinator (coordinator/share_coordinator.py): a share-partition
leader starts a share-partition's state at a start offset with a state epoch (a snapshot record
in `__share_group_state`); FENCED_STATE_EPOCH when the state has a newer epoch. See
broker/share_state_requests.py for authorization and errors.
"""

from __future__ import annotations

from typing import Any

from ...coordinator.share_records import ShareKey
from ..context import RequestContext
from ..share_state_requests import serve

API_KEY = 83
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    async def answer(key: ShareKey, partition: Any) -> dict[str, Any]:
        await ctx.broker.share_coordinator.initialize(key, partition.state_epoch, partition.start_offset)
        return {}
    return serve(ctx, request, API_KEY, "InitializeStateResult", answer)

"""ReadShareGroupState (key 84): serves v0, Kafka 4.2's range.

An inter-broker API of the share coordinator (coordinator/share_coordinator.py): a share-partition
leader that starts serving a share-partition reads its state epoch, start offset and state
batches (start offset -1: never initialized). Its leader epoch is recorded first when newer;
FENCED_LEADER_EPOCH when older. See broker/share_state_requests.py for authorization and errors.
"""

from __future__ import annotations

from typing import Any

from ...coordinator.share_records import ShareKey
from ...protocol.codec import make, response_module
from ..context import RequestContext
from ..share_state_requests import serve

API_KEY = 84
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = response_module(API_KEY, ctx.api_version)

    async def answer(key: ShareKey, partition: Any) -> dict[str, Any]:
        state = await ctx.broker.share_coordinator.read(key, partition.leader_epoch)
        if state is None:
            return {"state_epoch": 0, "start_offset": -1, "state_batches": ()}
        return {"state_epoch": state.state_epoch, "start_offset": state.start_offset, "state_batches": tuple(
            make(module.StateBatch, first_offset=b.first_offset, last_offset=b.last_offset,
                 delivery_state=b.delivery_state, delivery_count=b.delivery_count) for b in state.batches)}
    return serve(ctx, request, API_KEY, "ReadStateResult", answer)

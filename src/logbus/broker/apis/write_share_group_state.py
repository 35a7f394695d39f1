"""WriteShareGroupState (key 85): serves v0–v1, Kafka 4.2's range (v1 adds KIP-1226's delivery
complete count, which logbus takes and does not keep).

An inter-broker API of the share coordinator (coordinator/share_coordinator.py): a share-partition
leader writes the state batches that changed, with the start offset (-1: unchanged) and its
state and leader epochs; answered once the record is in the ISR of `__share_group_state`.
FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH for a write from an older leader or state,
UNKNOWN_TOPIC_OR_PARTITION for a share-partition never initialized. See
broker/share_state_requests.py for authorization and errors.
"""

from __future__ import annotations

from typing import Any

from ...coordinator.share_records import ShareKey, StateBatch
from ..context import RequestContext
from ..share_state_requests import serve

API_KEY = 85
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    async def answer(key: ShareKey, partition: Any) -> dict[str, Any]:
        batches = tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                        for b in partition.state_batches)
        await ctx.broker.share_coordinator.write(key, partition.state_epoch, partition.leader_epoch,
                                                 partition.start_offset, batches)
        return {}
    return serve(ctx, request, API_KEY, "WriteStateResult", answer)

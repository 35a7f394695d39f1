"""ReadShareGroupStateSummary (key 87): serves v0–v1, Kafka 4.2's range (v1's delivery complete
count is answered -1, unknown: logbus does not keep it).

An inter-broker API of the share coordinator (coordinator/share_coordinator.py): a share-partition's
state epoch, leader epoch and start offset (-1: never initialized), for describing a share
group's offsets and lag; nobody is fenced. See broker/share_state_requests.py for authorization
and errors.
"""

from __future__ import annotations

from typing import Any

from ...coordinator.share_records import ShareKey
from ..context import RequestContext
from ..share_state_requests import serve

API_KEY = 87
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    async def answer(key: ShareKey, _partition: Any) -> dict[str, Any]:
        state = ctx.broker.share_coordinator.summary(key)
        if state is None:
            return {"state_epoch": 0, "leader_epoch": -1, "start_offset": -1}
        return {"state_epoch": state.state_epoch, "leader_epoch": state.leader_epoch,
                "start_offset": state.start_offset}
    return serve(ctx, request, API_KEY, "ReadStateSummaryResult", answer)

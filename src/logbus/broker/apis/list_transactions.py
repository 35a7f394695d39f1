"""ListTransactions (key 66): serves v0–v2.

The transactional ids this broker coordinates, filtered by state names (unknown names are
echoed in `unknown_state_filters`, as Kafka does), producer ids, from v1 a minimum running
duration in ms, and from v2 a regular expression the whole id must match. Admin clients ask
every broker and merge. COORDINATOR_LOAD_IN_PROGRESS while some partition is still loading.
"""

from __future__ import annotations

import re
from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator.txn_coordinator import STATE_NAMES
from ...protocol.codec import make, response_class, response_module
from ...security.acl import AclOperation, ResourceType
from ..authorization import authorized_names
from ..context import RequestContext

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    cls = response_class(API_KEY, ctx.api_version)
    module = response_module(API_KEY, ctx.api_version)
    known = set(STATE_NAMES.values())
    unknown = tuple(s for s in request.state_filters if s not in known)
    coordinator = ctx.broker.txn_coordinator
    if coordinator.loading:
        return make(cls, error_code=ErrorCode.coordinator_load_in_progress, unknown_state_filters=unknown,
                    transaction_states=())
    pattern = getattr(request, "transactional_id_pattern", None)
    try:
        txns = coordinator.list_transactions(set(request.state_filters), set(request.producer_id_filters),
                                             getattr(request, "duration_filter", -1), pattern or None)
    except re.error:
        return make(cls, error_code=ErrorCode.invalid_request, unknown_state_filters=unknown, transaction_states=())
    visible = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                               (t.transactional_id for t in txns))
    states = tuple(make(module.TransactionState, transactional_id=t.transactional_id, producer_id=t.producer_id,
                        transaction_state=STATE_NAMES[t.status]) for t in txns if t.transactional_id in visible)
    return make(cls, error_code=ErrorCode.none, unknown_state_filters=unknown, transaction_states=states)

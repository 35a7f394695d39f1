"""How a share-partition leader reads and writes its share-partitions' state (Kafka's Persister).

`SharePersister` is the narrow interface the share-partition leader uses (share_partitions.py):
`read`, `initialize`, `write`, `delete` and `summary` of one share-partition. Each goes to the
share coordinator of that share-partition, the leader of its `__share_group_state` partition
(the topic is created on first use): in-process when that is this broker, else as the
InitializeShareGroupState / ReadShareGroupState / WriteShareGroupState / DeleteShareGroupState /
ReadShareGroupStateSummary request (keys 83-87) over the inter-broker connection, as Kafka's
PersisterStateManager does. So one broker and a cluster take the same path.

While the coordinator cannot answer (NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS while
leadership moves or a partition loads, COORDINATOR_NOT_AVAILABLE, a broker that went away), the
request is tried again every `RETRY_BACKOFF_S` until `timeout_s` has passed; then, and for any
other error, KafkaApiError with the coordinator's code is raised and nothing is known to have
changed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from ..coordinator.share_coordinator import ShareCoordinator
from ..coordinator.share_records import ShareKey, ShareState, StateBatch
from ..errors import KafkaApiError
from ..protocol.codec import make, request_class, request_module
from .broker_client import BrokerClients

log = logging.getLogger(__name__)

INITIALIZE, READ, WRITE, DELETE, SUMMARY = 83, 84, 85, 86, 87
VERSIONS = {INITIALIZE: 0, READ: 0, WRITE: 0, DELETE: 0, SUMMARY: 0}  # what this broker sends
RETRIABLE = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
                       ErrorCode.coordinator_not_available, ErrorCode.request_timed_out})
RETRY_BACKOFF_S = 0.1
T = TypeVar("T")


class SharePersister:
    def __init__(self, broker_id: int, coordinator: ShareCoordinator, clients: BrokerClients,
                 timeout_s: float = 30.0) -> None:
        self.broker_id = broker_id
        self.coordinator = coordinator
        self.clients = clients
        self.timeout_s = timeout_s

    # ---------------------------------------------------------------- the interface

    async def read(self, key: ShareKey, leader_epoch: int) -> ShareState | None:
        """The share-partition's state (None: never initialized); records `leader_epoch`, fencing
        older leaders (FENCED_LEADER_EPOCH for an older one)."""
        def parse(part: Any) -> ShareState | None:
            if part.start_offset == -1:
                return None
            return ShareState(part.state_epoch, leader_epoch, part.start_offset, tuple(
                StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                for b in part.state_batches))
        return await self._call(key, lambda: self.coordinator.read(key, leader_epoch), READ,
                                lambda: {"leader_epoch": leader_epoch}, parse)

    async def initialize(self, key: ShareKey, state_epoch: int, start_offset: int) -> None:
        await self._call(key, lambda: self.coordinator.initialize(key, state_epoch, start_offset), INITIALIZE,
                         lambda: {"state_epoch": state_epoch, "start_offset": start_offset}, lambda _part: None)

    async def write(self, key: ShareKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: tuple[StateBatch, ...]) -> None:
        """Durable once this returns (the coordinator's ISR has it)."""
        def fields() -> dict[str, Any]:  # (only for a coordinator elsewhere)
            module = request_module(WRITE, VERSIONS[WRITE])
            return {"state_epoch": state_epoch, "leader_epoch": leader_epoch, "start_offset": start_offset,
                    "state_batches": tuple(make(module.StateBatch, first_offset=b.first_offset,
                                                last_offset=b.last_offset, delivery_state=b.delivery_state,
                                                delivery_count=b.delivery_count) for b in batches)}
        await self._call(key, lambda: self.coordinator.write(key, state_epoch, leader_epoch, start_offset, batches),
                         WRITE, fields, lambda _part: None)

    async def delete(self, key: ShareKey) -> None:
        await self._call(key, lambda: self.coordinator.delete(key), DELETE, dict, lambda _part: None)

    async def summary(self, key: ShareKey) -> ShareState | None:
        """The share-partition's start offset and epochs (None: never initialized), fencing no one."""
        def parse(part: Any) -> ShareState | None:
            return None if part.start_offset == -1 else ShareState(part.state_epoch, part.leader_epoch,
                                                                    part.start_offset)

        async def local() -> ShareState | None:
            return self.coordinator.summary(key)
        return await self._call(key, local, SUMMARY, lambda: {"leader_epoch": -1}, parse)

    # ---------------------------------------------------------------- to the coordinator

    async def _call(self, key: ShareKey, local: Callable[[], Awaitable[T]], api_key: int,
                    fields: Callable[[], dict[str, Any]], parse: Callable[[Any], T]) -> T:
        """Run the request on the share coordinator of `key` (`local` when it is this broker, else
        the request of `api_key` with the partition's `fields`), trying again while it moves."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while True:
            try:
                await self.coordinator.store.create()
                leader = self.coordinator.store.leader_of(self.coordinator.partition_for(key.coordinator_key()))
                if leader == self.broker_id:
                    return await local()
                return parse(await self._remote(leader, key, api_key, fields()))
            except KafkaApiError as exc:
                if exc.code not in RETRIABLE or loop.time() >= deadline:
                    raise
                reason: object = exc.code.name
            except OSError as exc:
                if loop.time() >= deadline:
                    raise KafkaApiError(ErrorCode.coordinator_not_available, f"share coordinator: {exc}") from None
                reason = exc
            log.debug("share coordinator of %s not answering (%s); trying again", key, reason)
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def _remote(self, leader: int | None, key: ShareKey, api_key: int, fields: dict[str, Any]) -> Any:
        """The answer of broker `leader` for the one partition of `key`; KafkaApiError for its error."""
        client = self.clients.get(leader) if leader is not None and leader >= 0 else None
        if client is None:
            raise KafkaApiError(ErrorCode.coordinator_not_available, "the share coordinator is not available")
        version = VERSIONS[api_key]
        module = request_module(api_key, version)
        topic_class = next(getattr(module, name) for name in (
            "InitializeStateData", "ReadStateData", "WriteStateData", "DeleteStateData", "ReadStateSummaryData")
            if hasattr(module, name))
        partition = make(module.PartitionData, partition=key.partition, **fields)
        request = make(request_class(api_key, version), group_id=key.group_id,
                       topics=(make(topic_class, topic_id=key.topic_id, partitions=(partition,)),))
        response = await client.request(api_key, version, request)
        parts = [p for result in response.results for p in result.partitions]
        if len(parts) != 1:
            raise KafkaApiError(ErrorCode.coordinator_not_available, "a share coordinator answer without the partition")
        if parts[0].error_code != ErrorCode.none:
            raise KafkaApiError(parts[0].error_code, parts[0].error_message or parts[0].error_code.name)
        return parts[0]

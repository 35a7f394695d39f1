"""`__transaction_state` as the transaction coordinator's store.

An `InternalTopic` (internal_topic.py: creation, acks=all writes, chunked reads) holding one
record per transactional id, as Kafka writes them (txn_records.py; TransactionLogValue v0,
Kafka's encoding for transaction version 1). Created on the first FindCoordinator for a
transactional id, compacted, with `transaction.state.log.num.partitions` partitions,
`transaction.state.log.replication.factor` replicas (capped by the live brokers),
`transaction.state.log.segment.bytes` segments and min.insync.replicas
`transaction.state.log.min.isr` (capped by the replicas it gets, so one broker can run it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .internal_topic import InternalTopic, TopicSpec
from .records import RecordFormatError
from .txn_records import TxnValue, decode_key, decode_value, encode_key, encode_value

if TYPE_CHECKING:
    from ..cluster.metadata import MetadataStore
    from ..cluster.replica_manager import ReplicaManager
    from ..config import BrokerConfig
    from .clock import Clock

TOPIC = "__transaction_state"
VALUE_VERSION = 0


class TxnStateTopic(InternalTopic):
    def __init__(self, config: BrokerConfig, metadata: MetadataStore, replicas: ReplicaManager,
                 clock: Clock) -> None:
        spec = TopicSpec(TOPIC, config["transaction.state.log.num.partitions"],
                         config["transaction.state.log.replication.factor"],
                         config["transaction.state.log.segment.bytes"], config["transaction.state.log.min.isr"])
        super().__init__(spec, metadata, replicas, clock)

    async def write(self, index: int, transactional_id: str, value: TxnValue | None) -> None:
        """The id's state (None: a tombstone, the id expired); raises KafkaApiError."""
        encoded = None if value is None else encode_value(value, VALUE_VERSION)
        await self.append(index, [(encode_key(transactional_id), encoded)])

    async def read_states(self, index: int) -> dict[str, TxnValue | None]:
        """The last state of each id of partition `index` (None for a tombstone), read a chunk
        of log at a time; records that do not decode are skipped."""
        latest: dict[str, TxnValue | None] = {}
        async for batches in self.read_batches(index):
            for _header, records, _marker in batches:
                for key, value in records:
                    try:
                        latest[decode_key(key)] = None if value is None else decode_value(value)
                    except (RecordFormatError, UnicodeDecodeError):
                        continue
        return latest

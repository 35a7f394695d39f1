"""A partition as this broker hosts it: its log plus replication state.

The log end offset (LEO) is where the next record goes; the high watermark (HW) is how far
every in-sync replica has the log, and consumers read only below it. A single broker is the
whole ISR, so the HW follows the LEO at once; with followers the HW moves as they fetch
(`update_follower`), and acks=all waits for it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ..protocol.records import BatchHeader
from ..storage.log import AppendInfo, PartitionLog
from ..storage.segment import ReadSlice
from .metadata import PartitionState


class NotLeaderError(Exception):
    pass


class NotEnoughReplicasError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class FetchedData:
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    slice: ReadSlice | None


class Partition:
    def __init__(self, topic: str, index: int, topic_id: str, broker_id: int, log: PartitionLog,
                 state: PartitionState, high_watermark: int) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.broker_id = broker_id
        self.log = log
        self.state = state
        self.high_watermark = min(max(high_watermark, log.log_start_offset), log.log_end_offset)
        self._new_data = asyncio.Event()
        self.appended_bytes = 0  # bytes appended as leader since this broker opened the log
        self._follower_leos: dict[int, int] = {}
        self._maybe_advance_high_watermark()

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.broker_id

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    def update_state(self, state: PartitionState) -> None:
        self.state = state
        self._follower_leos = {b: o for b, o in self._follower_leos.items() if b in state.isr}
        self._maybe_advance_high_watermark()

    def append_as_leader(
        self, data: bytearray, headers: list[BatchHeader], acks: int
    ) -> AppendInfo:
        if not self.is_leader:
            raise NotLeaderError(f"broker {self.broker_id} is not the leader of {self}")
        if acks == -1 and len(self.state.isr) < self.log.config.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{len(self.state.isr)} in-sync replicas, min.insync.replicas is "
                f"{self.log.config.min_insync_replicas}"
            )
        info = self.log.append(data, headers, self.leader_epoch)
        if not info.duplicate:
            self.appended_bytes += len(data)
            self._maybe_advance_high_watermark()
        return info

    def update_follower(self, broker_id: int, log_end_offset: int) -> None:
        """A follower fetched from `log_end_offset`: it has everything before it."""
        self._follower_leos[broker_id] = log_end_offset
        self._maybe_advance_high_watermark()

    def _maybe_advance_high_watermark(self) -> None:
        followers = [b for b in self.state.isr if b != self.broker_id]
        candidates = [self.log.log_end_offset] + [self._follower_leos.get(b, 0) for b in followers]
        new_hw = min(candidates)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            self._new_data.set()
            self._new_data = asyncio.Event()

    def read(self, offset: int, max_bytes: int, committed_only: bool = True) -> FetchedData:
        """Bytes from `offset`; consumers read below the HW, followers up to the LEO."""
        limit = self.high_watermark if committed_only else self.log.log_end_offset
        found = self.log.read(offset, max_bytes, limit)
        return FetchedData(self.high_watermark, self.high_watermark, self.log.log_start_offset, found)

    def data_arrived(self) -> asyncio.Event:
        """An event set the next time the high watermark moves."""
        return self._new_data

    def __repr__(self) -> str:
        return f"{self.topic}-{self.index}"

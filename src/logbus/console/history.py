"""The console's own time series: lag and throughput over the last `retention_s` seconds.

A Kafka cluster keeps no history of lag, so the console samples it: every `--sample-interval`
seconds the sampler reads each partition's log end offset and each group's committed offsets
and `History.record` keeps, per group, the summed committed offset and the summed lag, and per
topic the summed end offset. Lag is Kafka's (and kafka-exporter's): log end offset minus
committed offset, per partition the group committed. Rates are deltas between two samples over
the time between them; a drop (a reset, a re-created topic) reads as 0, not as a negative rate.
Points older than `retention_s` are dropped at each record, so memory stays bounded.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

TopicPartition = tuple[str, int]
Point = tuple[float, float]  # (seconds since the epoch, value)


@dataclass(frozen=True, slots=True)
class GroupPoint:
    at: float
    committed: int  # sum of the group's committed offsets
    lag: int  # sum of end offset - committed offset over those partitions


def partition_lag(end_offset: int | None, committed: int | None) -> int | None:
    """Kafka's lag of one partition; None when either offset is unknown. Never negative (a committed
    offset beyond the end, after a truncation, is no backlog)."""
    if end_offset is None or committed is None:
        return None
    return max(end_offset - committed, 0)


class History:
    """Bounded per-group and per-topic series, fed by `record` with one sample of the cluster."""

    def __init__(self, retention_s: float, clock: Callable[[], float] = time.time) -> None:
        self.retention_s = retention_s
        self.clock = clock
        self.groups: dict[str, deque[GroupPoint]] = {}
        self.topics: dict[str, deque[Point]] = {}
        self.end_offsets: dict[TopicPartition, int] = {}  # of the latest sample

    def record(self, end_offsets: Mapping[TopicPartition, int],
               committed: Mapping[str, Mapping[TopicPartition, int]]) -> None:
        """One sample: every partition's log end offset, every group's committed offsets."""
        now = self.clock()
        self.end_offsets = dict(end_offsets)
        for topic, total in _sum_by_topic(end_offsets).items():
            self.topics.setdefault(topic, deque()).append((now, float(total)))
        for group, offsets in committed.items():
            self.groups.setdefault(group, deque()).append(
                GroupPoint(now, sum(offsets.values()), self.total_lag(offsets)))
        self._forget_before(now - self.retention_s)

    def total_lag(self, committed: Mapping[TopicPartition, int]) -> int:
        """The lag of committed offsets against the latest sampled end offsets."""
        lags = (partition_lag(self.end_offsets.get(key), offset) for key, offset in committed.items())
        return sum(lag for lag in lags if lag is not None)

    def _forget_before(self, oldest: float) -> None:
        for series_by_name in (self.groups, self.topics):
            for name in list(series_by_name):
                series = series_by_name[name]
                while series and _time_of(series[0]) < oldest:
                    series.popleft()
                if not series:
                    del series_by_name[name]

    def group_lag(self, group: str) -> list[Point]:
        return [(point.at, float(point.lag)) for point in self.groups.get(group, ())]

    def latest_group_lag(self, group: str) -> int | None:
        series = self.groups.get(group)
        return series[-1].lag if series else None

    def group_consumed_rate(self, group: str) -> list[Point]:
        """Records/s the group committed past, between consecutive samples."""
        return rates([(point.at, float(point.committed)) for point in self.groups.get(group, ())])

    def topic_produced_rate(self, topic: str) -> list[Point]:
        """Records/s appended to the topic (all partitions), between consecutive samples."""
        return rates(list(self.topics.get(topic, ())))

    def latest_produced_rate(self, topic: str) -> float | None:
        produced = rates(list(self.topics.get(topic, ()))[-2:])
        return produced[-1][1] if produced else None


def rates(totals: list[Point]) -> list[Point]:
    """Per-second increase of a running total, at the later sample of each pair; drops read as 0."""
    return [(at, max(total - before, 0.0) / (at - then))
            for (then, before), (at, total) in zip(totals, totals[1:], strict=False) if at > then]


def _sum_by_topic(end_offsets: Mapping[TopicPartition, int]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for (topic, _partition), offset in end_offsets.items():
        totals[topic] = totals.get(topic, 0) + offset
    return totals


def _time_of(point: GroupPoint | Point) -> float:
    return point.at if isinstance(point, GroupPoint) else point[0]

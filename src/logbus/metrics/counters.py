"""What the request path counts for metrics: per request or per partition batch, never per record.

Plain integers updated on the event loop and read by the collectors on the same loop (the
endpoint collects there), so no lock is taken on the produce or fetch path.
"""

from __future__ import annotations

from bisect import bisect_left

# Upper bounds (ms) of the request latency histogram buckets; the last bucket is +Inf.
LATENCY_BUCKETS_MS = (1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0,
                      30000.0)


class TopicTraffic:
    """Kafka's BrokerTopicMetrics: records and bytes appended by producers, bytes read by consumers
    (followers' fetches are replication, not counted, as in Kafka), per topic and in total."""

    def __init__(self) -> None:
        self.messages_in: dict[str, int] = {}
        self.bytes_in: dict[str, int] = {}
        self.bytes_out: dict[str, int] = {}
        self.total_messages_in = 0
        self.total_bytes_in = 0
        self.total_bytes_out = 0

    def produced(self, topic: str, records: int, size: int) -> None:
        """A batch of `records` records, `size` bytes, appended to a partition of `topic`."""
        self.messages_in[topic] = self.messages_in.get(topic, 0) + records
        self.bytes_in[topic] = self.bytes_in.get(topic, 0) + size
        self.total_messages_in += records
        self.total_bytes_in += size

    def fetched(self, topic: str, size: int) -> None:
        """`size` bytes of records of a partition of `topic` in a consumer's fetch response."""
        self.bytes_out[topic] = self.bytes_out.get(topic, 0) + size
        self.total_bytes_out += size


class LatencyHistogram:
    """Counts per bucket of LATENCY_BUCKETS_MS (+Inf last) and the sum, in milliseconds."""

    __slots__ = ("counts", "sum_ms")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_MS) + 1)
        self.sum_ms = 0.0

    def observe(self, ms: float) -> None:
        self.counts[bisect_left(LATENCY_BUCKETS_MS, ms)] += 1
        self.sum_ms += ms


class RequestTimes:
    """Kafka's RequestMetrics: per request name (Kafka's API name; a fetch also counts as
    FetchConsumer or FetchFollower), how many were answered and how long each took."""

    def __init__(self) -> None:
        self.by_name: dict[str, LatencyHistogram] = {}

    def record(self, names: tuple[str, ...], ms: float) -> None:
        for name in names:
            histogram = self.by_name.get(name)
            if histogram is None:
                histogram = self.by_name[name] = LatencyHistogram()
            histogram.observe(ms)


class ShareAcknowledgements:
    """Kafka's ShareGroupMetrics RecordAcknowledgementsPerSec: records acknowledged by share group
    members (ShareFetch and ShareAcknowledge), per acknowledge type as Kafka names it; gaps are not
    counted, as in Kafka."""

    NAMES = {1: "Accept", 2: "Release", 3: "Reject", 4: "Renew"}

    def __init__(self) -> None:
        self.by_type = dict.fromkeys(self.NAMES.values(), 0)

    def acknowledged(self, ack_type: int, records: int) -> None:
        name = self.NAMES.get(ack_type)
        if name is not None:
            self.by_type[name] += records


class ShareRequests:
    """BrokerTopicMetrics' share request meters (Total/FailedShareFetchRequestsPerSec,
    Total/FailedShareAcknowledgementRequestsPerSec): each topic of a ShareFetch (its
    acknowledgements counting as an acknowledgement request) or ShareAcknowledge marked once, and
    once more as failed when a partition of it failed, in total and per topic, as Kafka's
    SharePartitionManager marks them."""

    KINDS = ("fetch", "acknowledgement")

    def __init__(self) -> None:
        self.total = {(kind, failed): 0 for kind in self.KINDS for failed in (False, True)}
        self.per_topic: dict[tuple[str, bool], dict[str, int]] = {key: {} for key in self.total}

    def mark(self, kind: str, topics: set[str], failed: set[str]) -> None:
        for key, names in (((kind, False), topics), ((kind, True), failed)):
            counts = self.per_topic[key]
            for topic in names:
                counts[topic] = counts.get(topic, 0) + 1
            self.total[key] += len(names)

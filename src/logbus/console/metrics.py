"""A few values scraped from brokers' Prometheus endpoints (`--metrics-url`), for the brokers page."""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

SCRAPE_TIMEOUT_S = 2.0
MAX_SCRAPE_BYTES = 8 * 1024 * 1024
# family name (as the parser reports it, without _total) -> the column shown
SHOWN = {
    "kafka_server_brokertopicmetrics_messagesin": "messages in",
    "kafka_server_brokertopicmetrics_bytesin": "bytes in",
    "kafka_server_brokertopicmetrics_bytesout": "bytes out",
    "kafka_server_replicamanager_underreplicatedpartitions": "under-replicated partitions",
    "kafka_server_replicamanager_partitioncount": "partitions",
}


@dataclass(frozen=True, slots=True)
class Scrape:
    url: str
    values: dict[str, float]  # column -> value summed over the family's samples
    error: str | None = None


def scrape(url: str) -> Scrape:
    try:
        with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:  # noqa: S310 - operator's URL
            text = response.read(MAX_SCRAPE_BYTES).decode("utf-8", errors="replace")
        return Scrape(url, summed(text))
    except (OSError, ValueError) as exc:
        return Scrape(url, {}, str(exc))


def summed(text: str) -> dict[str, float]:
    """Each SHOWN family's broker-wide value: its samples without a `topic` label (a per-topic family
    also carries the all-topics series, as the JMX exporter exports BrokerTopicMetrics)."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        column = SHOWN.get(family.name)
        if column is None:
            continue
        wanted = (family.name, family.name + "_total")
        values[column] = sum(sample.value for sample in family.samples
                             if sample.name in wanted and "topic" not in sample.labels)
    return values

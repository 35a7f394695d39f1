"""Kafka-protocol load with librdkafka's `rdkafka_performance` (C): produce, consume a partition, group consume.

The same binary and the same librdkafka settings drive logbus, Tansu and noida-db. Its stdout is line
buffered through `stdbuf` so a run cut off by its deadline still shows how far it got.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import time

from confluent_kafka.admin import AdminClient, NewTopic

from bench.suite.rates import transfer_seconds

PRODUCER_CONFIG = {"linger.ms": "5", "batch.size": "1000000", "queue.buffering.max.messages": "1000000",
                   "queue.buffering.max.kbytes": "1048576", "compression.codec": "none"}
# receive.message.max.bytes at its maximum: noida-db 0.2.3 ignores the fetch size limits and answers with
# the whole backlog in one response (129 MB for 128k records of 1 KB), which librdkafka's 100 MB default rejects.
CONSUMER_CONFIG = {"fetch.max.bytes": "52428800", "max.partition.fetch.bytes": "10485760",
                   "queued.max.messages.kbytes": "1048576", "receive.message.max.bytes": "2147483647"}
JOIN_GROUP_API_KEY = 11


class LoadError(RuntimeError):
    """The load generator did not finish its records in time or reported errors."""


def create_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 20.0) -> None:
    """Create `topic` and wait until metadata shows a leader for every partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=timeout_s)[topic].result(timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=5).topics.get(topic)
        if meta and meta.error is None and len(meta.partitions) == partitions and all(
                p.leader >= 0 for p in meta.partitions.values()):
            return
        time.sleep(0.1)
    raise LoadError(f"topic {topic} has no leaders after {timeout_s} s")


def supported_api_keys(bootstrap: str, timeout_s: float = 5.0) -> set[int]:
    """API keys the broker advertises, from a raw ApiVersions v0 request (no client library hides it)."""
    host, port = bootstrap.split(":")
    client_id = b"bench-probe"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _read_exactly(sock, 4))[0]
        reply = _read_exactly(sock, size)
    error, count = struct.unpack_from(">hi", reply, 4)
    if error:
        return set()
    return {struct.unpack_from(">h", reply, 10 + 6 * index)[0] for index in range(count)}


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise ConnectionError("broker closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _settings(config: dict[str, str]) -> list[str]:
    return [arg for key, value in config.items() for arg in ("-X", f"{key}={value}")]


def _last_row(output: str) -> dict[str, float]:
    """The final stats row of rdkafka_performance's `-u` table, keyed by its header names."""
    header: list[str] = []
    row: dict[str, float] = {}
    for line in output.splitlines():
        if not line.startswith("|"):
            continue
        cells = [cell.strip() for cell in line.strip("| \n").split("|")]
        if cells and cells[0] == "elapsed":
            header = cells
        elif header and len(cells) == len(header):
            row = dict(zip(header, (float(cell) for cell in cells), strict=True))
    return row


def _run(tool: str, args: list[str], timeout_s: float) -> tuple[str, float]:
    started = time.perf_counter()
    try:
        done = subprocess.run(["stdbuf", "-oL", tool, *args, "-u"], capture_output=True, text=True,
                              timeout=timeout_s)
        output = done.stdout
    except subprocess.TimeoutExpired as expired:
        raise LoadError(f"rdkafka_performance did not finish in {timeout_s:.0f} s; last: "
                        f"{_last_row(_text(expired.stdout))}") from expired
    return output, time.perf_counter() - started


def _text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def produce(tool: str, bootstrap: str, topic: str, size: int, count: int, acks: str,
            timeout_s: float) -> dict[str, float]:
    """Produce `count` records of `size` bytes (random partitioner); rate from the delivery reports."""
    args = ["-P", "-t", topic, "-b", bootstrap, "-s", str(size), "-c", str(count), "-a",
            "-1" if acks == "all" else acks, *_settings(PRODUCER_CONFIG)]
    output, wall = _run(tool, args, timeout_s)
    row = _last_row(output)
    if row.get("dr", 0) < count or row.get("dr_err", 0):
        raise LoadError(f"produce: {row or output[-500:]}")
    seconds = row["elapsed"] / 1000
    return {"records_s": count / seconds, "mb_s": count * size / seconds / 1e6, "seconds": seconds, "records": count}


def consume(tool: str, bootstrap: str, topic: str, count: int, size: int, timeout_s: float,
            group: str | None = None, startup_s: float | None = None) -> dict[str, float]:
    """Read `count` records from the start of partition 0, or of the whole topic as member of `group`.

    rdkafka_performance's own clock starts at the first record *received*: a server that answers the
    first fetch with the whole backlog gets its transfer for free. With `startup_s` (see
    `startup_seconds`) the rate is over the process' wall time less that start-up instead, but never
    over less than the first-record clock (`rates.transfer_seconds`).
    """
    where = ["-G", group, "-X", "auto.offset.reset=earliest"] if group else ["-p", "0", "-o", "beginning"]
    args = ["-C", "-t", topic, "-b", bootstrap, "-c", str(count), *where, *_settings(CONSUMER_CONFIG)]
    output, wall = _run(tool, args, timeout_s)
    row = _last_row(output)
    if row.get("msgs", 0) < count:
        raise LoadError(f"consume: {row or output[-500:]}")
    first_record_s = row["elapsed"] / 1000 if row.get("elapsed") else wall
    seconds = transfer_seconds(wall, startup_s, first_record_s)
    return {"records_s": count / seconds, "mb_s": count * size / seconds / 1e6, "seconds": seconds, "records": count,
            "first_record_records_s": count / first_record_s}


def startup_seconds(tool: str, bootstrap: str, timeout_s: float, runs: int = 3) -> float:
    """Median wall time of reading one record from a one-record topic: process start, metadata, the
    client's own offset and fetch start-up, one small fetch, exit. Subtracted from backlog reads."""
    create_topic(bootstrap, "startup-probe", 1)
    produce(tool, bootstrap, "startup-probe", 100, 1, "1", timeout_s)
    walls = []
    for _ in range(runs):
        args = ["-C", "-t", "startup-probe", "-b", bootstrap, "-c", "1", "-p", "0", "-o", "beginning",
                *_settings(CONSUMER_CONFIG)]
        walls.append(_run(tool, args, timeout_s)[1])
    return sorted(walls)[len(walls) // 2]

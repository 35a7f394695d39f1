"""The broker's ZooKeeper view reading new topics (cluster/zk_view.py), against a real ZooKeeper."""

from __future__ import annotations

import re
import threading
import uuid

from helpers import wait_until
from kazoo.client import KazooClient

from logbus.cluster.metadata import PartitionState, TopicMetadata
from logbus.cluster.zk_view import ClusterView
from logbus.cluster.zk_writes import prepare_layout, write_new_topic
from logbus.cluster.zookeeper_server import four_letter_word
from logbus.testing import running_zookeeper


def requests_received(port: int) -> int:
    """Packets ZooKeeper has received from its clients so far (its `srvr` counter)."""
    return int(re.search(r"Received: (\d+)", four_letter_word(port, "srvr")).group(1))


def test_new_topics_enter_the_view_with_their_states_read_together() -> None:
    """Each new topic cost every broker five ZooKeeper round trips in a row on kazoo's one
    callback thread (issue 25: topics of a 10,000-partition CreateTopics entered the view at ~2
    a second): now its two watches' reads, and one multiRead of the states of all topics that
    arrived together. The topics, their states and configs are read as written."""
    topics = 30
    with running_zookeeper() as zookeeper:
        writer = KazooClient(zookeeper.connect_string)
        reader = KazooClient(zookeeper.connect_string)
        writer.start()
        reader.start()
        try:
            prepare_layout(writer)
            for t in range(topics):
                states = [PartitionState(1 + p % 3, 0, [1 + p % 3, 1 + (p + 1) % 3], [1 + p % 3], 0)
                          for p in range(4)]
                write_new_topic(writer, f"t{t}", str(uuid.uuid4()), states, {"retention.ms": str(1000 + t)})
            seen: dict[str, TopicMetadata | None] = {}
            lock = threading.Lock()

            def announce(name: str, metadata: TopicMetadata | None) -> None:
                with lock:
                    seen[name] = metadata

            view = ClusterView(reader, lambda callback, *args: callback(*args), lambda: None, announce,
                               lambda: None, lambda: None, lambda _offline: None)
            before = requests_received(zookeeper.port)
            view.watch()
            wait_until(lambda: len(seen) == topics, timeout=60, message="topics in the view")
            received = requests_received(zookeeper.port) - before
            with lock:
                t7 = seen["t7"]
            assert t7 is not None and t7.configs == {"retention.ms": "1007"}
            assert [(p.leader, p.replicas, p.isr) for p in t7.partitions] == [
                (1, [1, 2], [1]), (2, [2, 3], [2]), (3, [3, 1], [3]), (1, [1, 2], [1])]
            assert received < 3 * topics, f"{received} requests for {topics} new topics"
        finally:
            reader.stop()
            writer.stop()

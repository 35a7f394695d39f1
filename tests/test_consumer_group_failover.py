"""KIP-848 consumer groups survive their coordinator: a broker restarted (SIGTERM, then SIGKILL)
and, in a 3-broker cluster, the coordinator's broker killed. The group's state lives in
`__consumer_offsets` (coordinator/consumer_persistence.py), so the members' next heartbeats
continue at their epochs: no rejoin, no partition revoked or assigned again, committed offsets
kept, every record consumed once. Real brokers, confluent-kafka with `group.protocol=consumer`."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import QUIET, produce_all, raw_request, wait_until

from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.testing import Cluster, running_broker, running_cluster

DESCRIBE = 69
# fast heartbeats (a reconciliation takes a fraction of a second), one __consumer_offsets partition
CONFIG = {"group.consumer.min.heartbeat.interval.ms": "100", "group.consumer.heartbeat.interval.ms": "300",
          "offsets.topic.num.partitions": "1"}
DEADLINE_S = 60  # a broker restart or a failover (ZooKeeper session 6 s) on a loaded machine, with room


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """Idempotently (on a loaded machine a request may time out and be retried: no record twice)."""
    produce_all(bootstrap, topic, [(None, value) for value in values], **{"enable.idempotence": True})


class Member:
    """A consumer of the group that counts what its rebalance callbacks hand over and take away.
    It commits its positions on the partitions taken from it, as a member that hands a partition
    over does, so that the next owner goes on from there: without that, a partition that moves
    while the group forms is read again from its start. Every member of a group appends to one
    list of `values`, a member that left included."""

    def __init__(self, bootstrap: str, group: str, topic: str, values: list[bytes]) -> None:
        self.owned: set[int] = set()
        self.assigned = self.revoked = 0  # partitions, over all callbacks
        self.values = values
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False, **QUIET})
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_lost)

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assigned += len(partitions)
        self.owned |= {tp.partition for tp in partitions}

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        positions = [tp for tp in consumer.position(partitions) if tp.offset >= 0]
        if positions:
            consumer.commit(offsets=positions, asynchronous=False)
        self._on_lost(consumer, partitions)

    def _on_lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.revoked += len(partitions)
        self.owned -= {tp.partition for tp in partitions}

    def poll(self) -> None:
        message = self.consumer.poll(0.02)
        if message is not None and message.error() is None:
            self.values.append(message.value())

    def committed(self) -> dict[int, int] | None:
        """Its partitions' committed offsets (None while the coordinator does not answer)."""
        try:
            found = self.consumer.committed([TopicPartition(t.topic, t.partition) for t in self.consumer.assignment()],
                                            timeout=5)
        except KafkaException:
            return None
        return {tp.partition: tp.offset for tp in found}

    def commit(self) -> bool:
        """Commit its positions (with its member epoch); False when the coordinator refuses now."""
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as exc:
            return exc.args[0].code() == KafkaError._NO_OFFSET  # nothing new to commit
        return True

    @property
    def callbacks(self) -> tuple[frozenset[int], int, int]:
        return frozenset(self.owned), self.assigned, self.revoked


def poll_until(members: list[Member], condition: Callable[[], bool], message: str) -> None:
    def polled() -> bool:
        for member in members:
            member.poll()
        return condition()
    wait_until(polled, DEADLINE_S, interval=0, message=message)


def balanced(members: list[Member], partitions: int) -> Callable[[], bool]:
    def check() -> bool:
        owners = [p for m in members for p in m.owned]
        return len(owners) == len(set(owners)) == partitions and all(m.owned for m in members)
    return check


def consumed(members: list[Member], values: list[bytes]) -> Callable[[], bool]:
    return lambda: len(members[0].values) >= len(values)


def described(bootstrap: str, group: str) -> tuple[int, dict[str, int]] | None:
    """The group's epoch and its members' epochs, as its coordinator describes it (None: not now)."""
    try:
        reply = raw_request(bootstrap, DESCRIBE, 1, group_ids=(group,), include_authorized_operations=False)
    except (OSError, AssertionError):
        return None
    (found,) = reply.groups
    if found.error_code != 0:
        return None
    return found.group_epoch, {m.member_id: m.member_epoch for m in found.members}


def start_group(bootstrap: str, group: str, topic: str, partitions: int, members: int) -> list[Member]:
    """`members` consumers, one more that joined and left (so that the group epoch is not what a
    fresh group of `members` would reach), balanced and with everything produced so far consumed."""
    values: list[bytes] = []
    fleet = [Member(bootstrap, group, topic, values) for _ in range(members + 1)]
    poll_until(fleet, balanced(fleet, partitions), "every member assigned")
    fleet.pop().consumer.close()
    poll_until(fleet, balanced(fleet, partitions), "the group balanced again")
    return fleet


def settled(members: list[Member], bootstrap: str, group: str) -> tuple[object, ...]:
    """The members commit their positions; what must survive the coordinator: the group's and the
    members' epochs, the members' ids and partitions (and callback counts), the committed offsets."""
    poll_until(members, lambda: all(m.commit() for m in members), "the positions committed")
    committed = wait_until(lambda: all_committed(members), DEADLINE_S, message="the committed offsets")
    state = wait_until(lambda: described(bootstrap, group), DEADLINE_S, message="the group described")
    return state, [m.callbacks for m in members], [m.consumer.memberid() for m in members], committed


def all_committed(members: list[Member]) -> dict[int, int] | None:
    found: dict[int, int] = {}
    for member in members:
        offsets = member.committed()
        if offsets is None:
            return None
        found.update(offsets)
    return found


def resumed(members: list[Member], bootstrap: Callable[[], str], group: str, topic: str, produced: list[bytes],
            before: tuple[object, ...], batch: str) -> None:
    """After the coordinator came back (or moved): the committed offsets are there; the members
    consume what is produced now and commit it at their epochs; nothing of what must survive
    changed (no rejoin, no callback); every record consumed once."""
    state, callbacks, member_ids, committed = before
    assert wait_until(lambda: all_committed(members), DEADLINE_S, message="the committed offsets") == committed
    new = [f"{batch}-{i}".encode() for i in range(30)]
    produce(bootstrap(), topic, new)
    produced += new
    poll_until(members, consumed(members, produced), f"the records produced {batch}")
    poll_until(members, lambda: all(m.commit() for m in members), "commits at the members' epochs")
    assert described(bootstrap(), group) == state
    assert [m.callbacks for m in members] == callbacks
    assert [m.consumer.memberid() for m in members] == member_ids
    assert sorted(members[0].values) == sorted(produced)  # none lost, none twice


# ---------------------------------------------------------------- tests


def test_a_restarted_broker_resumes_its_consumer_group_without_a_rebalance() -> None:
    with running_broker(config=CONFIG) as broker:
        topic, group, partitions = unique("topic"), unique("group"), 6
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
        produced = [f"first-{i}".encode() for i in range(60)]
        produce(broker.bootstrap, topic, produced)
        members = start_group(broker.bootstrap, group, topic, partitions, 3)
        try:
            poll_until(members, consumed(members, produced), "the first records")
            for stop in (broker.stop, broker.kill):  # SIGTERM, then SIGKILL
                before = settled(members, broker.bootstrap, group)
                stop()
                broker.restart()
                resumed(members, lambda: broker.bootstrap, group, topic, produced, before, stop.__name__)
        finally:
            for member in members:
                member.consumer.close()


def test_a_consumer_group_resumes_on_the_new_coordinator_when_its_broker_dies(zookeeper: ZooKeeperServer) -> None:
    with running_cluster(3, config=CONFIG, zookeeper=zookeeper) as cluster:
        topic, group, partitions = unique("topic"), unique("group"), 4
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
        admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(60)
        cluster.wait_ready([topic])
        produced = [f"first-{i}".encode() for i in range(40)]
        produce(cluster.bootstrap, topic, produced)
        members = start_group(cluster.bootstrap, group, topic, partitions, 2)
        try:
            poll_until(members, consumed(members, produced), "the first records")
            coordinator = wait_until(lambda: coordinator_of(cluster, group), DEADLINE_S, message="the coordinator")
            before = settled(members, cluster.brokers[coordinator].bootstrap, group)
            wait_until(lambda: in_sync(cluster, [topic, "__consumer_offsets"]), DEADLINE_S,
                       message="every replica in sync")  # so that another broker may take over
            cluster.brokers[coordinator].kill()
            cluster.wait_ready([topic], timeout=DEADLINE_S)  # its partitions led by the others
            successor = wait_until(lambda: coordinator_of(cluster, group) not in (None, coordinator) and
                                   coordinator_of(cluster, group), DEADLINE_S, message="a new coordinator")
            resumed(members, lambda: cluster.brokers[successor].bootstrap, group, topic, produced, before, "failover")
        finally:
            for member in members:
                member.consumer.close()


def coordinator_of(cluster: Cluster, group: str) -> int | None:
    """The group's coordinator as a live broker answers FindCoordinator (None: none now)."""
    for broker in (b for b in cluster.brokers.values() if b.running):
        try:
            answer = raw_request(broker.bootstrap, 10, 3, key=group, key_type=0)
        except (OSError, AssertionError):
            continue
        found = cluster.brokers.get(answer.node_id)
        if answer.error_code == 0 and found is not None and found.running:
            return answer.node_id
    return None


def in_sync(cluster: Cluster, topics: list[str]) -> bool:
    """Is every replica of `topics` in sync, as the live brokers' Metadata shows?"""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
    try:
        found = admin.list_topics(timeout=5).topics
        partitions = [p for topic in topics for p in found[topic].partitions.values()]
    except Exception:  # noqa: BLE001 - a broker going away mid-request: ask again
        return False
    return all(len(p.isrs) == len(p.replicas) == 3 for p in partitions)

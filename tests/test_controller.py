"""The controller's decisions, in process (no broker): which partition states a pass writes,
and how its writes are cut into ZooKeeper multi-ops (issue 25)."""

from __future__ import annotations

import asyncio
import json
import uuid

from kazoo.client import KazooClient

from logbus.cluster.controller import claim_controller, leaders_first, partition_changes
from logbus.cluster.metadata import PartitionState, TopicMetadata
from logbus.cluster.zk_data import STATE_CHANGES, decode_state_changes, encode_state, encode_state_changes, state_path
from logbus.cluster.zk_writes import MULTI_OP_BYTES, commit_state_batches, multi_op_batches
from logbus.cluster.zookeeper import ZooKeeperMetadataStore


def _topic(name: str, states: list[PartitionState]) -> TopicMetadata:
    return TopicMetadata(name, "00000000-0000-0000-0000-000000000001", states, {})


def _never_unclean(_topic: TopicMetadata) -> bool:
    return False


def _three_way(count: int) -> list[PartitionState]:
    """`count` partitions on brokers 1-3, leaders round robin, every ISR full."""
    states = []
    for index in range(count):
        replicas = [1 + (index + k) % 3 for k in range(3)]
        states.append(PartitionState(replicas[0], 0, replicas, list(replicas), partition_epoch=0))
    return states


def test_a_controlled_shutdown_moves_every_leadership_and_leaves_every_isr() -> None:
    topics = {"t": _topic("t", _three_way(30))}
    changes = partition_changes(topics, None, live={1, 2, 3}, serving={1, 3}, offline={}, unclean=_never_unclean)
    assert len(changes) == 30  # every partition has broker 2 as leader or follower
    for _name, _index, old, new in changes:
        assert new.leader != 2 and new.leader in old.isr
        assert 2 not in new.isr
        assert new.leader_epoch == old.leader_epoch + (old.leader == 2)


def test_a_dead_broker_changes_only_its_partitions() -> None:
    states = _three_way(9) + [PartitionState(1, 0, [1, 3], [1, 3])]
    topics = {"t": _topic("t", states)}
    changes = partition_changes(topics, None, live={1, 3}, serving={1, 3}, offline={}, unclean=_never_unclean)
    assert [index for _name, index, _old, _new in changes] == list(range(9))  # not the one without broker 2


def test_a_pass_over_some_topics_looks_at_those_only() -> None:
    topics = {"a": _topic("a", _three_way(3)), "b": _topic("b", _three_way(3))}
    changes = partition_changes(topics, {"b", "gone"}, live={1, 3}, serving={1, 3}, offline={},
                                unclean=_never_unclean)
    assert {name for name, *_ in changes} == {"b"}


def test_an_offline_replica_is_treated_as_on_a_dead_broker() -> None:
    topics = {"t": _topic("t", [PartitionState(1, 4, [1, 2, 3], [1, 2, 3])])}
    changes = partition_changes(topics, None, live={1, 2, 3}, serving={1, 2, 3},
                                offline={1: frozenset({("t", 0)})}, unclean=_never_unclean)
    [(_name, _index, _old, new)] = changes
    assert (new.leader, new.leader_epoch, new.isr) == (2, 5, [2, 3])


def test_new_leaders_are_written_apart_from_and_before_isr_only_changes() -> None:
    """A dead broker's leaderships go in multi-ops of their own: no surviving leader races them,
    while the ISR-only changes (it out of the ISRs it followed) race the leaders' own shrinks."""
    topics = {"t": _topic("t", _three_way(9))}
    changes = partition_changes(topics, None, live={1, 3}, serving={1, 3}, offline={}, unclean=_never_unclean)
    elections, isr_only = leaders_first(changes)
    assert [index for _n, index, _o, _s in elections] == [1, 4, 7]  # those broker 2 led
    assert all(new.leader in (1, 3) and 2 not in new.isr for *_k, new in elections)
    assert [index for _n, index, _o, _s in isr_only] == [0, 2, 3, 5, 6, 8]
    assert all(new.leader == old.leader and 2 not in new.isr for _n, _i, old, new in isr_only)


def test_writes_are_cut_into_multi_ops_within_the_size_bound() -> None:
    writes = [("t", i, PartitionState(1, 7, [1, 2, 3], [1, 2, 3]), 4) for i in range(10_000)]
    batches = multi_op_batches(writes, epoch=3)
    assert len(batches) > 1
    assert [position for batch in batches for position, _ in batch] == list(range(10_000))
    for batch in batches:
        states = [write for _, write in batch]
        size = sum(len(state_path(t, i)) + len(encode_state(s, 3)) for t, i, s, _ in states)
        entries = [(t, i, s.leader, s.leader_epoch, s.isr, v + 1) for t, i, s, v in states]
        assert size + len(encode_state_changes(entries)) <= MULTI_OP_BYTES


def test_a_batch_writes_the_others_when_one_state_moved_on_and_nothing_when_fenced(zk_client: KazooClient) -> None:
    zk_client.create("/controller_epoch", b"1")
    zk_client.ensure_path(STATE_CHANGES)
    for index in range(4):
        zk_client.create(state_path("t", index), b"old", makepath=True)
    for moved in (1, 2):
        zk_client.set(state_path("t", moved), b"moved on")  # version 1 now
    new = PartitionState(2, 1, [1, 2], [2])
    batch = list(enumerate(("t", index, new, 0) for index in range(4)))
    assert commit_state_batches(zk_client, [batch], 1, epoch_version=0) == [0, 3]
    assert [zk_client.get(state_path("t", i))[0] for i in range(4)] == [
        encode_state(new, 1), b"moved on", b"moved on", encode_state(new, 1)]
    [change] = zk_client.get_children(STATE_CHANGES)
    assert decode_state_changes(zk_client.get(f"{STATE_CHANGES}/{change}")[0]) == [
        ("t", 0, 2, 1, [2], 1), ("t", 3, 2, 1, [2], 1)]
    zk_client.set("/controller_epoch", b"2")  # a successor
    assert commit_state_batches(zk_client, [[(0, ("t", 0, new, 1))]], 1, epoch_version=0) == []
    assert zk_client.get(state_path("t", 0))[1].version == 1
    assert len(zk_client.get_children(STATE_CHANGES)) == 1


def test_a_claim_creates_the_controller_and_bumps_the_epoch_in_one_transaction(zk_client: KazooClient) -> None:
    assert claim_controller(zk_client, 1) == (1, 1)  # /controller_epoch created at 0, bumped
    assert claim_controller(zk_client, 2) is None  # broker 1 is the controller
    assert zk_client.get("/controller_epoch")[0] == b"1"
    zk_client.delete("/controller")
    assert claim_controller(zk_client, 2) == (2, 2)
    assert json.loads(zk_client.get("/controller")[0])["brokerid"] == 2


def test_a_leaders_batch_of_isr_changes_is_one_state_change_and_a_moved_partition_fails_alone(
        zk_client: KazooClient) -> None:
    """A leader's ISR changes (unfenced): one multi-op and one state change for the batch, not one
    per partition (a broker's death made 1,300 that every broker read)."""
    zk_client.ensure_path(STATE_CHANGES)
    for index in range(5):
        zk_client.create(state_path("t", index), b"old", makepath=True)
    zk_client.set(state_path("t", 3), b"the controller's")  # version 1 now
    shrunk = PartitionState(1, 0, [1, 2, 3], [1, 3])
    batch = list(enumerate(("t", index, shrunk, 0) for index in range(5)))
    assert commit_state_batches(zk_client, [batch], 0, epoch_version=None) == [0, 1, 2, 4]
    assert zk_client.get(state_path("t", 3))[0] == b"the controller's"
    [change] = zk_client.get_children(STATE_CHANGES)
    entries = decode_state_changes(zk_client.get(f"{STATE_CHANGES}/{change}")[0])
    assert [index for _t, index, *_rest in entries] == [0, 1, 2, 4]


def test_pipelined_batches_each_write_their_current_states_and_one_state_change(zk_client: KazooClient) -> None:
    """Multi-ops sent before any answer is awaited: a moved partition fails alone in its own
    batch, the batches after it are written all the same, in order."""
    zk_client.ensure_path(STATE_CHANGES)
    for index in range(6):
        zk_client.create(state_path("t", index), b"old", makepath=True)
    for moved in (1, 4):
        zk_client.set(state_path("t", moved), b"the controller's")  # version 1 now
    grown = PartitionState(1, 0, [1, 2, 3], [1, 2, 3])
    writes = [("t", index, grown, 0) for index in range(6)]
    batches = [list(enumerate(writes))[:3], list(enumerate(writes))[3:]]
    assert commit_state_batches(zk_client, batches, 0, epoch_version=None) == [0, 2, 3, 5]
    assert [zk_client.get(state_path("t", i))[0] == encode_state(grown, 0) for i in range(6)] == [
        True, False, True, True, False, True]
    changes = sorted(zk_client.get_children(STATE_CHANGES))
    assert [[index for _t, index, *_rest in decode_state_changes(zk_client.get(f"{STATE_CHANGES}/{c}")[0])]
            for c in changes] == [[0, 2], [3, 5]]


def test_a_controllers_written_states_are_in_its_view_when_the_write_returns(zookeeper) -> None:  # noqa: ANN001
    """Write, then apply: a pass started by the first writes' own announcements must not decide
    again from states the controller has just replaced (it wrote every ISR change of a SIGTERM a
    second time, each failing on its znode version)."""
    connect = f"{zookeeper.connect_string}/controller-view-{uuid.uuid4().hex}"

    async def scenario() -> list[tuple[str, int, PartitionState, PartitionState]]:
        store = ZooKeeperMetadataStore(connect, 1, 10000)
        await store.start()
        try:
            topic = await store.create_topic("t", 6, 3, {}, assignments=[s.replicas for s in _three_way(6)])
            epoch, epoch_version = await asyncio.to_thread(claim_controller, store.client, 1)
            live, serving = {1, 2, 3}, {1, 3}  # broker 2 is shutting down
            changes = partition_changes({"t": topic}, None, live, serving, {}, _never_unclean)
            assert len(changes) == 6
            written = await store.write_states_as_controller(
                [(name, index, new, old.partition_epoch) for name, index, old, new in changes], epoch, epoch_version)
            assert all(written)
            return partition_changes(store.topics(), None, live, serving, {}, _never_unclean)
        finally:
            await store.close()

    assert asyncio.run(scenario()) == [], "nothing left to decide"

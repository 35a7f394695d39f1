"""Incremental fetch sessions (KIP-227): the cache's rules in process, then on a real broker.

The broker side is exercised with hand-built Fetch v12 requests (a session opened, fetched
incrementally, forgotten partitions, the error codes Kafka answers), the follower side by the
replication it carries in the cluster tests, and by kafka-python, which fetches with sessions.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from helpers import FETCH, QUIET, RawConnection, produce_all
from kafka import KafkaConsumer, TopicPartition
from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType
from test_replica_manager import FOLLOWER, LEADER, batches, create, replica_manager

from logbus.broker.apis.fetch import _read_all, _Reader, _resolved, _unseen_moves
from logbus.broker.fetch_sessions import EVICTION_IDLE_S, CachedPartition, FetchSessionCache, SessionError
from logbus.cluster import fetcher as fetcher_module
from logbus.cluster.delayed_fetch import ChangeWatch
from logbus.cluster.fetcher import SWEEP_S, FetcherConfig, FetcherSession, ReplicaFetcher
from logbus.protocol import codec
from logbus.security.listeners import ListenerEndpoint
from logbus.testing import BrokerProcess, running_broker

FETCH_V12 = load_payload_module(FETCH, 12, EntityType.request)
TOPIC = "sessions"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fetch_partition(index: int, offset: int = 0) -> Any:
    return FETCH_V12.FetchPartition(partition=index, current_leader_epoch=-1, fetch_offset=offset,
                                    last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)


def entries(topic: str, *indexes: int) -> list[tuple[Any, Any, list[Any]]]:
    partitions = [fetch_partition(i) for i in indexes]
    return [(FETCH_V12.FetchTopic(topic=topic, partitions=tuple(partitions)), topic, partitions)]


# ---------------------------------------------------------------------- the cache, in process


def test_a_session_continues_only_at_its_next_epoch_with_the_same_kind_of_topic_names() -> None:
    cache = FetchSessionCache(10, Clock())
    session = cache.maybe_create(False, False, entries("t", 0, 1))
    assert session is not None and session.epoch == 1 and len(session.partitions) == 2
    for session_id, epoch, ids, code in ((session.id + 1, 1, False, ErrorCode.fetch_session_id_not_found),
                                         (session.id, 2, False, ErrorCode.invalid_fetch_session_epoch),
                                         (session.id, 1, True, ErrorCode.fetch_session_topic_id_error)):
        with pytest.raises(SessionError) as refused:
            cache.incremental(session_id, epoch, ids, [], [])
        assert refused.value.code == code
    assert cache.incremental(session.id, 1, False, entries("t", 2), [("t", 0)]) is session
    assert sorted(session.partitions) == [("t", 1), ("t", 2)] and session.epoch == 2
    cache.remove(session.id)
    with pytest.raises(SessionError):
        cache.incremental(session.id, 2, False, [], [])


def test_a_full_cache_evicts_only_an_idle_session_or_for_a_follower_a_consumers() -> None:
    clock = Clock()
    cache = FetchSessionCache(2, clock)
    consumer = cache.maybe_create(False, False, entries("t", 0))
    follower = cache.maybe_create(True, False, entries("t", 1))
    assert consumer is not None and follower is not None
    assert cache.maybe_create(False, False, entries("t", 2)) is None, "nothing idle: no session"
    newer_follower = cache.maybe_create(True, False, entries("t", 3))
    assert newer_follower is not None and cache.get(consumer.id) is None, "a follower displaces a consumer"
    assert cache.maybe_create(True, False, entries("t", 4)) is None, "followers never displace followers"
    clock.now += EVICTION_IDLE_S
    cache.incremental(newer_follower.id, 1, False, [], [])  # used just now: the other one is the idle one
    assert cache.maybe_create(False, False, entries("t", 5)) is not None
    assert cache.get(follower.id) is None and cache.get(newer_follower.id) is not None


def test_sessions_together_hold_a_bounded_number_of_partitions() -> None:
    cache = FetchSessionCache(10, Clock(), max_partitions=5)
    assert cache.maybe_create(False, False, entries("t", *range(6))) is None
    session = cache.maybe_create(False, False, entries("t", *range(4)))
    assert session is not None
    with pytest.raises(SessionError) as ended:
        cache.incremental(session.id, 1, False, entries("t", 4, 5), [])
    assert ended.value.code == ErrorCode.fetch_session_id_not_found
    assert cache.get(session.id) is None and cache.cached_partitions() == 0


def test_an_incremental_answer_names_a_partition_only_when_it_has_news() -> None:
    response = load_payload_module(FETCH, 12, EntityType.response)

    def answer(hw: int, error: ErrorCode = ErrorCode.none) -> Any:
        return codec.make(response.PartitionData, partition_index=0, error_code=error, high_watermark=hw,
                          last_stable_offset=hw, log_start_offset=0, aborted_transactions=None,
                          preferred_read_replica=-1, records=b"")

    cached = CachedPartition(fetch_partition(0))
    assert cached.tell(answer(5), 0), "first told"
    assert not cached.tell(answer(5), 0), "nothing new"
    assert cached.tell(answer(5), 100), "records"
    assert cached.tell(answer(6), 0), "the high watermark moved"
    assert cached.tell(answer(6, ErrorCode.not_leader_or_follower), 0), "an error"


def test_a_session_hands_out_only_the_partitions_asked_for_that_it_holds() -> None:
    cache = FetchSessionCache(4, lambda: 0.0)
    session = cache.maybe_create(True, False, [*entries("a", 0, 1, 2), *entries("b", 0)])
    assert session is not None
    wanted = session.wanted({("b", 0), ("a", 2), ("a", 0), ("c", 9)})
    assert [(key, [p.partition for p in partitions]) for _, key, partitions in wanted] == [("a", [0, 2]), ("b", [0])]
    assert sum(len(partitions) for _, _, partitions in session.wanted()) == 4


def test_a_follower_names_only_moved_partitions_and_starts_over_after_a_session_error() -> None:
    session = FetcherSession()
    positions = {("t", 0): (10, 0, 0, 0), ("t", 1): (5, 0, 0, 0)}
    assert session.plan(positions) == ({("t", 0), ("t", 1)}, []), "no session yet: a full fetch"
    assert session.answered(ErrorCode.none, 77) and (session.id, session.epoch) == (77, 1)
    assert session.plan({("t", 0): (12, 0, 0, 0), ("t", 1): (5, 0, 0, 0)}) == ({("t", 0)}, [])
    assert session.answered(ErrorCode.none, 77) and session.epoch == 2
    assert session.plan({("t", 0): (12, 0, 0, 0)}) == (set(), [("t", 1)])
    assert not session.answered(ErrorCode.invalid_fetch_session_epoch, 0)
    assert (session.id, session.epoch) == (0, 0)
    assert session.plan({("t", 0): (12, 0, 0, 0)}) == ({("t", 0)}, [])
    assert session.answered(ErrorCode.none, 0) and session.epoch == 0, "the leader declined: full fetches go on"



def test_a_follower_names_again_a_partition_answered_with_an_error() -> None:
    """A follower whose log was created before its leader's is answered NOT_LEADER_OR_FOLLOWER;
    its next fetch names the partition again (its position did not move), else the leader, which
    reads a follower's quiet partitions only at its sweep, would not see it for seconds."""
    session = FetcherSession()
    def positions() -> dict[tuple[str, int], tuple[int, ...]]:  # the fetcher builds them anew for each fetch
        return {("t", 0): (0, 0, -1, 0), ("t", 1): (0, 0, -1, 0)}

    session.plan(positions())
    assert session.answered(ErrorCode.none, 77)
    session.resend(("t", 1))
    assert session.plan(positions()) == ({("t", 1)}, [])
    assert session.answered(ErrorCode.none, 77)
    assert session.plan(positions()) == (set(), []), "named once: quiet again after"


def test_a_session_forgets_a_topic_with_its_last_partition() -> None:
    cache = FetchSessionCache(4, lambda: 0.0)
    session = cache.maybe_create(True, False, [*entries("a", 0, 1), *entries("b", 0)])
    assert session is not None
    cache.incremental(session.id, 1, False, [], [("a", 0), ("b", 0), ("b", 7)])
    assert list(session.topics) == ["a"] and list(session.partitions) == [("a", 1)]
    cache.incremental(session.id, 2, False, entries("b", 3), [("a", 1)])
    assert list(session.topics) == ["b"] and [p for _, _, ps in session.wanted() for p in ps][0].partition == 3


def test_a_follower_plans_an_incremental_fetch_from_the_changed_partitions_only() -> None:
    session = FetcherSession()
    session.plan({("t", 0): (10, 0, 0, 0), ("t", 1): (5, 0, 0, 0), ("t", 2): (0, 0, 0, 0)})
    assert session.answered(ErrorCode.none, 77)
    changed = {("t", 0): (12, 0, 0, 0), ("t", 1): (5, 0, 0, 0), ("t", 2): None, ("t", 9): None}
    assert session.plan_changed(changed) == ({("t", 0)}, [("t", 2)])
    assert session.sent == {("t", 0): (12, 0, 0, 0), ("t", 1): (5, 0, 0, 0)}, "the others stay as they were"
    assert session.plan_changed({("t", 3): (0, 0, -1, 0)}) == ({("t", 3)}, []), "a new partition is named"


def test_a_fetcher_looks_at_the_partitions_that_changed_and_at_log_starts_every_sweep(tmp_path: Path) -> None:
    """Broker 1 follows broker 2's partitions through a fetcher that never connects (the plan
    only): an incremental fetch names what was added, answered or removed, not every partition;
    a log start moved behind the fetcher's back (local retention) is sent at the next sweep,
    which computes no position of the others (an idle fetcher's sweep was most of its CPU)."""
    async def scenario() -> None:
        async with replica_manager(tmp_path) as replicas:
            for name in ("t0", "t1", "t2"):
                await create(replicas, name, [FOLLOWER, LEADER])
            followers = [replicas.partitions[(name, 0)] for name in ("t0", "t1", "t2")]
            assert all(p.is_follower and p.state.leader == FOLLOWER for p in followers)
            config = FetcherConfig(LEADER, 1 << 20, 10 << 20, 500, 1, 100, 30_000)
            fetcher = ReplicaFetcher(config, FOLLOWER, ListenerEndpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9),
                                     "test-fetcher")
            try:
                for partition in followers:
                    fetcher.add(partition)  # its fetch task never runs: nothing here awaits
                named, forgotten = fetcher._plan(0.0)
                assert {p.topic for p in named} == {"t0", "t1", "t2"} and forgotten == [], "full"
                assert fetcher._session.answered(ErrorCode.none, 77)
                assert fetcher._plan(1.0) == ([], []), "nothing changed: nothing looked at"
                data = batches(b"v")
                followers[0].append_as_follower(data.data, data.headers, 0)
                followers[0].log.delete_records_before(1)  # as retention moves it: not through the partition
                assert fetcher._plan(2.0) == ([], []), "moved behind the fetcher's back: not seen yet"
                fetcher.remove(followers[1])
                assert fetcher._plan(3.0) == ([], [("t1", 0)]), "a removed partition is forgotten"
                positions = fetcher_module._position
                computed: list[str] = []
                fetcher_module._position = lambda p: computed.append(p.topic) or positions(p)  # counts, as it was
                try:
                    named, forgotten = fetcher._plan(SWEEP_S)
                finally:
                    fetcher_module._position = positions
                assert [p.topic for p in named] == ["t0"] and forgotten == [], "the sweep sends the moved one"
                assert computed == ["t0"], "the sweep computes the position of the moved partition only"
            finally:
                await fetcher.stop()

    asyncio.run(scenario())


def test_a_leaders_sweep_of_a_follower_session_picks_only_what_no_watch_reported(tmp_path: Path) -> None:
    """Broker 1 leads three partitions that broker 2's session fetches: at a sweep, the
    partitions to handle beside those named are the ones whose news no watch carries (a log
    start that retention moved, a partition created again under its name), not every partition
    of the session (reading each of them every sweep was most of an idle leader's CPU)."""
    async def scenario() -> None:
        async with replica_manager(tmp_path) as replicas:
            for name in ("t0", "t1", "t2"):
                await create(replicas, name, [LEADER, FOLLOWER])
            session = FetchSessionCache(10, Clock()).maybe_create(
                True, False, [entry for name in ("t0", "t1", "t2") for entry in entries(name, 0)])
            assert session is not None
            watch = ChangeWatch()
            for (name, index), cached in session.partitions.items():
                partition = replicas.get(name, index)
                watch.watch(partition, (name, index))
                cached.log_start_offset = partition.log.log_start_offset  # as the last answer told
            ctx = SimpleNamespace(broker=SimpleNamespace(replicas=replicas, metadata=replicas.metadata))
            assert _unseen_moves(ctx, session, watch, FOLLOWER) == set(), "an idle session: nothing to handle"

            await replicas.append_records("t0", 0, batches(b"a"), 1)
            replicas.get("t0", 0).log.delete_records_before(1)  # as retention moves it: no watch is told
            replaced = replicas.get("t2", 0)
            await replicas.metadata.delete_topic("t2")
            await asyncio.wait_for(replicas.wait_dropped("t2"), 30)
            moved = _unseen_moves(ctx, session, watch, FOLLOWER)
            assert moved == {("t0", 0), ("t2", 0)}, "a moved log start, a gone one"
            await create(replicas, "t2", [LEADER, FOLLOWER])
            assert replicas.get("t2", 0) is not replaced
            moved = _unseen_moves(ctx, session, watch, FOLLOWER)
            assert ("t2", 0) in moved, "created again: the watch does not hold it"
            assert replaced not in watch.keys, "the replaced partition is forgotten"

    asyncio.run(scenario())


def test_a_follower_read_cut_by_the_answers_size_is_read_first_at_the_next_fetch(tmp_path: Path) -> None:
    """An answer full before every moved partition was read: those left out are marked changed
    (no later append may come to wake them, and the follower does not name a partition whose
    position did not move) and go first next time, ahead of those that just answered records
    (Kafka's rotation of an incremental session)."""
    async def scenario() -> None:
        async with replica_manager(tmp_path) as replicas:
            names = ("t0", "t1", "t2")
            for name in names:
                await create(replicas, name, [LEADER, FOLLOWER])
                await replicas.append_records(name, 0, batches(b"x" * 100), 1)
            session = FetchSessionCache(10, Clock()).maybe_create(
                True, False, [entry for name in names for entry in entries(name, 0)])
            assert session is not None
            watch = ChangeWatch()
            ctx = SimpleNamespace(broker=SimpleNamespace(replicas=replicas, metadata=replicas.metadata),
                                  api_version=12, sendfile=False)
            request = SimpleNamespace(replica_id=FOLLOWER, max_bytes=1)  # room for the first batch only
            reader = _Reader(replica=FOLLOWER, read_committed=False, client_rack=None)
            keys = {(name, 0) for name in names}
            topics, total, _ = _read_all(ctx, request, _resolved(ctx, session.wanted(keys)), reader, set(), session,
                                         watch)
            assert total > 0
            assert [p.partition_index for t in topics for p in t.partitions if p.records] == [0]
            assert watch.take() == {("t1", 0), ("t2", 0)}, "the two left out"
            session.served(("t0", 0))
            assert [key for _, key, _ in session.wanted(keys)] == ["t1", "t2", "t0"]

    asyncio.run(scenario())


def test_a_leaders_sweep_picks_a_partition_its_follower_lacks_records_of_or_whose_isr_lacks_it(
        tmp_path: Path) -> None:
    """At a sweep, a partition whose log ends past the position its follower last named is
    handled again (a safety net beside the watch), and one whose ISR lacks the follower (an
    expansion whose write failed while ZooKeeper was out of reach is decided again)."""
    async def scenario() -> None:
        async with replica_manager(tmp_path) as replicas:
            await create(replicas, "t0", [LEADER, FOLLOWER])
            session = FetchSessionCache(10, Clock()).maybe_create(True, False, entries("t0", 0))
            assert session is not None
            watch = ChangeWatch()
            partition = replicas.get("t0", 0)
            watch.watch(partition, ("t0", 0))
            session.partitions[("t0", 0)].log_start_offset = partition.log.log_start_offset
            ctx = SimpleNamespace(broker=SimpleNamespace(replicas=replicas, metadata=replicas.metadata))
            assert _unseen_moves(ctx, session, watch, FOLLOWER) == set()
            await replicas.append_records("t0", 0, batches(b"a"), 1)
            watch.take()  # the append's news, taken by a fetch whose answer had no room for it
            assert _unseen_moves(ctx, session, watch, FOLLOWER) == {("t0", 0)}
            session.partitions[("t0", 0)].fetch = fetch_partition(0, partition.log.log_end_offset)
            assert _unseen_moves(ctx, session, watch, FOLLOWER) == set(), "the follower has it all"
            outside = max(partition.state.replicas) + 1
            assert _unseen_moves(ctx, session, watch, outside) == {("t0", 0)}, "not in the ISR"

    asyncio.run(scenario())


# ---------------------------------------------------------------------- a real broker


def fetch(connection: RawConnection, session_id: int, epoch: int, partitions: list[tuple[int, int]],
          forgotten: tuple[int, ...] = (), max_wait_ms: int = 200) -> Any:
    topics = (FETCH_V12.FetchTopic(topic=TOPIC, partitions=tuple(fetch_partition(i, o) for i, o in partitions)),)
    return connection.call(
        FETCH, 12, cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=session_id, session_epoch=epoch,
        topics=topics if partitions else (), rack_id="",
        forgotten_topics_data=(FETCH_V12.ForgottenTopic(topic=TOPIC, partitions=forgotten),) if forgotten else ())


def named(response: Any) -> dict[int, int]:
    """partition -> high watermark of each partition the answer names."""
    return {p.partition_index: p.high_watermark for t in response.responses for p in t.partitions}


@pytest.fixture(scope="module")
def broker_with_topic() -> Iterator[BrokerProcess]:
    with running_broker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
        admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(30)
        produce_all(broker.bootstrap, TOPIC, [(None, b"first")], partitioner="murmur2_random")
        yield broker


def test_an_incremental_fetch_answers_only_what_changed(broker_with_topic: BrokerProcess) -> None:
    bootstrap = broker_with_topic.bootstrap
    with RawConnection(bootstrap) as connection:
        opened = fetch(connection, 0, 0, [(0, 0), (1, 0), (2, 0)])
        assert opened.error_code == 0 and opened.session_id != 0
        marks = named(opened)
        assert sorted(marks) == [0, 1, 2], "a full fetch names every partition"
        caught_up = fetch(connection, opened.session_id, 1, sorted(marks.items()))
        assert caught_up.error_code == 0 and named(caught_up) == {}, "read to the end, nothing new: nothing named"
        produce_all(bootstrap, TOPIC, [(None, b"to-two")], partitioner="murmur2_random",
                    **{"sticky.partitioning.linger.ms": 0})
        grown = {index for index, hw in named(fetch(connection, opened.session_id, 2, [], max_wait_ms=2000)).items()
                 if hw > marks[index]}
        assert len(grown) == 1, "only the partition that got the record"
        (moved,) = grown
        gone = fetch(connection, opened.session_id, 3, [], forgotten=(moved,))
        assert moved not in named(gone)
        assert fetch(connection, opened.session_id, 3, []).error_code == ErrorCode.invalid_fetch_session_epoch
        assert fetch(connection, opened.session_id, -1, [(0, 0)]).session_id == 0, "epoch -1 closes it"
        assert fetch(connection, opened.session_id, 4, []).error_code == ErrorCode.fetch_session_id_not_found


def test_a_quiet_partition_still_answers_an_error_for_an_impossible_position(broker_with_topic: BrokerProcess) -> None:
    """A partition with nothing new is left out unread, but only while its position is readable:
    named past the log end, it answers OFFSET_OUT_OF_RANGE."""
    with RawConnection(broker_with_topic.bootstrap) as connection:
        opened = fetch(connection, 0, 0, [(0, 0), (1, 0)])
        marks = named(opened)
        assert named(fetch(connection, opened.session_id, 1, sorted(marks.items()))) == {}
        beyond = fetch(connection, opened.session_id, 2, [(1, marks[1] + 1000)])
        errors = {p.partition_index: p.error_code for t in beyond.responses for p in t.partitions}
        assert errors == {1: ErrorCode.offset_out_of_range}


def test_kafka_python_reads_every_partition_through_a_fetch_session(broker_with_topic: BrokerProcess) -> None:
    """kafka-python fetches with incremental sessions (its default): records produced to every
    partition while it reads all reach it."""
    bootstrap = broker_with_topic.bootstrap
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    got: set[bytes] = set()
    try:
        partitions = [TopicPartition(TOPIC, p) for p in range(3)]
        consumer.assign(partitions)
        consumer.seek_to_end()
        for partition in partitions:  # resolve the end offsets now, before the records arrive
            consumer.position(partition)
        for round_ in range(3):  # the session carries on between rounds: later records too
            values = {b"kp-%d-%d" % (round_, i) for i in range(30)}
            produce_all(bootstrap, TOPIC, [(None, v) for v in sorted(values)], partitioner="random")
            deadline = time.monotonic() + 20
            while not values <= got and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=200).values():
                    got.update(record.value for record in records)
            assert values <= got, f"round {round_}: missing {len(values - got)}"
    finally:
        consumer.close()


def test_a_broker_without_session_slots_answers_every_fetch_in_full() -> None:
    with running_broker(config={"max.incremental.fetch.session.cache.slots": "0"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
        admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(30)
        with RawConnection(broker.bootstrap) as connection:
            for _ in range(2):
                answer = fetch(connection, 0, 0, [(0, 0), (1, 0), (2, 0)], max_wait_ms=0)
                assert answer.error_code == 0 and answer.session_id == 0, "no session"
                assert sorted(named(answer)) == [0, 1, 2]

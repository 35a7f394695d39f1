"""The classic group state machine in-process, driven by a test clock.

The coordinator runs over a real `__consumer_offsets` (metadata store, log manager and
partition in a tmp dir, as the broker builds them) and a `ManualClock`: time moves only when a
test advances it, and due timers (sessions, rebalance, initial delay, pending sync) fire then,
so every timeout is exercised to the millisecond without waiting real seconds. Requests are
the coordinator's own calls (what the API handlers make of JoinGroup, SyncGroup, ...).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from logbus.cluster.metadata import BrokerInfo, EmbeddedMetadataStore
from logbus.cluster.replica_manager import ReplicaManager
from logbus.config import BrokerConfig
from logbus.coordinator import GroupConfig, GroupCoordinator, OffsetsTopic
from logbus.coordinator.consumer_group import Heartbeat
from logbus.coordinator.group import ClassicGroup, GroupState, JoinResult
from logbus.coordinator.membership import JoinRequest
from logbus.coordinator.offsets import OffsetCommit
from logbus.errors import KafkaApiError, code_of
from logbus.protocol.consumer_protocol import encode_assignment, parse_assignment
from logbus.security.listeners import ListenerEndpoint
from logbus.storage.manager import LogManager

SESSION_MS = 10_000
REBALANCE_MS = 30_000
GROUP = "g"


# ---------------------------------------------------------------- test clock


@dataclass(order=True)
class _Timer:
    due_ms: int
    sequence: int
    callback: Callable[..., Any] = field(compare=False)
    args: tuple[Any, ...] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A `Clock` whose time moves only in `advance`; timers fire in due order, at their due time."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now = start_ms
        self._timers: list[_Timer] = []
        self._sequence = itertools.count()

    def now_ms(self) -> int:
        return self.now

    def call_later(self, delay_ms: float, callback: Callable[..., Any], *args: Any) -> _Timer:
        timer = _Timer(self.now + int(delay_ms), next(self._sequence), callback, args)
        heapq.heappush(self._timers, timer)
        return timer

    async def advance(self, ms: int) -> None:
        """Move time forward by `ms`, firing due timers; then let woken requests run."""
        target = self.now + ms
        while self._timers and self._timers[0].due_ms <= target:
            timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self.now = timer.due_ms
            timer.callback(*timer.args)
        self.now = target
        await _let_run()


async def _let_run() -> None:
    """Give woken tasks their turn (no time passes for the coordinator)."""
    for _ in range(10):
        await asyncio.sleep(0)


async def until(condition: Callable[[], bool], what: str) -> None:
    """Poll `condition` with a real-time deadline (store writes may hop to the I/O threads)."""
    deadline = asyncio.get_running_loop().time() + 5
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.001)


def in_loop(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(asyncio.wait_for(test(*args, **kwargs), 30))

    return run


# ---------------------------------------------------------------- a coordinator over a real store


@dataclass
class Env:
    coordinator: GroupCoordinator
    clock: ManualClock

    def group(self, group_id: str = GROUP) -> ClassicGroup:
        return self.coordinator.groups[group_id]


@contextlib.asynccontextmanager
async def coordinator_env(data_dir: Path, initial_delay_ms: int = 0, clock: ManualClock | None = None,
                          **config_overrides: str) -> AsyncIterator[Env]:
    """A started coordinator over a real store in `data_dir`; `config_overrides`: broker config keys
    with "_" for "." (offsets_retention_minutes="1")."""
    config = BrokerConfig({"offsets.topic.num.partitions": "1",
                           "group.initial.rebalance.delay.ms": str(initial_delay_ms),
                           **{key.replace("_", "."): value for key, value in config_overrides.items()}})
    clock = clock or ManualClock()
    async with hosted_partitions(data_dir, config) as (metadata, replicas):
        store = OffsetsTopic(config, metadata, replicas, clock)
        await store.create()
        coordinator = GroupCoordinator(GroupConfig.from_broker_config(config), store, clock)
        coordinator.start()
        try:
            yield Env(coordinator, clock)
        finally:
            coordinator.stop()


@contextlib.asynccontextmanager
async def hosted_partitions(data_dir: Path, config: BrokerConfig
                            ) -> AsyncIterator[tuple[EmbeddedMetadataStore, ReplicaManager]]:
    """Broker 0's metadata store and replica manager over `data_dir`, as the broker builds them."""
    metadata = EmbeddedMetadataStore(str(data_dir), 0)
    await metadata.start()
    logs = LogManager(str(data_dir), 2)
    logs.open(0, metadata.cluster_id)
    await metadata.register_broker(BrokerInfo(0, (ListenerEndpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092),)))
    replicas = ReplicaManager(0, config, metadata, logs)
    replicas.start()
    await replicas.loaded.wait()
    try:
        yield metadata, replicas
    finally:
        await replicas.stop()
        await logs.shutdown()
        await metadata.close()


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0 (what a consumer puts in its protocol metadata)."""
    body = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    return body + struct.pack(">i", -1)


def join_request(member_id: str = "", instance_id: str | None = None, *, topics: tuple[str, ...] = ("t",),
                 session_ms: int = SESSION_MS, rebalance_ms: int = REBALANCE_MS) -> JoinRequest:
    return JoinRequest(GROUP, member_id, instance_id, "client", "/127.0.0.1", session_ms, rebalance_ms,
                       "consumer", [("range", subscription(*topics))], require_known_member_id=True)


async def join(env: Env, member_id: str = "", instance_id: str | None = None, **kw: Any) -> asyncio.Task[JoinResult]:
    """Send JoinGroup (a new dynamic member first gets its id with MEMBER_ID_REQUIRED); the
    returned task completes when the coordinator answers."""
    if not member_id and instance_id is None:
        first = await join_outcome(env, join_request(**kw))
        assert first.error == ErrorCode.member_id_required
        member_id = first.member_id
    task = asyncio.create_task(join_outcome(env, join_request(member_id, instance_id, **kw)))
    await _let_run()
    return task


async def answered(task: asyncio.Task[Any]) -> Any:
    await until(task.done, "the coordinator's answer")
    return task.result()


async def sync(env: Env, result: JoinResult, assignments: dict[str, bytes] | None = None,
               instance_id: str | None = None) -> asyncio.Task[tuple[ErrorCode, bytes, Any]]:
    task = asyncio.create_task(sync_outcome(env, result.generation, result.member_id, instance_id, assignments or {}))
    await _let_run()
    return task


async def join_outcome(env: Env, request: JoinRequest) -> JoinResult:
    """JoinGroup's answer: a refusal is answered with the request's member id, as the handler does."""
    try:
        return await env.coordinator.join(request)
    except KafkaApiError as refused:
        return JoinResult(refused.code, request.member_id)


async def sync_outcome(env: Env, generation: int, member_id: str, instance_id: str | None,
                       assignments: dict[str, bytes]) -> tuple[ErrorCode, bytes, Any]:
    """SyncGroup's (error, assignment, group), as its response has them."""
    try:
        assignment, group = await env.coordinator.sync(GROUP, generation, member_id, instance_id, "consumer",
                                                       "range", assignments)
    except KafkaApiError as refused:
        return refused.code, b"", None
    return ErrorCode.none, assignment, group


async def joined_group(env: Env, members: int = 2, **kw: Any) -> list[JoinResult]:
    """`members` dynamic members joined in one generation (CompletingRebalance, nobody synced)."""
    tasks = [await join(env, **kw) for _ in range(members)]
    for _ in range(3):  # the initial delay, extended once by the second arrival
        if all(task.done() for task in tasks):
            break
        await env.clock.advance(env.coordinator.membership.initial_delay_ms)
    early = [i for i, task in enumerate(tasks) if task.done()]
    if len(early) < members:  # without a delay the first completed alone; the others wait for it to rejoin
        for i in early:
            tasks[i] = await join(env, tasks[i].result().member_id, **kw)
    results = [await answered(task) for task in tasks]
    assert all(r.error == ErrorCode.none for r in results)
    assert len({r.generation for r in results}) == 1
    assert env.group().state is GroupState.COMPLETING_REBALANCE
    return results


async def stable_group(env: Env, members: int = 2, **kw: Any) -> list[JoinResult]:
    """`members` dynamic members that joined one generation and synced it: a Stable group."""
    results = await joined_group(env, members, **kw)
    leader = next(r for r in results if r.leader == r.member_id)
    assignments = {r.member_id: f"assignment-{r.member_id}".encode() for r in results}
    syncs = [await sync(env, r, assignments if r is leader else None) for r in results]
    for task, result in zip(syncs, results, strict=True):
        error, assignment, _ = await answered(task)
        assert (error, assignment) == (ErrorCode.none, assignments[result.member_id])
    assert env.group().state is GroupState.STABLE
    return results


def heartbeat(env: Env, result: JoinResult, generation: int | None = None, instance_id: str | None = None) -> int:
    return code_of(lambda: env.coordinator.heartbeat(GROUP, result.generation if generation is None else generation,
                                                     result.member_id, instance_id))


async def commit(env: Env, generation: int, member_id: str, offset: int = 5, instance_id: str | None = None,
                 topic: str = "t") -> int:
    (error,) = await env.coordinator.commit_offsets(GROUP, generation, member_id, instance_id,
                                                    [OffsetCommit(topic, 0, offset, -1, "meta")])
    return error


# ---------------------------------------------------------------- tests


@in_loop
async def test_join_sync_heartbeat_commit_happy_path(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path, initial_delay_ms=3000) as env:
        first, second = await stable_group(env)
        assert first.generation == second.generation == 1
        assert {m[0] for m in first.members} == {first.member_id, second.member_id}  # the leader sees everyone
        assert second.members == ()
        assert heartbeat(env, first) == heartbeat(env, second) == ErrorCode.none
        assert await commit(env, 1, second.member_id, offset=42) == ErrorCode.none
        fetched = env.coordinator.fetch_offsets(GROUP, [("t", [0, 1])])
        assert [(f.partition, f.offset, f.metadata) for f in fetched] == [(0, 42, "meta"), (1, -1, "")]


@in_loop
async def test_heartbeats_keep_a_member_and_silence_expires_it_at_the_session_timeout(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path) as env:
        first, second = await stable_group(env)
        await env.clock.advance(SESSION_MS // 2)
        assert heartbeat(env, first) == ErrorCode.none  # first heartbeats; second is silent
        await env.clock.advance(SESSION_MS // 2 - 1)
        assert heartbeat(env, first) == ErrorCode.none
        group = env.group()
        assert second.member_id in group.members and group.state is GroupState.STABLE
        await env.clock.advance(1)  # SESSION_MS since second's SyncGroup
        assert second.member_id not in group.members
        assert first.member_id in group.members  # its own session was renewed by its heartbeats
        assert group.state is GroupState.PREPARING_REBALANCE
        assert heartbeat(env, first) == ErrorCode.rebalance_in_progress
        rejoined = await answered(await join(env, first.member_id))
        assert (rejoined.error, rejoined.generation, [m[0] for m in rejoined.members]) == (
            ErrorCode.none, first.generation + 1, [first.member_id])


@in_loop
async def test_session_expires_exactly_at_the_timeout(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path) as env:
        (only,) = await stable_group(env, members=1)
        assert heartbeat(env, only) == ErrorCode.none
        await env.clock.advance(SESSION_MS - 1)
        assert only.member_id in env.group().members
        await env.clock.advance(1)
        await until(lambda: env.group().state is GroupState.EMPTY, "the group to empty")
        assert env.group().members == {}
        assert heartbeat(env, only) == ErrorCode.unknown_member_id


@in_loop
async def test_member_that_does_not_rejoin_is_removed_at_the_rebalance_timeout(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path) as env:
        first, second = await stable_group(env, session_ms=60_000)
        leader, follower = (first, second) if first.leader == first.member_id else (second, first)
        rejoin = await join(env, leader.member_id, session_ms=60_000, topics=("t", "u"))  # new subscription
        assert env.group().state is GroupState.PREPARING_REBALANCE
        assert heartbeat(env, follower) == ErrorCode.rebalance_in_progress  # alive, but does not rejoin
        await env.clock.advance(REBALANCE_MS - 1)
        assert not rejoin.done()
        await env.clock.advance(1)
        result = await answered(rejoin)
        assert (result.error, result.generation, [m[0] for m in result.members]) == (
            ErrorCode.none, leader.generation + 1, [leader.member_id])
        assert heartbeat(env, follower) == ErrorCode.unknown_member_id


@in_loop
async def test_initial_rebalance_delay_waits_and_extends_while_members_arrive(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path, initial_delay_ms=3000) as env:
        first = await join(env)
        await env.clock.advance(2999)
        assert not first.done()
        second = await join(env)  # arrives within the delay: the wait is extended by another delay
        await env.clock.advance(1)
        assert not first.done() and not second.done()
        await env.clock.advance(2999)
        assert not first.done()
        await env.clock.advance(1)  # 6000 ms after the first join, no one new during the second delay
        results = [await answered(first), await answered(second)]
        assert {r.generation for r in results} == {1}
        assert len(env.group().members) == 2


@in_loop
async def test_initial_delay_is_capped_by_the_rebalance_timeout(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path, initial_delay_ms=3000) as env:
        tasks = [await join(env, rebalance_ms=7000)]
        for arrival in (2000, 3000, 1500):  # newcomers at 2000, 5000, 6500 ms keep extending the delay...
            await env.clock.advance(arrival)
            tasks.append(await join(env, rebalance_ms=7000))
        await env.clock.advance(499)
        assert not any(task.done() for task in tasks)
        await env.clock.advance(1)  # ...but not past the rebalance timeout: 7000 ms after the first join
        results = [await answered(task) for task in tasks]
        assert {(r.error, r.generation) for r in results} == {(ErrorCode.none, 1)}
        assert len(env.group().members) == 4


@in_loop
async def test_static_member_replacement_keeps_the_generation_and_fences_the_old_id(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path) as env:
        old = await answered(await join(env, instance_id="instance-1"))
        error, assignment, _ = await answered(await sync(env, old, {old.member_id: b"a1"}, "instance-1"))
        assert (error, assignment, env.group().state) == (ErrorCode.none, b"a1", GroupState.STABLE)
        new = await answered(await join(env, instance_id="instance-1"))  # restarted: no member id
        assert new.error == ErrorCode.none and new.member_id != old.member_id
        assert new.generation == old.generation == 1 and env.group().state is GroupState.STABLE
        assert new.skip_assignment  # it was the leader: it must not assign again
        error, assignment, _ = await answered(await sync(env, new, instance_id="instance-1"))
        assert (error, assignment) == (ErrorCode.none, b"a1")  # its old assignment, no rebalance
        assert heartbeat(env, old, instance_id="instance-1") == ErrorCode.fenced_instance_id
        assert await commit(env, 1, old.member_id, instance_id="instance-1") == ErrorCode.fenced_instance_id
        assert heartbeat(env, new, instance_id="instance-1") == ErrorCode.none


@in_loop
async def test_static_member_replacement_with_new_protocols_rebalances(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path) as env:
        old = await answered(await join(env, instance_id="instance-1"))
        await answered(await sync(env, old, {old.member_id: b"a1"}, "instance-1"))
        new = await answered(await join(env, instance_id="instance-1", topics=("other",)))
        assert (new.error, new.generation) == (ErrorCode.none, old.generation + 1)


@in_loop
async def test_leave_during_rebalance_completes_the_join_for_the_others(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path) as env:
        first, second = await stable_group(env)
        leader, follower = (first, second) if first.leader == first.member_id else (second, first)
        rejoin = await join(env, leader.member_id, topics=("t", "u"))
        assert not rejoin.done()
        assert await env.coordinator.leave(GROUP, [(follower.member_id, None)]) == [ErrorCode.none]
        result = await answered(rejoin)  # at once: no need to wait for the rebalance timeout
        assert (result.generation, [m[0] for m in result.members]) == (leader.generation + 1, [leader.member_id])


@in_loop
async def test_leave_of_every_member_empties_the_group(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path) as env:
        first, second = await stable_group(env)
        errors = await env.coordinator.leave(GROUP, [(first.member_id, None), (second.member_id, None),
                                                     ("nobody", None)])
        assert errors == [ErrorCode.none, ErrorCode.none, ErrorCode.unknown_member_id]
        assert env.group().state is GroupState.EMPTY
        assert env.group().generation == first.generation + 1


@in_loop
async def test_sync_group_from_a_non_member_or_an_old_generation_is_refused(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path) as env:
        first, second = await stable_group(env)
        stranger = JoinResult(ErrorCode.none, "stranger", first.generation)
        error, _, _ = await answered(await sync(env, stranger))
        assert error == ErrorCode.unknown_member_id
        stale = JoinResult(ErrorCode.none, first.member_id, first.generation - 1)
        error, _, _ = await answered(await sync(env, stale))
        assert error == ErrorCode.illegal_generation
        assert heartbeat(env, second, generation=0) == ErrorCode.illegal_generation


@in_loop
async def test_offset_commit_from_a_stale_generation_or_during_a_rebalance_is_refused(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path) as env:
        first, second = await stable_group(env)
        assert await commit(env, first.generation - 1, first.member_id) == ErrorCode.illegal_generation
        assert await commit(env, first.generation, "stranger") == ErrorCode.unknown_member_id
        tasks = [await join(env, r.member_id, topics=("t", "u")) for r in (first, second)]
        results = [await answered(t) for t in tasks]  # generation 2, not yet synced
        assert env.group().state is GroupState.COMPLETING_REBALANCE
        assert await commit(env, results[0].generation, first.member_id) == ErrorCode.rebalance_in_progress
        assert await commit(env, first.generation, first.member_id) == ErrorCode.rebalance_in_progress
        fetched = env.coordinator.fetch_offsets(GROUP, [("t", [0])])
        assert fetched[0].offset == -1  # nothing refused was stored


@in_loop
async def test_commit_outside_group_management_only_for_an_empty_group(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path) as env:
        assert await commit(env, -1, "", offset=7) == ErrorCode.none  # admin tools, assign()
        (member,) = await stable_group(env, members=1)
        assert await commit(env, -1, "", offset=8) == ErrorCode.unknown_member_id
        fetched = env.coordinator.fetch_offsets(GROUP, [("t", [0])])
        assert fetched[0].offset == 7


@in_loop
async def test_pending_member_that_never_rejoins_expires_after_its_session_timeout(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path) as env:
        (only,) = await stable_group(env, members=1)
        pending = await join_outcome(env, join_request())  # gets an id, never comes back
        assert pending.error == ErrorCode.member_id_required
        rejoin = await join(env, only.member_id, topics=("t", "u"))
        assert not rejoin.done()  # a pending member holds the join...
        await env.clock.advance(SESSION_MS - 1)
        assert not rejoin.done()
        await env.clock.advance(1)  # ...until its session timeout
        result = await answered(rejoin)
        assert (result.error, result.generation, [m[0] for m in result.members]) == (
            ErrorCode.none, only.generation + 1, [only.member_id])
        late = await join_outcome(env, join_request(pending.member_id))
        assert late.error == ErrorCode.unknown_member_id


@in_loop
async def test_member_that_joined_but_never_synced_is_removed_after_the_rebalance_timeout(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path) as env:
        results = await joined_group(env)
        leader = next(r for r in results if r.leader == r.member_id)
        follower = next(r for r in results if r is not leader)
        error, _, _ = await answered(await sync(env, leader, {leader.member_id: b"l", follower.member_id: b"f"}))
        assert error == ErrorCode.none and env.group().state is GroupState.STABLE
        for _ in range(REBALANCE_MS // 5000 - 1):  # the follower heartbeats but never syncs
            await env.clock.advance(5000)
            assert heartbeat(env, follower) == heartbeat(env, leader) == ErrorCode.none
        await env.clock.advance(4999)
        assert follower.member_id in env.group().members
        await env.clock.advance(1)
        assert follower.member_id not in env.group().members
        assert env.group().state is GroupState.PREPARING_REBALANCE
        assert heartbeat(env, follower) == ErrorCode.unknown_member_id


@in_loop
async def test_members_that_all_synced_are_not_removed_by_the_sync_deadline(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path) as env:
        first, second = await stable_group(env, session_ms=REBALANCE_MS * 3)
        await env.clock.advance(REBALANCE_MS + 1)
        assert set(env.group().members) == {first.member_id, second.member_id}
        assert env.group().state is GroupState.STABLE


@in_loop
async def test_groups_and_offsets_are_rebuilt_from_consumer_offsets(tmp_path: Path) -> None:
    clock = ManualClock()
    async with coordinator_env(tmp_path, clock=clock) as env:
        first, second = await stable_group(env)
        assert await commit(env, first.generation, first.member_id, offset=99) == ErrorCode.none
    async with coordinator_env(tmp_path, clock=clock) as env:
        assert code_of(lambda: env.coordinator.heartbeat(GROUP, first.generation, first.member_id, None)) == (
            ErrorCode.coordinator_load_in_progress)  # the partition loads in the background
        await until(lambda: 0 in env.coordinator.loaded_partitions, "the load")
        group = env.group()
        assert (group.state, group.generation) == (GroupState.STABLE, first.generation)
        assert set(group.members) == {first.member_id, second.member_id}
        assert group.members[second.member_id].assignment == f"assignment-{second.member_id}".encode()
        fetched = env.coordinator.fetch_offsets(GROUP, [("t", [0])])
        assert fetched[0].offset == 99
        await env.clock.advance(SESSION_MS)  # the loaded members' sessions run from the load
        await until(lambda: group.state is GroupState.EMPTY, "the loaded members to expire")


@in_loop
async def test_member_that_joined_but_is_silent_is_removed_at_its_session_timeout(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path) as env:
        results = await joined_group(env)  # nobody syncs; only the leader heartbeats
        leader = next(r for r in results if r.leader == r.member_id)
        follower = next(r for r in results if r is not leader)
        await env.clock.advance(SESSION_MS - 1)
        assert heartbeat(env, leader) == ErrorCode.none
        assert follower.member_id in env.group().members
        await env.clock.advance(1)  # well before the rebalance timeout
        assert follower.member_id not in env.group().members
        assert env.group().state is GroupState.PREPARING_REBALANCE


RETENTION = {"offsets_retention_minutes": "1", "offsets_retention_check_interval_ms": "1000"}


async def advance_in_checks(env: Env, ms: int, *alive: JoinResult) -> None:
    """Advance `ms` one expiry check (1 s) at a time, letting each check's writes finish; `alive`
    members heartbeat at every step."""
    for _ in range(ms // 1000):
        await env.clock.advance(1000)
        await until(lambda: not env.coordinator.background_tasks, "the expiry check")
        for member in alive:
            assert heartbeat(env, member) == ErrorCode.none


@in_loop
async def test_offsets_of_an_empty_group_expire_after_the_retention_then_the_group_goes(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path, **RETENTION) as env:
        assert await commit(env, -1, "", offset=7) == ErrorCode.none  # no protocol: counted from the commit
        await advance_in_checks(env, 59_000)
        assert ("t", 0) in env.group().offsets
        await advance_in_checks(env, 1000)
        assert GROUP not in env.coordinator.groups
        assert env.coordinator.fetch_offsets(GROUP, [("t", [0])])[0].offset == -1


@in_loop
async def test_offsets_of_a_consumer_group_with_members_do_not_expire(tmp_path: Path) -> None:
    """KIP-848 groups keep their offsets in an Empty classic group of their id: those expire only
    once the consumer group has no members left."""
    async with coordinator_env(tmp_path, **RETENTION) as env:
        joined = await env.coordinator.consumer_heartbeat(Heartbeat(GROUP, "m", 0, rebalance_timeout_ms=30_000,
                                                                    subscribed_topics=("t",), owned={}))
        assert await commit(env, joined.member_epoch, "m", offset=7) == ErrorCode.none
        for _ in range(3):  # 90 s, beyond the retention, with a heartbeat every 30 s
            await advance_in_checks(env, 30_000)
            await env.coordinator.consumer_heartbeat(Heartbeat(GROUP, "m", joined.member_epoch))
        assert env.group().offsets[("t", 0)].value.offset == 7
        await env.coordinator.consumer_heartbeat(Heartbeat(GROUP, "m", -1))
        await advance_in_checks(env, 61_000)
        assert GROUP not in env.coordinator.groups


@in_loop
async def test_consumer_groups_leave_memory_with_their_partition(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path) as env:
        await env.coordinator.consumer_heartbeat(Heartbeat(GROUP, "m", 0, rebalance_timeout_ms=30_000,
                                                           subscribed_topics=("t",), owned={}))
        partition = env.coordinator.store.partition(env.coordinator.partition_for(GROUP))
        env.coordinator.on_leadership(partition, False)
        assert env.coordinator.consumer_groups.get(GROUP) is None
        # led again, loaded afresh from its records: the member goes on at its epoch
        await until(lambda: env.coordinator.serves(GROUP), "the partition loaded again")
        assert (await env.coordinator.consumer_heartbeat(Heartbeat(GROUP, "m", 1))).member_epoch == 1


@in_loop
async def test_a_stable_group_loses_only_the_offsets_of_topics_it_no_longer_reads(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path, **RETENTION) as env:
        first, second = await stable_group(env)  # both subscribe to "t" only
        assert await commit(env, first.generation, first.member_id, topic="t") == ErrorCode.none
        assert await commit(env, first.generation, first.member_id, topic="left") == ErrorCode.none
        await advance_in_checks(env, 60_000, first, second)
        assert set(env.group().offsets) == {("t", 0)}  # KIP-496
        assert env.group().state is GroupState.STABLE


# ---------------------------------------------------------------- online migration (KIP-848, Kafka 4.1)


def owning(topic: str, *partitions: int) -> bytes:
    """A ConsumerProtocolSubscription v1 of `topic` that owns `partitions` (cooperative rejoin)."""
    name = struct.pack(">h", len(topic)) + topic.encode()
    return (struct.pack(">hi", 1, 1) + name + struct.pack(">i", -1) + struct.pack(">i", 1) + name
            + struct.pack(f">i{len(partitions)}i", len(partitions), *partitions))


def classic_rejoin(env: Env, member_id: str, *owned: int) -> Awaitable[JoinResult]:
    request = join_request(member_id)
    request.protocols = [("range", owning("t", *owned))]
    return join_outcome(env, request)


@in_loop
async def test_a_classic_group_is_upgraded_reconciled_through_rejoins_and_downgraded(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path) as env:
        env.coordinator.consumer_groups.partition_count = {"t": 6}.get
        first, second = await joined_group(env)
        leader = first if first.leader == first.member_id else second
        halves = {first.member_id: encode_assignment({"t": frozenset({0, 1, 2})}, 0),
                  second.member_id: encode_assignment({"t": frozenset({3, 4, 5})}, 0)}
        for task in [await sync(env, r, halves if r is leader else None) for r in (first, second)]:
            assert (await answered(task))[0] == ErrorCode.none
        generation = first.generation

        joined = await env.coordinator.consumer_heartbeat(Heartbeat(GROUP, "c", 0, rebalance_timeout_ms=30_000,
                                                              subscribed_topics=("t",), owned={}))
        assert joined.member_epoch == generation + 1 and joined.assignment == {}  # its partition is still held
        assert env.group().is_empty  # the classic group only keeps the offsets now
        assert heartbeat(env, first) == ErrorCode.rebalance_in_progress
        rejoined = await classic_rejoin(env, first.member_id, 0, 1, 2)
        assert (rejoined.error, rejoined.generation, rejoined.leader, rejoined.members) == (
            ErrorCode.none, generation, "", ())  # it gives one partition to c: revoked first, at its epoch
        error, assignment, _ = await sync_outcome(env, generation, first.member_id, None, {})
        assert (error, len(parse_assignment(assignment)["t"])) == (ErrorCode.none, 2)
        kept = sorted(parse_assignment(assignment)["t"])
        revoked = await classic_rejoin(env, first.member_id, *kept)
        assert revoked.generation == generation + 1
        given = await env.coordinator.consumer_heartbeat(Heartbeat(GROUP, "c", joined.member_epoch, owned={}))
        assert given.assignment == {"t": frozenset({0, 1, 2}) - frozenset(kept)}

        await env.coordinator.consumer_heartbeat(Heartbeat(GROUP, "c", -1))  # the last consumer-protocol member
        assert env.coordinator.consumer_groups.get(GROUP) is None
        assert set(env.group().members) == {first.member_id, second.member_id}
        assert env.group().state is GroupState.PREPARING_REBALANCE
        assert env.group().generation == generation + 1  # the group epoch (c left without a bump)


@in_loop
async def test_a_classic_member_that_does_not_rejoin_in_its_rebalance_timeout_is_removed(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path, group_consumer_migration_policy="upgrade") as env:
        env.coordinator.consumer_groups.partition_count = {"t": 4}.get
        first, second = await joined_group(env)
        leader = first if first.leader == first.member_id else second
        halves = {first.member_id: encode_assignment({"t": frozenset({0, 1})}, 0),
                  second.member_id: encode_assignment({"t": frozenset({2, 3})}, 0)}
        for task in [await sync(env, r, halves if r is leader else None) for r in (first, second)]:
            await answered(task)
        await env.coordinator.consumer_heartbeat(Heartbeat(GROUP, "c", 0, rebalance_timeout_ms=30_000,
                                                     subscribed_topics=("t",), owned={}))
        for _ in range(4):  # both keep heartbeating, told to rejoin, and never do
            assert heartbeat(env, first) == ErrorCode.rebalance_in_progress
            assert heartbeat(env, second) == ErrorCode.rebalance_in_progress
            await env.clock.advance(SESSION_MS - 1)
        members = env.coordinator.consumer_groups.get(GROUP).members
        assert set(members) == {"c"}  # neither rejoined within the 30 s rebalance timeout
        await env.coordinator.consumer_heartbeat(Heartbeat(GROUP, "c", -1))  # no downgrade: the policy, and empty
        assert env.coordinator.consumer_groups.get(GROUP) is not None


@in_loop
async def test_a_static_classic_member_restarting_takes_its_place_in_a_consumer_group(tmp_path: Path) -> None:
    async with coordinator_env(tmp_path) as env:
        env.coordinator.consumer_groups.partition_count = {"t": 2}.get
        await env.coordinator.consumer_heartbeat(Heartbeat(GROUP, "c", 0, rebalance_timeout_ms=30_000,
                                                     subscribed_topics=("t",), owned={}))
        first = await join_outcome(env, join_request(instance_id="i"))  # static: no MEMBER_ID_REQUIRED
        assert first.error == ErrorCode.none
        members = env.coordinator.consumer_groups.get(GROUP).members
        assert members[first.member_id].classic is not None
        again = await join_outcome(env, join_request(instance_id="i"))  # restarted: a new member id
        assert again.error == ErrorCode.none and again.member_id != first.member_id
        assert set(members) == {"c", again.member_id}
        assert heartbeat(env, first, instance_id="i") == ErrorCode.fenced_instance_id
        fenced = await join_outcome(env, join_request(first.member_id, "i"))
        assert fenced.error == ErrorCode.fenced_instance_id

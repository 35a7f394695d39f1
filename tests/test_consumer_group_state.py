"""The KIP-848 consumer group state machine (coordinator/consumer_group.py), in-process with a test clock."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from manual_clock import ManualClock

from logbus.coordinator.assignors import range_assignor, uniform
from logbus.coordinator.consumer_group import (
    ConsumerGroupConfig,
    ConsumerGroups,
    ConsumerGroupState,
    Heartbeat,
    MemberState,
)
from logbus.errors import KafkaApiError, code_of

GROUP = "g"


def make(partitions: dict[str, int] | None = None, **config: Any) -> tuple[ConsumerGroups, ManualClock]:
    clock = ManualClock()
    counts = {"t": 6} if partitions is None else partitions
    return ConsumerGroups(clock, ConsumerGroupConfig(**config), counts.get, topic_names=lambda: list(counts)), clock


def join(groups: ConsumerGroups, member: str, topics: tuple[str, ...] = ("t",), **fields: Any):
    return groups.heartbeat(Heartbeat(GROUP, member, 0, rebalance_timeout_ms=30_000, subscribed_topics=topics,
                                      owned={}, **fields))


def beat(groups: ConsumerGroups, member: str, owned: dict[str, set[int]] | None = None, epoch: int | None = None):
    current = groups.groups[GROUP].members[member].member_epoch if epoch is None else epoch
    frozen = None if owned is None else {t: frozenset(p) for t, p in owned.items()}
    return groups.heartbeat(Heartbeat(GROUP, member, current, owned=frozen))


def owned_by(groups: ConsumerGroups) -> dict[str, set[int]]:
    return {m.member_id: set().union(*m.assigned.values()) if m.assigned else set()
            for m in groups.groups[GROUP].members.values()}


def settle(groups: ConsumerGroups) -> None:
    """Every member heartbeats with what it was given until the group is Stable (bounded)."""
    for _ in range(10):
        for member in list(groups.groups[GROUP].members.values()):
            beat(groups, member.member_id, {t: set(p) for t, p in member.assigned.items()})
        if groups.groups[GROUP].state is ConsumerGroupState.STABLE:
            return
    raise AssertionError("group did not settle")


def test_first_member_gets_every_partition_at_the_first_epoch() -> None:
    groups, _ = make()
    result = join(groups, "a")
    assert result.member_epoch == 1
    assert result.assignment == {"t": frozenset(range(6))}
    assert result.heartbeat_interval_ms == 5000
    assert groups.groups[GROUP].state is ConsumerGroupState.STABLE


def test_a_partition_is_revoked_before_it_is_assigned_elsewhere() -> None:
    groups, _ = make()
    join(groups, "a")
    second = join(groups, "b")
    assert second.member_epoch == 2
    assert second.assignment == {}  # its partitions still belong to a: unreleased
    assert groups.groups[GROUP].members["b"].state is MemberState.UNRELEASED_PARTITIONS
    first = beat(groups, "a", {"t": set(range(6))})
    assert first.member_epoch == 1  # stays at its epoch until it has revoked
    kept = first.assignment["t"]
    assert len(kept) == 3 and kept < frozenset(range(6))  # it keeps the partitions it keeps
    assert groups.groups[GROUP].members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert beat(groups, "b").assignment is None  # nothing released yet
    released = beat(groups, "a", {"t": set(kept)})
    assert released.member_epoch == 2
    assert released.assignment is None  # unchanged: it already knows what it keeps
    assigned = beat(groups, "b").assignment
    assert assigned == {"t": frozenset(range(6)) - kept}
    assert groups.groups[GROUP].state is ConsumerGroupState.STABLE


def test_no_partition_has_two_owners_while_three_members_come_and_go() -> None:
    groups, _ = make()
    for member in ("a", "b", "c"):
        join(groups, member)
        for _ in range(6):  # at every step of the reconciliation, no partition is held twice
            settle_step(groups)
            holders = [p for m in groups.groups[GROUP].members.values()
                       for p in set().union(*m.assigned.values(), *m.revoking.values())]
            assert len(holders) == len(set(holders))
    settle(groups)
    assert sorted(len(p) for p in owned_by(groups).values()) == [2, 2, 2]
    before = owned_by(groups)
    groups.heartbeat(Heartbeat(GROUP, "b", -1))
    settle(groups)
    after = owned_by(groups)
    assert after["a"] >= before["a"] and after["c"] >= before["c"]  # sticky: nothing taken away
    assert after["a"] | after["c"] == set(range(6))


def settle_step(groups: ConsumerGroups) -> None:
    for member in list(groups.groups[GROUP].members.values()):
        beat(groups, member.member_id, {t: set(p) for t, p in member.assigned.items()})


def test_leaving_answers_epoch_minus_one_and_empties_the_group() -> None:
    groups, _ = make()
    join(groups, "a")
    result = groups.heartbeat(Heartbeat(GROUP, "a", -1))
    assert result.member_epoch == -1
    assert groups.groups[GROUP].state is ConsumerGroupState.EMPTY
    assert groups.groups[GROUP].group_epoch == 2


def test_a_silent_member_expires_after_the_session_timeout() -> None:
    groups, clock = make(session_timeout_ms=45_000)
    join(groups, "a")
    join(groups, "b")
    clock.advance(44_000)
    settle(groups)  # both heartbeat: sessions reset
    clock.advance(44_000)
    beat(groups, "a", {t: set(p) for t, p in groups.groups[GROUP].members["a"].assigned.items()})
    clock.advance(2_000)  # b's session (last reset 46 s ago) is over
    assert set(groups.groups[GROUP].members) == {"a"}


def test_a_groups_own_timeouts_count_from_its_next_heartbeat_within_the_brokers_bounds() -> None:
    overrides: dict[str, dict[str, str]] = {}
    clock = ManualClock()
    config = ConsumerGroupConfig(session_timeout_ms=45_000, heartbeat_interval_ms=5_000,
                                 session_timeout_bounds=(2_000, 60_000), heartbeat_interval_bounds=(500, 15_000))
    groups = ConsumerGroups(clock, config, {"t": 6}.get, group_configs=lambda g: overrides.get(g, {}))
    assert join(groups, "a").heartbeat_interval_ms == 5_000
    join(groups, "b")
    overrides[GROUP] = {"consumer.session.timeout.ms": "3000", "consumer.heartbeat.interval.ms": "1000"}
    assert beat(groups, "a").heartbeat_interval_ms == 1_000
    beat(groups, "b")
    clock.advance(2_900)
    beat(groups, "a")
    clock.advance(200)  # b's last heartbeat was 3.1 s ago: its 3 s session is over
    assert set(groups.groups[GROUP].members) == {"a"}
    overrides[GROUP] = {"consumer.session.timeout.ms": "1000", "consumer.heartbeat.interval.ms": "99999"}
    assert beat(groups, "a").heartbeat_interval_ms == 15_000  # clamped to the broker's bounds
    clock.advance(1_999)
    assert set(groups.groups[GROUP].members) == {"a"}


def test_a_member_removed_by_a_timeout_and_a_refused_heartbeat_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    groups, clock = make(session_timeout_ms=45_000)
    join(groups, "a")
    with caplog.at_level("DEBUG", logger="logbus.coordinator.consumer_group"):
        clock.advance(45_000)
        with pytest.raises(KafkaApiError):
            beat(groups, "a", epoch=1)
        with pytest.raises(KafkaApiError):
            groups.validate(Heartbeat(GROUP, "b", 0, rebalance_timeout_ms=1, subscribed_topics=("t",),
                                      owned={"t": frozenset({1})}))
    assert "member a fenced at epoch 1: it sent no heartbeat within the session timeout" in caplog.text
    assert "heartbeat of member a at epoch 1 refused: unknown_member_id" in caplog.text
    assert "member b at epoch 0 refused: invalid_request TopicPartitions must be empty" in caplog.text


def test_a_member_that_does_not_revoke_in_its_rebalance_timeout_is_removed() -> None:
    groups, clock = make()
    join(groups, "a")
    join(groups, "b")
    beat(groups, "a", {"t": set(range(6))})  # asked to revoke three
    clock.advance(30_001)  # its rebalance timeout (30 s) passes without the revocation
    assert "a" not in groups.groups[GROUP].members
    assert beat(groups, "b").assignment == {"t": frozenset(range(6))}


def test_epochs_ahead_or_stale_are_fenced_but_the_previous_one_with_a_subset_is_not() -> None:
    groups, _ = make()
    join(groups, "a")
    with pytest.raises(KafkaApiError) as ahead:
        beat(groups, "a", epoch=5)
    assert ahead.value.code is ErrorCode.fenced_member_epoch
    join(groups, "b")
    beat(groups, "a", {"t": set(range(6))})
    kept = groups.groups[GROUP].members["a"].assigned["t"]
    beat(groups, "a", {"t": set(kept)})  # epoch 2 now; the response may be lost:
    assert beat(groups, "a", {"t": set(kept)}, epoch=1).member_epoch == 2
    with pytest.raises(KafkaApiError) as stale:
        beat(groups, "a", {"t": set(range(6))}, epoch=1)  # owns more than its assignment
    assert stale.value.code is ErrorCode.fenced_member_epoch


def test_unknown_member_and_group() -> None:
    groups, _ = make()
    with pytest.raises(KafkaApiError) as unknown_group:
        beat(groups, "a", epoch=3)
    assert unknown_group.value.code is ErrorCode.unknown_member_id
    join(groups, "a")
    with pytest.raises(KafkaApiError) as unknown_member:
        beat(groups, "zz", epoch=1)
    assert unknown_member.value.code is ErrorCode.unknown_member_id


@pytest.mark.parametrize(("fields", "message"), [
    ({"rebalance_timeout_ms": -1}, "RebalanceTimeoutMs"),
    ({"owned": None}, "TopicPartitions"),
    ({"owned": {"t": frozenset({1})}}, "TopicPartitions"),
    ({"subscribed_topics": None}, "SubscribedTopicNames"),
    ({"member_id": ""}, "MemberId"),
    ({"instance_id": ""}, "InstanceId"),
])
def test_a_bad_first_heartbeat_is_an_invalid_request(fields: dict[str, Any], message: str) -> None:
    groups, _ = make()
    request = {"group_id": GROUP, "member_id": "a", "member_epoch": 0, "rebalance_timeout_ms": 30_000,
               "subscribed_topics": ("t",), "owned": {}, **fields}
    with pytest.raises(KafkaApiError) as refused:
        groups.heartbeat(Heartbeat(**request))
    assert refused.value.code is ErrorCode.invalid_request
    assert message in (refused.value.message or "")


def test_an_unknown_server_assignor_is_refused() -> None:
    groups, _ = make()
    with pytest.raises(KafkaApiError) as refused:
        join(groups, "a", server_assignor="sticky")
    assert refused.value.code is ErrorCode.unsupported_assignor


def test_group_max_size() -> None:
    groups, _ = make(max_size=2)
    join(groups, "a")
    join(groups, "b")
    with pytest.raises(KafkaApiError) as full:
        join(groups, "c")
    assert full.value.code is ErrorCode.group_max_size_reached


def test_a_static_member_rejoins_with_its_assignment_after_a_temporary_leave() -> None:
    groups, clock = make()
    join(groups, "a", instance_id="i1")
    join(groups, "b", instance_id="i2")
    settle(groups)
    before = owned_by(groups)["a"]
    epoch = groups.groups[GROUP].group_epoch
    member_epoch = groups.groups[GROUP].members["a"].member_epoch
    assert groups.heartbeat(Heartbeat(GROUP, "a", member_epoch, instance_id="i1")).member_epoch == member_epoch
    assert groups.heartbeat(Heartbeat(GROUP, "a", -2, instance_id="i1")).member_epoch == -2
    with pytest.raises(KafkaApiError) as in_use:
        join(groups, "b2", instance_id="i2")
    assert in_use.value.code is ErrorCode.unreleased_instance_id
    result = join(groups, "a2", instance_id="i1")
    assert result.member_epoch == member_epoch
    assert result.assignment == {"t": frozenset(before)}
    assert groups.groups[GROUP].group_epoch == epoch  # no rebalance
    clock.advance(46_000)  # nobody heartbeats: both expire
    assert groups.groups[GROUP].state is ConsumerGroupState.EMPTY


def test_a_new_partition_bumps_the_group_epoch() -> None:
    counts = {"t": 2}
    groups, _ = make(counts)
    join(groups, "a")
    counts["t"] = 4
    result = beat(groups, "a", {"t": {0, 1}})
    assert result.assignment == {"t": frozenset(range(4))}
    assert groups.groups[GROUP].group_epoch == 2


def test_commit_checks_member_and_epoch() -> None:
    groups, _ = make()
    join(groups, "a")
    def commit_error(member_id: str, member_epoch: int) -> ErrorCode:
        return code_of(lambda: groups.check_commit(GROUP, member_id, member_epoch))
    assert commit_error("a", 1) is ErrorCode.none
    assert commit_error("a", 0) is ErrorCode.stale_member_epoch
    assert commit_error("zz", 1) is ErrorCode.unknown_member_id
    assert commit_error("", -1) is ErrorCode.unknown_member_id  # not empty
    groups.heartbeat(Heartbeat(GROUP, "a", -1))
    assert commit_error("", -1) is ErrorCode.none


def test_uniform_is_balanced_and_sticky_with_mixed_subscriptions() -> None:
    subscriptions = {"a": frozenset({"x", "y"}), "b": frozenset({"x"}), "c": frozenset({"y"})}
    counts = {"x": 4, "y": 4}
    first = uniform(subscriptions, counts, {})
    sizes = {m: sum(len(p) for p in a.values()) for m, a in first.items()}
    assert sorted(sizes.values()) in ([2, 3, 3], [2, 2, 4]) and max(sizes.values()) - min(sizes.values()) <= 2
    assert sorted((t, p) for a in first.values() for t, ps in a.items() for p in ps) == sorted(
        (t, p) for t in counts for p in range(counts[t]))
    again = uniform(subscriptions, counts, first)
    assert again == first


def test_range_gives_consecutive_ranges() -> None:
    result = range_assignor({"a": frozenset({"t"}), "b": frozenset({"t"})}, {"t": 5}, {})
    assert result == {"a": {"t": frozenset({0, 1, 2})}, "b": {"t": frozenset({3, 4})}}


def test_members_choose_the_range_assignor() -> None:
    groups, _ = make()
    join(groups, "a", server_assignor="range")
    assert groups.groups[GROUP].assignor == "range"


def test_a_regex_subscription_follows_the_topics_it_matches() -> None:
    counts = {"orders.eu": 2, "orders.us": 2, "payments": 2, "xorders.eu": 1}  # matched whole: not the last
    groups, _ = make(counts)
    result = groups.heartbeat(Heartbeat(GROUP, "a", 0, rebalance_timeout_ms=30_000, subscribed_topics=(),
                                        subscribed_regex="orders\\..*", owned={}))
    assert result.assignment == {"orders.eu": frozenset({0, 1}), "orders.us": frozenset({0, 1})}
    counts["orders.asia"] = 1  # a new matching topic: a new group epoch, and its partition
    assert beat(groups, "a", {"orders.eu": {0, 1}, "orders.us": {0, 1}}).assignment["orders.asia"] == {0}
    assert groups.groups[GROUP].group_epoch == 2


def test_a_regex_that_does_not_compile_or_would_backtrack_forever() -> None:
    groups, _ = make({"a" * 249: 1})
    with pytest.raises(KafkaApiError) as refused:
        groups.heartbeat(Heartbeat(GROUP, "m", 0, rebalance_timeout_ms=30_000, subscribed_regex="(", owned={}))
    assert refused.value.code is ErrorCode.invalid_regular_expression
    slow = groups.heartbeat(Heartbeat(GROUP, "m", 0, rebalance_timeout_ms=30_000, subscribed_regex="(a+)+b",
                                      owned={}))  # exponential for a backtracking engine; RE2 is linear
    assert slow.assignment == {}


def test_uniform_keeps_each_members_lowest_partitions_as_kafka_does() -> None:
    """The assignments librdkafka's test 0113 (x_incremental_rebalances) expects from Kafka."""
    one = uniform({"c0": frozenset({"t"})}, {"t": 6}, {})
    two = uniform({"c0": frozenset({"t"}), "c1": frozenset({"t"})}, {"t": 6}, one)
    assert two == {"c0": {"t": frozenset({0, 1, 2})}, "c1": {"t": frozenset({3, 4, 5})}}
    three = uniform({m: frozenset({"t"}) for m in ("c0", "c1", "c2")}, {"t": 6}, two)
    assert three == {"c0": {"t": frozenset({0, 1})}, "c1": {"t": frozenset({3, 4})}, "c2": {"t": frozenset({2, 5})}}


def held(groups: ConsumerGroups, member: str) -> set[tuple[str, int]]:
    """What the broker counts as held by a member: assigned or still being revoked."""
    record = groups.groups[GROUP].members[member]
    return {(t, p) for a in (record.assigned, record.revoking) for t, ps in a.items() for p in ps}


def assert_held_once(groups: ConsumerGroups) -> None:
    members = list(groups.groups[GROUP].members)
    for first, second in itertools.combinations(members, 2):
        assert not held(groups, first) & held(groups, second), (first, second)


def test_a_subscription_change_during_a_revocation_waits_for_it() -> None:
    groups, _ = make({"t": 4, "u": 4})
    join(groups, "a")
    join(groups, "b")
    beat(groups, "a", {"t": set(range(4))})  # asked to revoke two of t
    revoking = groups.groups[GROUP].members["a"].revoking["t"]
    # before it has revoked them it moves to u: now every partition of t is b's target
    groups.heartbeat(Heartbeat(GROUP, "a", 1, subscribed_topics=("u",), owned={"t": frozenset(range(4))}))
    assert groups.groups[GROUP].members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert beat(groups, "b").assignment is None  # a holds all of t still
    assert_held_once(groups)
    kept = frozenset(range(4)) - revoking
    assert beat(groups, "a", {"t": set(kept)}).assignment == {}  # now it must give up the rest of t
    assert beat(groups, "b").assignment == {"t": revoking}
    assert_held_once(groups)
    assert beat(groups, "a", {}).assignment == {"u": frozenset(range(4))}
    assert beat(groups, "b").assignment == {"t": frozenset(range(4))}
    assert_held_once(groups)


def test_a_member_leaving_frees_its_partitions_but_not_those_another_still_revokes() -> None:
    groups, _ = make()
    join(groups, "a")
    join(groups, "b")
    settle(groups)
    join(groups, "c")
    a_before = groups.groups[GROUP].members["a"].assigned["t"]
    beat(groups, "a", {"t": set(a_before)})  # a is asked to give one up
    revoking = groups.groups[GROUP].members["a"].revoking["t"]
    groups.heartbeat(Heartbeat(GROUP, "b", -1))  # b leaves (having revoked all it had)
    beat(groups, "c")
    assert_held_once(groups)
    assert not groups.groups[GROUP].members["c"].assigned.get("t", frozenset()) & revoking
    settle(groups)
    assert_held_once(groups)
    assert set().union(*owned_by(groups).values()) == set(range(6))


def test_a_fenced_member_holds_its_partitions_until_it_rejoins() -> None:
    groups, _ = make()
    join(groups, "a")
    join(groups, "b")
    with pytest.raises(KafkaApiError) as fenced:
        beat(groups, "a", {"t": set(range(6))}, epoch=7)
    assert fenced.value.code is ErrorCode.fenced_member_epoch
    assert beat(groups, "b").assignment is None  # a has not said it let them go
    rejoined = join(groups, "a")  # epoch 0, owning nothing: it dropped everything
    assert rejoined.member_epoch == 2 and len(rejoined.assignment["t"]) == 3
    assert beat(groups, "b").assignment == {"t": frozenset(range(6)) - rejoined.assignment["t"]}
    assert_held_once(groups)


class SimulatedConsumer:
    """A client as KIP-848 wants it: it takes new partitions as soon as a response names them,
    gives up revoked ones now or some heartbeats later, reports what it really holds, drops
    everything when fenced and rejoins with epoch 0."""

    def __init__(self, member_id: str) -> None:
        self.member_id = member_id
        self.epoch = 0
        self.topics: tuple[str, ...] = ("t",)
        self.holds: dict[str, set[int]] = {}
        self.still_revoking: dict[str, set[int]] = {}  # revoked by the broker, not yet let go
        self.joined = False
        self.full_next = True

    def heartbeat(self, groups: ConsumerGroups, rng: random.Random) -> None:
        if self.still_revoking and rng.random() < 0.5:  # the revocation callback finishes
            for topic, partitions in self.still_revoking.items():
                self.holds[topic] = self.holds.get(topic, set()) - partitions
            self.still_revoking = {}
        full = not self.joined or self.full_next
        request = Heartbeat(GROUP, self.member_id, self.epoch if self.joined else 0,
                            rebalance_timeout_ms=30_000 if full else -1,
                            subscribed_topics=self.topics if full or rng.random() < 0.3 else None,
                            owned={t: frozenset(p) for t, p in self.holds.items() if p}
                            if full or rng.random() < 0.7 else None)  # None: not reported
        try:
            result = groups.heartbeat(request)
        except KafkaApiError as exc:
            assert exc.code in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id)
            self.lose_everything()
            return
        self.joined = True
        if rng.random() < 0.1:  # the response is lost: the next request is a full one
            self.full_next = True
            return
        self.full_next = False
        self.epoch = result.member_epoch
        if result.assignment is not None:
            self.take(result.assignment, revoke_now=rng.random() < 0.5)

    def take(self, assignment: dict[str, frozenset[int]], revoke_now: bool) -> None:
        for topic in set(self.holds) | set(assignment):
            revoked = self.holds.get(topic, set()) - assignment.get(topic, frozenset())
            if revoked and not revoke_now:
                self.still_revoking[topic] = self.still_revoking.get(topic, set()) | revoked
            elif revoked:
                self.holds[topic] -= revoked
            self.holds.setdefault(topic, set()).update(assignment.get(topic, frozenset()))

    def leave(self, groups: ConsumerGroups) -> None:
        self.lose_everything()  # a leaving consumer revokes everything first
        try:
            groups.heartbeat(Heartbeat(GROUP, self.member_id, -1))
        except KafkaApiError as exc:
            assert exc.code is ErrorCode.unknown_member_id

    def lose_everything(self) -> None:
        self.holds, self.still_revoking, self.joined, self.epoch, self.full_next = {}, {}, False, 0, True


def assert_no_partition_held_twice(groups: ConsumerGroups, consumers: list[SimulatedConsumer]) -> None:
    """Among consumers the broker still counts as members, no partition is held by two."""
    members = groups.groups[GROUP].members if GROUP in groups.groups else {}
    seen: dict[tuple[str, int], str] = {}
    for consumer in consumers:
        if not consumer.joined or consumer.member_id not in members:
            continue
        for topic, partitions in consumer.holds.items():
            for partition in partitions:
                other = seen.setdefault((topic, partition), consumer.member_id)
                assert other == consumer.member_id, f"{topic}-{partition} held by {other} and {consumer.member_id}"


@pytest.mark.parametrize("seed", range(40))
def test_no_live_member_ever_holds_a_partition_another_holds(seed: int) -> None:
    """Random joins, leaves, subscription changes, lost responses, slow revocations and session
    expiries (the scenario of librdkafka's 0113 u_multiple_subscription_changes)."""
    rng = random.Random(seed)
    groups, clock = make({"t": 8, "u": 4}, session_timeout_ms=6_000)
    consumers = [SimulatedConsumer(f"m{i}") for i in range(5)]
    for _ in range(400):
        consumer = rng.choice(consumers)
        action = rng.random()
        if action < 0.08:
            consumer.leave(groups)
        elif action < 0.2:
            consumer.topics = rng.choice([("t",), ("u",), ("t", "u")])
            consumer.full_next = True
        elif action < 0.25:
            clock.advance(rng.choice([500, 3_000, 7_000]))
        else:
            consumer.heartbeat(groups, rng)
        assert_no_partition_held_twice(groups, consumers)

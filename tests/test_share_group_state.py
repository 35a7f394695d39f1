"""Share group membership (KIP-932) in-process, on a manual clock: joins, epochs, Kafka's
SimpleAssignor, leaving and session expiry, Kafka's errors."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from manual_clock import ManualClock

from logbus.coordinator.records import java_string_hash
from logbus.coordinator.share_group import (
    ShareGroups,
    ShareGroupSettings,
    ShareGroupState,
    ShareHeartbeat,
    simple_assignor,
)
from logbus.errors import KafkaApiError

GROUP = "g"
SESSION_MS = 45_000


def make(**kw: Any) -> tuple[ShareGroups, ManualClock]:
    clock = ManualClock()
    counts = {"a": 2, "b": 3}
    groups = ShareGroups(clock, counts.get, settings=lambda _g: ShareGroupSettings(SESSION_MS, 5000), **kw)
    return groups, clock


def beat(groups: ShareGroups, member: str, epoch: int, topics: tuple[str, ...] | None = None):
    return groups.heartbeat(ShareHeartbeat(GROUP, member, epoch, subscribed_topics=topics))


def refused(call: Any) -> ErrorCode:
    with pytest.raises(KafkaApiError) as error:
        call()
    return error.value.code


def test_a_lone_member_gets_every_partition_and_later_ones_share_them() -> None:
    groups, _ = make()
    first = beat(groups, "m1", 0, ("a",))
    assert (first.member_epoch, first.assignment) == (1, {"a": frozenset({0, 1})})
    second = beat(groups, "m2", 0, ("a",))
    assert second.member_epoch == 2 and len(second.assignment["a"]) == 1  # the partition its id hashes to
    again = beat(groups, "m1", 1)  # the group moved on: the member follows at once, keeping what it had
    assert (again.member_epoch, again.assignment) == (2, None)
    assert groups.get(GROUP).state is ShareGroupState.STABLE


def test_simple_assignor_as_kafka() -> None:
    # ids whose Java String.hashCode (3428, 3427) picks partitions 0 and 3 of four, 0 and 1 of two
    even, odd = "m1", "m0"
    assert (java_string_hash(even), java_string_hash(odd)) == (3428, 3427)
    # homogeneous: hashed first, the rest round robin; every partition has a member
    assert simple_assignor({even: ("t",), odd: ("t",)}, {"t": 4}, {}) == {
        even: {"t": frozenset({0, 1})}, odd: {"t": frozenset({2, 3})}}
    # more members than partitions: several members on one partition
    three = simple_assignor({even: ("t",), odd: ("t",), "m2": ("t",)}, {"t": 2}, {})
    assert all(three.values()) and set().union(*(a["t"] for a in three.values())) == {0, 1}
    # sticky: what a member holds stays; a held partition is not handed round again
    assert simple_assignor({even: ("t",), odd: ("t",)}, {"t": 2}, {even: {"t": frozenset({0, 1})}}) == {
        even: {"t": frozenset({0, 1})}, odd: {"t": frozenset({1})}}
    # heterogeneous: topic by topic among its subscribers; an unsubscribed topic is let go
    assert simple_assignor({even: ("a",), odd: ("a", "b")}, {"a": 2, "b": 1}, {odd: {"c": frozenset({0})}}) == {
        even: {"a": frozenset({0})}, odd: {"a": frozenset({1}), "b": frozenset({0})}}


def test_epoch_and_member_errors() -> None:
    groups, _ = make(max_size=1)
    assert refused(lambda: beat(groups, "m1", 0)) == ErrorCode.invalid_request  # no topics on a join
    assert refused(lambda: beat(groups, "", 0, ("a",))) == ErrorCode.invalid_request
    assert refused(lambda: beat(groups, "m1", -2)) == ErrorCode.invalid_request
    assert refused(lambda: beat(groups, "m1", 1)) == ErrorCode.unknown_member_id
    beat(groups, "m1", 0, ("a",))
    assert refused(lambda: beat(groups, "m1", 7)) == ErrorCode.fenced_member_epoch
    assert refused(lambda: beat(groups, "m2", 0, ("a",))) == ErrorCode.group_max_size_reached


def test_members_leave_and_expire() -> None:
    groups, clock = make()
    beat(groups, "m1", 0, ("a",))
    beat(groups, "m2", 0, ("a",))
    assert beat(groups, "m1", -1).member_epoch == -1
    assert list(groups.get(GROUP).members) == ["m2"] and groups.get(GROUP).target == {"m2": {"a": frozenset({0, 1})}}
    clock.advance(SESSION_MS)  # m2 sent nothing since joining
    assert groups.get(GROUP).state is ShareGroupState.EMPTY


def test_heartbeats_keep_a_member() -> None:
    groups, clock = make()
    epoch = beat(groups, "m1", 0, ("a",)).member_epoch
    for _ in range(3):
        clock.advance(SESSION_MS - 1)
        epoch = beat(groups, "m1", epoch).member_epoch
    assert list(groups.get(GROUP).members) == ["m1"]


def test_a_group_of_another_type_keeps_its_id() -> None:
    groups, _ = make(held_by_other_type=lambda group: group == GROUP)
    assert refused(lambda: beat(groups, "m1", 0, ("a",))) == ErrorCode.group_id_not_found

"""Share group membership (KIP-932) in-process, on a manual clock: joins, epochs, assignment of every
subscribed partition, leaving and session expiry (the records' release is told), Kafka's errors."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from test_share_partition_unit import ManualClock

from logbus.coordinator.share_group import ShareGroups, ShareGroupSettings, ShareGroupState, ShareHeartbeat
from logbus.errors import KafkaApiError

GROUP = "g"
SESSION_MS = 45_000


def make(**kw: Any) -> tuple[ShareGroups, ManualClock, list[tuple[str, str]]]:
    clock = ManualClock()
    left: list[tuple[str, str]] = []
    counts = {"a": 2, "b": 3}
    groups = ShareGroups(clock, counts.get, settings=lambda _g: ShareGroupSettings(SESSION_MS, 5000),
                         on_member_left=lambda group, member: left.append((group, member)), **kw)
    return groups, clock, left


def beat(groups: ShareGroups, member: str, epoch: int, topics: tuple[str, ...] | None = None):
    return groups.heartbeat(ShareHeartbeat(GROUP, member, epoch, subscribed_topics=topics))


def refused(call: Any) -> ErrorCode:
    with pytest.raises(KafkaApiError) as error:
        call()
    return error.value.code


def test_every_member_gets_every_partition_of_its_topics() -> None:
    groups, _, _ = make()
    first = beat(groups, "m1", 0, ("a",))
    assert (first.member_epoch, first.assignment) == (1, {"a": frozenset({0, 1})})
    second = beat(groups, "m2", 0, ("a", "b"))
    assert (second.member_epoch, second.assignment) == (2, {"a": frozenset({0, 1}), "b": frozenset({0, 1, 2})})
    again = beat(groups, "m1", 1)  # the group moved on: the member follows at once, same partitions
    assert (again.member_epoch, again.assignment) == (2, None)
    assert groups.get(GROUP).state is ShareGroupState.STABLE


def test_epoch_and_member_errors() -> None:
    groups, _, _ = make(max_size=1)
    assert refused(lambda: beat(groups, "m1", 0)) == ErrorCode.invalid_request  # no topics on a join
    assert refused(lambda: beat(groups, "", 0, ("a",))) == ErrorCode.invalid_request
    assert refused(lambda: beat(groups, "m1", -2)) == ErrorCode.invalid_request
    assert refused(lambda: beat(groups, "m1", 1)) == ErrorCode.unknown_member_id
    beat(groups, "m1", 0, ("a",))
    assert refused(lambda: beat(groups, "m1", 7)) == ErrorCode.fenced_member_epoch
    assert refused(lambda: beat(groups, "m2", 0, ("a",))) == ErrorCode.group_max_size_reached


def test_leaving_and_expiring_members_are_told() -> None:
    groups, clock, left = make()
    beat(groups, "m1", 0, ("a",))
    beat(groups, "m2", 0, ("a",))
    assert beat(groups, "m1", -1).member_epoch == -1
    assert left == [(GROUP, "m1")]
    clock.advance(SESSION_MS)  # m2 sent nothing since joining
    assert left == [(GROUP, "m1"), (GROUP, "m2")]
    assert groups.get(GROUP).state is ShareGroupState.EMPTY


def test_heartbeats_keep_a_member() -> None:
    groups, clock, left = make()
    epoch = beat(groups, "m1", 0, ("a",)).member_epoch
    for _ in range(3):
        clock.advance(SESSION_MS - 1)
        epoch = beat(groups, "m1", epoch).member_epoch
    assert left == []


def test_a_group_of_another_type_keeps_its_id() -> None:
    groups, _, _ = make(held_by_other_type=lambda group: group == GROUP)
    assert refused(lambda: beat(groups, "m1", 0, ("a",))) == ErrorCode.group_id_not_found

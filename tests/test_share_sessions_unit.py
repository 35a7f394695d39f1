"""Share sessions (KIP-932) in-process: epochs, the session limit, replacement on a new epoch 0,
and eviction with the connection that opened them."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from kio.schema.errors import ErrorCode

from logbus.broker.share_sessions import FINAL_EPOCH, MAX_EPOCH, ShareSessionCache
from logbus.errors import KafkaApiError

TOPIC = uuid.uuid4()


def refused(call: Callable[[], object]) -> ErrorCode:
    with pytest.raises(KafkaApiError) as error:
        call()
    return error.value.code


def test_epochs_follow_one_another_and_wrap_to_one() -> None:
    cache = ShareSessionCache(10)
    session = cache.open("g", "m", [(TOPIC, 0)], connection="c1")
    assert refused(lambda: cache.current("g", "m", 2)) == ErrorCode.invalid_share_session_epoch
    cache.update(cache.current("g", "m", 1), [(TOPIC, 1)], [(TOPIC, 0)])
    assert list(session.partitions) == [(TOPIC, 1)] and session.epoch == 2
    session.epoch = MAX_EPOCH
    session.advance()
    assert session.epoch == 1
    assert cache.current("g", "m", FINAL_EPOCH) is session  # the final epoch closes whatever the count
    assert refused(lambda: cache.current("g", "other", 1)) == ErrorCode.share_session_not_found


def test_limit_and_replacement() -> None:
    cache = ShareSessionCache(1)
    first = cache.open("g", "m", [], connection="c1")
    second = cache.open("g", "m", [], connection="c2")  # the same member opens again: replaced, no limit
    assert cache.sessions == {("g", "m"): second} and first is not second
    assert refused(lambda: cache.open("g", "n", [], connection="c3")) == ErrorCode.share_session_limit_reached


def test_a_closed_connection_evicts_only_the_sessions_it_opened() -> None:
    evicted = []
    cache = ShareSessionCache(10, on_evicted=lambda session: evicted.append(session.member_id))
    cache.open("g", "m1", [], connection="c1")
    cache.open("g", "m2", [], connection="c2")
    cache.open("g", "m1", [], connection="c3")  # m1 moved to another connection
    cache.disconnected("c1")
    assert evicted == [] and set(cache.sessions) == {("g", "m1"), ("g", "m2")}
    cache.disconnected("c3")
    assert evicted == ["m1"] and set(cache.sessions) == {("g", "m2")}

"""The transaction coordinator in-process, driven by a test clock.

The coordinator runs over a real `__transaction_state` (metadata store, log manager and
partitions in a tmp dir, as the broker builds them) and the `ManualClock` of the group tests:
timeouts and expiry fire when a test advances time. Markers go to a recorder standing in for
the partitions' leaders (the marker path itself is tested against real brokers in
test_txn_markers.py and test_transactions.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from test_group_state import ManualClock, hosted_partitions, in_loop, until

from logbus.config import BrokerConfig
from logbus.coordinator.txn_coordinator import TransactionCoordinator, TxnConfig
from logbus.coordinator.txn_metadata import MAX_EPOCH, TxnError
from logbus.coordinator.txn_records import TxnStatus
from logbus.coordinator.txn_store import TxnStateTopic
from logbus.coordinator.txn_verification import TxnVerifier
from logbus.errors import InvalidProducerEpochError, InvalidTxnStateError

TXN = "txn"
TIMEOUT_MS = 60_000
PARTITIONS = frozenset({("orders", 0), ("orders", 1), ("audit", 0)})


@dataclass
class Markers:
    """What the coordinator asked to be written: (producer id, epoch, coordinator epoch, commit, partitions)."""

    written: list[tuple[int, int, int, bool, frozenset[tuple[str, int]]]] = field(default_factory=list)
    answer: ErrorCode = ErrorCode.none

    async def write(self, producer_id: int, epoch: int, coordinator_epoch: int, commit: bool,
                    partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        chosen = frozenset(partitions)
        self.written.append((producer_id, epoch, coordinator_epoch, commit, chosen))
        return dict.fromkeys(chosen, self.answer)


@dataclass
class Env:
    coordinator: TransactionCoordinator
    clock: ManualClock
    markers: Markers

    def state(self, transactional_id: str = TXN) -> TxnStatus:
        return self.coordinator.txns[transactional_id].status

    async def settled(self, status: TxnStatus, transactional_id: str = TXN) -> None:
        await until(lambda: self.coordinator.txns[transactional_id].status == status, status.name)


@contextlib.asynccontextmanager
async def txn_env(data_dir: Path, clock: ManualClock | None = None, markers: Markers | None = None,
                  **overrides: str) -> AsyncIterator[Env]:
    config = BrokerConfig({"transaction.state.log.num.partitions": "2",
                           **{key.replace("_", "."): value for key, value in overrides.items()}})
    clock = clock or ManualClock()
    markers = markers or Markers()
    async with hosted_partitions(data_dir, config) as (metadata, replicas):
        store = TxnStateTopic(config, metadata, replicas, clock)
        await store.create()
        coordinator = TransactionCoordinator(TxnConfig.from_broker_config(config), store, clock,
                                             allocate_producer_id=metadata.allocate_producer_id,
                                             write_markers=markers.write)
        coordinator.start()
        await until(lambda: coordinator.serves(TXN), "the state topic loaded")
        try:
            yield Env(coordinator, clock, markers)
        finally:
            coordinator.stop()


async def refused(code: ErrorCode, call) -> None:  # noqa: ANN001 - an awaitable or a plain call's result
    with pytest.raises(TxnError) as raised:
        await call
    assert raised.value.code == code


@in_loop
async def test_each_init_bumps_the_epoch_and_fences_the_previous_producer(tmp_path: Path) -> None:
    async with txn_env(tmp_path) as env:
        producer_id, epoch = await env.coordinator.init_producer_id(TXN, TIMEOUT_MS)
        assert epoch == 0
        assert await env.coordinator.init_producer_id(TXN, TIMEOUT_MS) == (producer_id, 1)
        await refused(ErrorCode.producer_fenced, env.coordinator.add_partitions(TXN, producer_id, 0, PARTITIONS))
        await refused(ErrorCode.invalid_producer_id_mapping,
                      env.coordinator.add_partitions(TXN, producer_id + 1, 1, PARTITIONS))
        await env.coordinator.add_partitions(TXN, producer_id, 1, PARTITIONS)
        assert env.state() == TxnStatus.ONGOING


@in_loop
async def test_a_commit_writes_markers_to_every_partition_then_completes(tmp_path: Path) -> None:
    async with txn_env(tmp_path) as env:
        producer_id, epoch = await env.coordinator.init_producer_id(TXN, TIMEOUT_MS)
        await env.coordinator.add_partitions(TXN, producer_id, epoch, frozenset({("orders", 0)}))
        await env.coordinator.add_partitions(TXN, producer_id, epoch, PARTITIONS)
        await env.coordinator.end_txn(TXN, producer_id, epoch, commit=True)
        await env.settled(TxnStatus.COMPLETE_COMMIT)
        assert env.markers.written == [(producer_id, epoch, 0, True, PARTITIONS)]
        assert env.coordinator.txns[TXN].partitions == frozenset()
        await env.coordinator.end_txn(TXN, producer_id, epoch, commit=True)  # a retry succeeds
        await refused(ErrorCode.invalid_txn_state, env.coordinator.end_txn(TXN, producer_id, epoch, commit=False))


@in_loop
async def test_ending_a_transaction_that_never_started_is_invalid(tmp_path: Path) -> None:
    async with txn_env(tmp_path) as env:
        producer_id, epoch = await env.coordinator.init_producer_id(TXN, TIMEOUT_MS)
        await refused(ErrorCode.invalid_txn_state, env.coordinator.end_txn(TXN, producer_id, epoch, commit=True))
        await refused(ErrorCode.invalid_producer_id_mapping, env.coordinator.end_txn("unknown", 1, 0, commit=True))


@in_loop
async def test_init_during_an_open_transaction_aborts_it_with_a_fencing_epoch(tmp_path: Path) -> None:
    async with txn_env(tmp_path) as env:
        producer_id, epoch = await env.coordinator.init_producer_id(TXN, TIMEOUT_MS)
        await env.coordinator.add_partitions(TXN, producer_id, epoch, PARTITIONS)
        await refused(ErrorCode.concurrent_transactions, env.coordinator.init_producer_id(TXN, TIMEOUT_MS))
        await env.settled(TxnStatus.COMPLETE_ABORT)
        assert env.markers.written == [(producer_id, epoch + 1, 0, False, PARTITIONS)]
        assert await env.coordinator.init_producer_id(TXN, TIMEOUT_MS) == (producer_id, epoch + 2)


@in_loop
async def test_a_transaction_open_past_its_timeout_is_aborted(tmp_path: Path) -> None:
    async with txn_env(tmp_path, transaction_abort_timed_out_transaction_cleanup_interval_ms="1000") as env:
        producer_id, epoch = await env.coordinator.init_producer_id(TXN, 5000)
        await env.coordinator.add_partitions(TXN, producer_id, epoch, PARTITIONS)
        await env.clock.advance(4000)
        assert env.state() == TxnStatus.ONGOING
        await env.clock.advance(2000)
        await env.settled(TxnStatus.COMPLETE_ABORT)
        assert env.markers.written == [(producer_id, epoch + 1, 0, False, PARTITIONS)]
        await refused(ErrorCode.producer_fenced, env.coordinator.end_txn(TXN, producer_id, epoch, commit=True))


@in_loop
async def test_a_timeout_over_the_maximum_is_refused(tmp_path: Path) -> None:
    async with txn_env(tmp_path, transaction_max_timeout_ms="10000") as env:
        await refused(ErrorCode.invalid_transaction_timeout, env.coordinator.init_producer_id(TXN, 10001))
        await refused(ErrorCode.invalid_transaction_timeout, env.coordinator.init_producer_id(TXN, 0))
        assert TXN not in env.coordinator.txns


@in_loop
async def test_idle_ids_expire(tmp_path: Path) -> None:
    async with txn_env(tmp_path, transactional_id_expiration_ms="60000",
                       transaction_remove_expired_transaction_cleanup_interval_ms="10000") as env:
        await env.coordinator.init_producer_id(TXN, TIMEOUT_MS)
        await env.clock.advance(50_000)
        assert TXN in env.coordinator.txns
        await env.clock.advance(20_000)
        await until(lambda: TXN not in env.coordinator.txns, "the id expired")
        await refused(ErrorCode.transactional_id_not_found, _describe(env))
    async with txn_env(tmp_path) as env:
        assert TXN not in env.coordinator.txns  # the tombstone is what was loaded


async def _describe(env: Env) -> None:
    env.coordinator.describe(TXN)


@in_loop
async def test_a_recovering_producer_may_bump_only_its_current_epoch(tmp_path: Path) -> None:
    async with txn_env(tmp_path) as env:
        producer_id, epoch = await env.coordinator.init_producer_id(TXN, TIMEOUT_MS)
        assert await env.coordinator.init_producer_id(TXN, TIMEOUT_MS, producer_id, epoch) == (producer_id, epoch + 1)
        # the same request again (its answer lost): the epoch it already got
        assert await env.coordinator.init_producer_id(TXN, TIMEOUT_MS, producer_id, epoch) == (producer_id, epoch + 1)
        await refused(ErrorCode.producer_fenced, env.coordinator.init_producer_id(TXN, TIMEOUT_MS, producer_id, 7))
        await refused(ErrorCode.producer_fenced,
                      env.coordinator.init_producer_id(TXN, TIMEOUT_MS, producer_id + 1, epoch + 1))


@in_loop
async def test_an_exhausted_epoch_moves_to_a_new_producer_id(tmp_path: Path) -> None:
    async with txn_env(tmp_path) as env:
        producer_id, _ = await env.coordinator.init_producer_id(TXN, TIMEOUT_MS)
        env.coordinator.txns[TXN].producer_epoch = MAX_EPOCH - 1
        new_id, epoch = await env.coordinator.init_producer_id(TXN, TIMEOUT_MS)
        assert new_id != producer_id and epoch == 0


@in_loop
async def test_a_new_coordinator_completes_what_the_old_one_prepared(tmp_path: Path) -> None:
    stuck = Markers(answer=ErrorCode.transaction_coordinator_fenced)  # markers never land: left PrepareCommit
    async with txn_env(tmp_path, markers=stuck) as env:
        producer_id, epoch = await env.coordinator.init_producer_id(TXN, TIMEOUT_MS)
        await env.coordinator.add_partitions(TXN, producer_id, epoch, PARTITIONS)
        await env.coordinator.end_txn(TXN, producer_id, epoch, commit=True)
        await until(lambda: len(stuck.written) == 1, "the marker attempt")
        assert env.state() == TxnStatus.PREPARE_COMMIT
    async with txn_env(tmp_path) as env:
        await env.settled(TxnStatus.COMPLETE_COMMIT)
        assert env.markers.written == [(producer_id, epoch, 0, True, PARTITIONS)]


@in_loop
async def test_verification_answers_per_partition(tmp_path: Path) -> None:
    async with txn_env(tmp_path) as env:
        producer_id, epoch = await env.coordinator.init_producer_id(TXN, TIMEOUT_MS)
        await env.coordinator.add_partitions(TXN, producer_id, epoch, frozenset({("orders", 0)}))
        answers = env.coordinator.verify_partitions(TXN, producer_id, epoch, [("orders", 0), ("orders", 1)])
        assert answers == {("orders", 0): ErrorCode.none, ("orders", 1): ErrorCode.invalid_txn_state}
        with pytest.raises(TxnError) as raised:
            env.coordinator.verify_partitions(TXN, producer_id, epoch - 1, [("orders", 0)])
        assert raised.value.code == ErrorCode.producer_fenced


@in_loop
async def test_the_verifier_raises_a_coordinators_answer_as_a_produce_refusal(tmp_path: Path) -> None:
    async with txn_env(tmp_path) as env:
        verifier = TxnVerifier(env.coordinator, clients=None, enabled=True)  # (no remote coordinator asked)
        producer_id, epoch = await env.coordinator.init_producer_id(TXN, TIMEOUT_MS)
        await env.coordinator.add_partitions(TXN, producer_id, epoch, frozenset({("orders", 0)}))
        assert await verifier.verify(TXN, producer_id, epoch, "orders", 0) is None
        with pytest.raises(InvalidTxnStateError, match="orders-1 is not in the transaction of 'txn'"):
            await verifier.verify(TXN, producer_id, epoch, "orders", 1)
        with pytest.raises(InvalidProducerEpochError):  # PRODUCER_FENCED, as a produce gives it
            await verifier.verify(TXN, producer_id, epoch - 1, "orders", 0)
        with pytest.raises(InvalidTxnStateError):  # INVALID_PRODUCER_ID_MAPPING
            await verifier.verify("unknown", producer_id, epoch, "orders", 0)
        assert await TxnVerifier(env.coordinator, None, enabled=False).verify("unknown", 1, 0, "orders", 1) is None


@in_loop
async def test_list_filters_by_state_producer_and_pattern(tmp_path: Path) -> None:
    async with txn_env(tmp_path) as env:
        ids = {name: await env.coordinator.init_producer_id(name, TIMEOUT_MS) for name in ("app-1", "app-2", "other")}
        producer_id, epoch = ids["app-2"]
        await env.coordinator.add_partitions("app-2", producer_id, epoch, PARTITIONS)
        names = lambda txns: sorted(t.transactional_id for t in txns)  # noqa: E731
        assert names(env.coordinator.list_transactions(set(), set())) == ["app-1", "app-2", "other"]
        assert names(env.coordinator.list_transactions({"Ongoing"}, set())) == ["app-2"]
        assert names(env.coordinator.list_transactions(set(), {ids["other"][0]})) == ["other"]
        assert names(env.coordinator.list_transactions(set(), set(), id_pattern="app-.")) == ["app-1", "app-2"]
        assert names(env.coordinator.list_transactions(set(), set(), id_pattern="app")) == []
        await env.clock.advance(5000)
        assert names(env.coordinator.list_transactions(set(), set(), min_duration_ms=5000)) == ["app-2"]


@in_loop
async def test_a_producer_naming_an_id_this_coordinator_forgot_starts_afresh(tmp_path: Path) -> None:
    async with txn_env(tmp_path) as env:
        producer_id, epoch = await env.coordinator.init_producer_id(TXN, TIMEOUT_MS, producer_id=4242, producer_epoch=7)
        assert epoch == 0 and producer_id != 4242

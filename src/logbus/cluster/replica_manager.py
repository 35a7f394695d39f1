"""The partitions this broker hosts, kept in step with the metadata store.

Topic changes in the metadata store (created, grown, reconfigured, deleted) arrive as
listener calls; this class opens or removes the matching logs. A reconfigured topic's logs get
the new `LogConfig` at once (retention, roll, flush, cleanup policy are read from it on each
use). A deleted topic's partitions leave the map immediately and their files go in the
background; a topic created again under the same name opens its logs only once the old files
are gone. API handlers reach partitions only through here: network -> api handler -> replica
manager -> partition -> log.

The data plane, as Kafka's ReplicaManager: `append_records` is the one append pipeline (Produce,
the coordinators' internal topics and transaction markers all append through it), with
`wait_for_replicas` its delayed part for acks=all (Kafka's DelayedProduce); `delete_records`
moves a leader's log start, `wait_for_low_watermark` waits for the live replicas to follow
(DelayedDeleteRecords); each raises its refusal (errors.py);
`partition_to_read` is the partition a fetch reads, with Kafka's epoch and role checks.

When a log dir fails, its partitions go offline here (Kafka's HostedPartition.Offline): they
leave `partitions` (no fetching, leading, ISR checks or checkpoints), requests for them answer
KAFKA_STORAGE_ERROR (`is_offline`), and the metadata store is told, so that the controller
moves their leadership to the rest of the ISR. They stay offline until the broker restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ..config import BrokerConfig, LogConfig, log_config
from ..errors import (
    KafkaApiError,
    KafkaStorageError,
    NotLeaderError,
    OffsetOutOfRangeError,
)
from ..logging_config import RecurringWarning
from ..security.listeners import ListenerEndpoint
from ..storage.log import AppendInfo, PartitionLog
from ..storage.manager import LogManager
from .appends import AppendResult, Entry, append_to_leader
from .fetcher import FetcherConfig, FetcherManager
from .isr_changes import IsrChangeBatcher
from .metadata import (
    IsrChange,
    MetadataStore,
    MetadataWriteError,
    PartitionState,
    StalePartitionStateError,
    TopicMetadata,
    UnknownTopicError,
)
from .partition import Partition

if TYPE_CHECKING:
    from .sasl_login import InterBrokerLogin

log = logging.getLogger(__name__)

ISR_RETRY_BACKOFF_S = 1.0  # a failed ISR change is asked for again after this, not at the next fetch
HIGH_WATERMARK = -1  # DeleteRecords' offset meaning "up to the high watermark"
OPEN_WAIT_S = 30.0  # a creation waits at least this long for its replicas here (as for the metadata view)
OPEN_BATCH = 1000  # new replicas' logs created together: the first are served while the rest are created
REPORT_ATTEMPTS = 300  # one a second: offline replicas reach a metadata store back within 5 minutes

LeadershipListener = Callable[[Partition, bool], None]
MarkerListener = Callable[[Partition, int, bool], None]


@dataclass(frozen=True, slots=True)
class DeletedRecords:
    """A leader's log start moved by DeleteRecords: the new low watermark the replicas must reach."""

    partition: Partition
    low_watermark: int


class ReplicaManager:
    def __init__(self, broker_id: int, config: BrokerConfig, metadata: MetadataStore,
                 logs: LogManager, inter_broker_listener: str = "PLAINTEXT",
                 inter_broker_tls: ssl.SSLContext | None = None,
                 inter_broker_sasl: InterBrokerLogin | None = None) -> None:
        """`inter_broker_listener`: the listener whose endpoint followers fetch from, over TLS
        with `inter_broker_tls` when it is an SSL listener, logging in with `inter_broker_sasl`
        when it is a SASL one."""
        self.broker_id = broker_id
        self.inter_broker_listener = inter_broker_listener
        self.config = config
        self.metadata = metadata
        self.logs = logs
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._log_configs: dict[str, tuple[dict[str, str], LogConfig]] = {}  # topic -> (its configs, log config)
        self._drops: dict[str, asyncio.Task] = {}  # topic -> removal of its logs' files
        self._background: set[asyncio.Task] = set()
        self._leadership_listeners: list[LeadershipListener] = []
        self._marker_listeners: list[MarkerListener] = []
        self.max_lag_s = config["replica.lag.time.max.ms"] / 1000
        self.fetchers = FetcherManager(FetcherConfig(
            broker_id, config["replica.fetch.max.bytes"], config["replica.fetch.response.max.bytes"],
            config["replica.fetch.wait.max.ms"], config["replica.fetch.min.bytes"], config["replica.fetch.backoff.ms"],
            config["replica.socket.timeout.ms"],
        ), config["num.replica.fetchers"], self._address_of, inter_broker_tls, inter_broker_sasl)
        self._isr_check: asyncio.TimerHandle | None = None
        self._isr_change_failed = RecurringWarning(log)
        self.isr_changes: IsrChangeBatcher[Partition] = IsrChangeBatcher(metadata.alter_partitions, self._isr_written)
        self.offline: dict[tuple[str, int], Partition] = {}  # replicas in failed log dirs
        self._preloaded: dict[tuple[str, int], PartitionLog] = {}  # loaded at start, not yet a partition
        self._to_open: dict[tuple[str, int], None] = {}  # new replicas whose logs wait to be created, in order
        self._opening: set[tuple[str, int]] = set()  # the replicas whose logs are being created now
        self._opener: asyncio.Task | None = None  # _open_queued, while replicas wait or are being opened
        self._loading: asyncio.Task | None = None  # _load_and_follow, from start on
        self.loaded = asyncio.Event()  # every log hosted at start is loaded: the partitions are served
        self._reporting = asyncio.Lock()  # offline replicas reach the metadata store in order
        logs.add_dir_failure_listener(self._on_dir_failure)

    def add_leadership_listener(self, listener: LeadershipListener) -> None:
        """Call `listener(partition, True)` when this broker becomes the leader of a partition (at
        start-up too, for each it leads), `listener(partition, False)` when it stops leading one
        (another broker leads, the partition went offline or was deleted)."""
        self._leadership_listeners.append(listener)

    def _announce_leadership(self, partition: Partition, leads: bool) -> None:
        for listener in self._leadership_listeners:
            listener(partition, leads)

    def add_marker_listener(self, listener: MarkerListener) -> None:
        """Call `listener(partition, producer_id, commit)` once a transaction marker written here as
        leader is replicated (the ISR has it): the group coordinator makes a producer's pending
        transactional offset commits visible, or drops them, when one lands on `__consumer_offsets`
        (Kafka's GroupCoordinator.scheduleHandleTxnCompletion)."""
        self._marker_listeners.append(listener)

    def marker_written(self, partition: Partition, producer_id: int, commit: bool) -> None:
        """Announce a replicated marker to the marker listeners."""
        for listener in self._marker_listeners:
            listener(partition, producer_id, commit)

    def start(self, registration: asyncio.Future[None] | None = None) -> None:
        """Load every hosted partition's log in the background (`_load_and_follow`) and report
        offline replicas; the broker serves meanwhile (see `loaded`). `registration`: the
        broker's registration, which must succeed before a partition is taken up."""
        self.logs.high_watermark_source = self.high_watermarks
        self._loading = self._run_in_background(self._load_and_follow(registration))
        self._run_in_background(self._report_offline())  # clears what an earlier run reported

    async def _load_and_follow(self, registration: asyncio.Future[None] | None) -> None:
        """Open every hosted partition's log (recovering if needed) in the I/O threads, then,
        once the broker is registered, take up the partitions as the metadata is now and
        follow its changes.

        Unlike Kafka, whose broker loads every log before it serves, the listeners answer while
        the logs load: a request for a partition not loaded yet finds none here and answers
        NOT_LEADER_OR_FOLLOWER, which clients retry; nothing is served from a log not loaded.
        As in Kafka, loading does not wait for the registration: a broker restarted right
        after a crash waits up to the session timeout for its old registration to expire, and
        recovers its logs meanwhile. No partition is led or followed before it is registered.
        """
        began = time.monotonic()
        topics = self.metadata.topics()
        hosted = {
            (name, index): self.log_config_for(topic)
            for name, topic in topics.items()
            for index, state in enumerate(topic.partitions)
            if self.broker_id in state.replicas
        }
        self.logs.remove_orphan_dirs(set(hosted))
        try:
            loaded = await self.logs.load_logs((*key, config) for key, config in hosted.items())
        except Exception:  # a bug: no partition is served, and the operator is told why
            log.exception("loading the logs failed; this broker serves no partition until it restarts")
            raise
        for log_ in loaded:
            self._preloaded[(log_.topic, log_.partition)] = log_
        log.info("loaded %d logs in %.1f s", len(hosted), time.monotonic() - began)
        if registration is not None and not await _succeeded(registration):
            return  # the broker does not start (Broker.start raises the registration's error)
        for topic in self.metadata.topics().values():
            self._sync_topic(topic)
        self.metadata.add_listener(self._on_topic_change)
        self.metadata.add_broker_listener(lambda _brokers: self.fetchers.brokers_changed())
        self._schedule_isr_check()
        gone = list(self._preloaded)  # hosted no more: deleted or moved while the logs loaded
        self._preloaded.clear()
        self.loaded.set()
        await self._delete_logs(gone, [])

    async def stop(self) -> None:
        if self._loading is not None and not self._loading.done():
            self._loading.cancel()
            await asyncio.wait([self._loading])
        if self._opener is not None:
            self._opener.cancel()
            await asyncio.wait([self._opener])
        if self._isr_check is not None:
            self._isr_check.cancel()
        await self.isr_changes.stop()
        await self.fetchers.stop()

    def _address_of(self, broker_id: int) -> ListenerEndpoint | None:
        found = next((b for b in self.metadata.brokers() if b.broker_id == broker_id), None)
        return None if found is None else found.endpoint(self.inter_broker_listener)

    def _schedule_isr_check(self) -> None:
        """Kafka's isr-expiration task: every replica.lag.time.max.ms / 2."""
        self._isr_check = asyncio.get_running_loop().call_later(self.max_lag_s / 2, self._check_isrs)

    def _check_isrs(self) -> None:
        for partition in list(self.partitions.values()):
            partition.shrink_isr_if_lagging(self.max_lag_s)
        self._schedule_isr_check()

    def _alter_isr(self, partition: Partition, isr: list[int]) -> None:
        """Ask the metadata store for a new ISR, conditional on the state the leader saw (batched
        with the other partitions' changes: `IsrChangeBatcher`). A broker in controlled shutdown
        is not taken in: it still fetches until it stops, and once in the ISR it would hold
        acks=all sends for replica.lag.time.max.ms after it is gone."""
        state = partition.state
        if (set(isr) - set(state.isr)) & self.metadata.shutting_down_brokers():
            partition.isr_change_failed(maybe_written=False)
            return
        self.isr_changes.submit(partition, IsrChange(partition.topic, partition.index, state.leader_epoch,
                                                     state.partition_epoch, list(isr)))

    def _isr_written(self, partition: Partition, change: IsrChange, answer: PartitionState | BaseException) -> None:
        if isinstance(answer, StalePartitionStateError | UnknownTopicError):
            partition.isr_change_failed(maybe_written=False)  # the fresh state arrives through the listener
            return
        if isinstance(answer, MetadataWriteError):  # e.g. ZooKeeper out of reach
            self._isr_change_failed("cannot change the ISR of %s to %s (retried every %g s): %s", partition,
                                    change.isr, ISR_RETRY_BACKOFF_S, answer)
            partition.isr_change_failed(maybe_written=True, retry_after_s=ISR_RETRY_BACKOFF_S)
            return
        if isinstance(answer, BaseException):  # a bug: its traceback, and the change tried again later
            log.error("cannot change the ISR of %s to %s", partition, change.isr, exc_info=answer)
            partition.isr_change_failed(maybe_written=True, retry_after_s=ISR_RETRY_BACKOFF_S)
            return
        if self.partitions.get((partition.topic, partition.index)) is partition \
                and partition.state.partition_epoch < answer.partition_epoch:
            partition.update_state(answer)
        log.info("%s: ISR -> %s (partition epoch %d)", partition, change.isr, answer.partition_epoch)

    def log_config_for(self, topic: TopicMetadata) -> LogConfig:
        """The topic's effective log config, worked out again only when its configs (or the
        broker's: `reconfigure_logs`) changed, not on each of its partitions' ISR changes."""
        known = self._log_configs.get(topic.name)
        if known is not None and known[0] == topic.configs:
            return known[1]
        config = log_config(self.config, topic.configs)
        self._log_configs[topic.name] = (dict(topic.configs), config)
        return config

    def reconfigure_logs(self) -> None:
        """The broker's config changed (a dynamic default such as log.retention.ms): every hosted
        log takes its topic's new effective config."""
        self._log_configs.clear()
        if not self.loaded.is_set():
            return  # the partitions are taken up, with the new configs, once the logs are loaded
        for topic in self.metadata.topics().values():
            if topic.name not in self._drops:
                self._sync_topic(topic)

    def _on_topic_change(self, name: str, topic: TopicMetadata | None) -> None:
        if topic is None:
            self._log_configs.pop(name, None)
            self._drop_topic(name)
        elif name in self._drops:
            self._run_in_background(self._sync_after_drop(name))
        else:
            self._sync_topic(topic)

    def _sync_topic(self, topic: TopicMetadata) -> None:
        config = self.log_config_for(topic)
        for index, state in enumerate(topic.partitions):
            if self.broker_id not in state.replicas:
                self._stop_hosting(topic.name, index)
                continue
            key = (topic.name, index)
            if key in self.offline or key in self._opening:
                continue  # an opening replica is taken up with the state current when its log is there
            existing = self.partitions.get(key)
            if existing is not None and existing.state == state and existing.log.config == config:
                continue  # another partition of the topic changed
            if existing is not None:
                existing.log.config = config
                led = existing.is_leader
                existing.update_state(state)
                if existing.is_leader != led:
                    self._announce_leadership(existing, existing.is_leader)
                self._set_role(existing)
                continue
            preloaded = self._preloaded.pop(key, None)
            if preloaded is not None and self.logs.logs.get(key) is preloaded:  # its dir did not fail since
                preloaded.config = config
                self._add_partition(topic, index, preloaded, state)
            else:
                self._queue_open(key)

    def _add_partition(self, topic: TopicMetadata, index: int, log_: PartitionLog, state: PartitionState) -> None:
        """Serve the replica whose log is open: lead it or follow its leader."""
        key = (topic.name, index)
        hw = self.logs.high_watermarks.get(key, log_.log_end_offset)
        partition = Partition(topic.name, index, topic.topic_id, self.broker_id, log_, state, hw, self._alter_isr)
        self.partitions[key] = partition
        if partition.is_leader:
            self._announce_leadership(partition, True)
        self._set_role(partition)

    def _queue_open(self, key: tuple[str, int]) -> None:
        self._to_open[key] = None
        if self._opener is None:
            self._opener = self._run_in_background(self._open_queued())

    async def _open_queued(self) -> None:
        """Create (or open) the logs of new replicas in batches, in the I/O threads, and serve
        each once its log is there (Kafka's makeLeaders/makeFollowers for a LeaderAndIsr
        request). On the event loop, each new log's directory and files took milliseconds, so a
        10,000-partition CreateTopics held every request and metadata change behind them for
        tens of seconds; the replicas of topics created together now open together. A replica
        is not served before its log exists; a log that cannot be created (its dir is offline)
        is logged and opens on the next change or restart, as before."""
        try:
            while self._to_open:
                keys = list(self._to_open)[:OPEN_BATCH]
                for key in keys:
                    del self._to_open[key]
                self._opening = set(keys)
                try:
                    opened = await self.logs.load_logs(self._still_wanted(keys))
                finally:
                    self._opening = set()
                for log_ in opened:
                    self._take_up(log_)
                if len(keys) > 1:
                    log.info("opened the logs of %d new replicas together", len(opened))
        finally:
            self._opener = None

    def _still_wanted(self, keys: list[tuple[str, int]]) -> list[tuple[str, int, LogConfig]]:
        """Of the queued replicas, those still hosted here and not served yet, with their log config."""
        wanted = []
        for name, index in keys:
            topic = self.metadata.topic(name)
            if topic is None or name in self._drops or index >= len(topic.partitions) \
                    or self.broker_id not in topic.partitions[index].replicas \
                    or (name, index) in self.partitions or (name, index) in self.offline:
                continue
            wanted.append((name, index, self.log_config_for(topic)))
        return wanted

    def _take_up(self, log_: PartitionLog) -> None:
        """Serve a replica whose log was just opened, with the metadata as it is now. When its
        topic went meanwhile, the topic's drop deletes the log (it waits for this batch); when
        the replica moved away, its log goes here."""
        name, index = key = (log_.topic, log_.partition)
        if name in self._drops:
            return
        topic = self.metadata.topic(name)
        if topic is None or index >= len(topic.partitions) or self.broker_id not in topic.partitions[index].replicas:
            self._run_in_background(self._delete_logs([key], []))
            return
        log_.config = self.log_config_for(topic)
        self._add_partition(topic, index, log_, topic.partitions[index])

    async def wait_opened(self, name: str, timeout: float = 0.0) -> None:
        """Return once no replica of topic `name` waits for its log to be created here, or after
        `timeout` seconds (at least OPEN_WAIT_S): a CreateTopics answers once the replicas it
        created here are served, but not later than its timeout_ms allows (a 10,000-partition
        create outlasted the client's wait)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(timeout, OPEN_WAIT_S)):
                while self._opener is not None and (any(key[0] == name for key in self._opening)
                                                    or any(key[0] == name for key in self._to_open)):
                    await asyncio.wait([self._opener])

    def _set_role(self, partition: Partition) -> None:
        """A follower fetches from its leader; a leader (or an offline partition) fetches from nobody."""
        if partition.is_follower:
            self.fetchers.follow(partition)
        else:
            self.fetchers.unfollow(partition)

    def _stop_hosting(self, name: str, index: int) -> None:
        """A replica moved away from this broker (reassignment): stop it and delete its log."""
        self.offline.pop((name, index), None)
        self._to_open.pop((name, index), None)
        partition = self.partitions.pop((name, index), None)
        if partition is None:
            return
        self.fetchers.unfollow(partition)
        if partition.is_leader:
            self._announce_leadership(partition, False)
        self._run_in_background(self._delete_logs([(name, index)], []))

    def _drop_topic(self, name: str) -> None:
        """Forget the topic's partitions now; delete their files after any earlier drop of it and
        after the batch of new logs being created, which may hold some of them."""
        self.offline = {key: p for key, p in self.offline.items() if key[0] != name}
        self._to_open = {key: None for key in self._to_open if key[0] != name}
        keys = [key for key in self.partitions if key[0] == name]
        for key in keys:
            partition = self.partitions.pop(key)
            self.fetchers.unfollow(partition)
            if partition.is_leader:
                self._announce_leadership(partition, False)
        keys += [key for key in self._opening if key[0] == name]
        before = [task for task in (self._drops.get(name), self._opener) if task is not None]
        task = self._run_in_background(self._delete_logs(keys, before))
        self._drops[name] = task
        task.add_done_callback(lambda done: self._drops.pop(name) if self._drops.get(name) is done else None)

    async def _delete_logs(self, keys: list[tuple[str, int]], after: list[asyncio.Task]) -> None:
        if after:
            await asyncio.wait(after)
        for key in keys:
            try:
                await self.logs.delete_log(*key)
            except OSError:  # the dir is gone from the metadata; start-up removes what is left
                log.exception("could not delete the files of %s-%d", *key)

    async def _sync_after_drop(self, name: str) -> None:
        """Open the logs of a topic created again under a name whose old files are still going."""
        await self.wait_dropped(name)
        topic = self.metadata.topic(name)
        if topic is not None and name not in self._drops:
            self._sync_topic(topic)

    async def wait_dropped(self, name: str) -> None:
        """Return once the files of a deleted topic `name` are gone (at once if none are going)."""
        while (task := self._drops.get(name)) is not None:
            await asyncio.wait([task])

    def _run_in_background(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def is_offline(self, topic: str, index: int) -> bool:
        """The replica here is in a failed log dir: requests for it answer KAFKA_STORAGE_ERROR."""
        return (topic, index) in self.offline

    def hosted_partition(self, topic: str, index: int, message: str | None = None) -> Partition:
        """The partition hosted here, else raises why a request finds none (Kafka's
        getPartitionOrException), with `message`: KafkaStorageError (its replica is in a failed
        log dir), NotLeaderError (this broker has no replica of it), UnknownTopicError (there
        is no such partition)."""
        partition = self.get(topic, index)
        if partition is not None:
            return partition
        if self.is_offline(topic, index):
            raise KafkaStorageError(message)
        if self.metadata.partition_state(topic, index) is not None:
            raise NotLeaderError(message)
        raise UnknownTopicError(message)

    def partition_to_read(self, topic: str, index: int, current_leader_epoch: int = -1,
                          leader_only: bool = True) -> Partition:
        """The partition a read is served from (Kafka's getPartitionOrException, then
        localLogWithEpochOrThrow), else KafkaApiError: `hosted_partition`'s when it is not here; for a
        current leader epoch the client names (>= 0) that is not this replica's,
        FENCED_LEADER_EPOCH (older) or UNKNOWN_LEADER_EPOCH (newer: this broker has not heard of
        it yet, the client retries soon); NOT_LEADER_OR_FOLLOWER unless this replica leads, or
        follows when not `leader_only`."""
        partition = self.hosted_partition(topic, index)
        if current_leader_epoch >= 0 and current_leader_epoch != partition.leader_epoch:
            newer = current_leader_epoch > partition.leader_epoch
            raise KafkaApiError(ErrorCode.unknown_leader_epoch if newer else ErrorCode.fenced_leader_epoch)
        if not (partition.is_leader or (partition.is_follower and not leader_only)):
            raise NotLeaderError()
        return partition

    def _on_dir_failure(self, log_dir: str, keys: list[tuple[str, int]]) -> None:
        """Kafka's handleLogDirFailure: the dir's replicas stop leading and following here."""
        for key in keys:
            partition = self.partitions.pop(key, None)
            if partition is None:
                continue
            self.offline[key] = partition
            self.fetchers.unfollow(partition)
            partition.go_offline()
            if partition.is_leader:
                self._announce_leadership(partition, False)
        self._run_in_background(self._report_offline())

    async def _report_offline(self) -> None:
        """Tell the metadata store every offline replica here, retrying until it took them."""
        async with self._reporting:
            for _ in range(REPORT_ATTEMPTS):
                try:
                    await self.metadata.report_offline_replicas(sorted(self.offline))
                    return
                except Exception:  # noqa: BLE001 - e.g. ZooKeeper out of reach: the controller must learn it
                    log.warning("cannot report offline replicas %s; retrying", sorted(self.offline), exc_info=True)
                    await asyncio.sleep(1)
            log.error("gave up reporting offline replicas %s: restart the broker", sorted(self.offline))

    def all_logs(self) -> list[PartitionLog]:
        return [p.log for p in self.partitions.values()]

    def high_watermarks(self) -> dict[tuple[str, int], int]:
        """Each hosted partition's HW, for the replication-offset checkpoint."""
        return {key: partition.high_watermark for key, partition in self.partitions.items()}

    async def flush_if_due(self, partition: Partition) -> None:
        """fsync now when the partition's flush policy says so (before acknowledging); a disk
        error (which took the log dir offline) is KAFKA_STORAGE_ERROR."""
        if partition.log.unflushed_messages >= partition.log.config.flush_messages:
            try:
                await partition.log.flush(self.logs.run_blocking)
            except OSError as exc:
                raise KafkaStorageError(f"flush failed: {exc.strerror or exc}") from None

    async def append_records(self, topic: str, index: int, entry: Entry, acks: int,
                             on_appended: Callable[[AppendInfo], None] | None = None) -> AppendResult:
        """Kafka's appendRecords for one partition, up to its delayed part: find the partition
        (`hosted_partition`'s refusal when it is not here), append `entry` as leader (`appends.append_to_leader`),
        then fsync when the flush policy says so. `on_appended(info)` runs as soon as the entry is in
        the log, before the flush. A refusal raises KafkaApiError. For acks=all, a result that is
        `awaiting_replicas` is answered after `wait_for_replicas`."""
        partition = self.hosted_partition(topic, index, f"{topic}-{index} is not hosted here")
        info = append_to_leader(partition, entry, acks)
        if on_appended is not None:
            on_appended(info)
        await self.flush_if_due(partition)
        return AppendResult(partition, info, acks)

    async def wait_for_replicas(self, appended: AppendResult, timeout: float) -> None:
        """Kafka's DelayedProduce: return once every ISR member has the appended entry (and the ISR
        meets min.insync.replicas), else raise the refusal that ends the wait: RequestTimedOutError
        after `timeout`, NotEnoughReplicasAfterAppendError, NotLeaderError, KafkaStorageError."""
        await appended.partition.wait_replicated(appended.required_offset, timeout)

    def delete_records(self, topic: str, index: int, offset: int) -> DeletedRecords:
        """Kafka's deleteRecords for one partition, up to its delayed part: as its leader, move the
        log start offset to `offset` (-1: the high watermark). Raises `hosted_partition`'s refusal,
        NotLeaderError, OffsetOutOfRangeError (a negative offset other than -1, or one above the
        high watermark). The answer waits for `wait_for_low_watermark`."""
        partition = self.hosted_partition(topic, index)
        if not partition.is_leader:
            raise NotLeaderError(f"broker {self.broker_id} does not lead {partition}")
        if offset == HIGH_WATERMARK:
            offset = partition.high_watermark
        if offset < 0 or offset > partition.high_watermark:
            raise OffsetOutOfRangeError(f"{offset} is not within 0 and the high watermark of {partition}")
        return DeletedRecords(partition, partition.delete_records_before(offset))

    async def wait_for_low_watermark(self, deleted: DeletedRecords, timeout: float) -> None:
        """Kafka's DelayedDeleteRecords: return once every replica on a live broker has adopted the
        new log start from its fetches; raise RequestTimedOutError after `timeout`,
        NotLeaderError, KafkaStorageError."""
        live = {broker.broker_id for broker in self.metadata.brokers()}
        await deleted.partition.wait_low_watermark(deleted.low_watermark, live, timeout)


async def _succeeded(future: asyncio.Future[None]) -> bool:
    """Whether `future` ends without an error (its error is its owner's to raise)."""
    try:
        await asyncio.shield(future)
    except Exception:  # noqa: BLE001 - the owner awaits the future itself
        return False
    return True

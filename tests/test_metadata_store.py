"""In-process tests of EmbeddedMetadataStore: every change is written first and applied only then.

A failing writer stands in for a full disk: each mutation must raise MetadataWriteError and leave
memory, the announcements and the file exactly as they were; the same change succeeds on retry.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from logbus.cluster.metadata import (
    PRODUCER_ID_BLOCK,
    BrokerInfo,
    EmbeddedMetadataStore,
    MetadataWriteError,
    TopicMetadata,
    write_state_file,
)
from logbus.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from logbus.security.listeners import ListenerEndpoint


class FlakyDisk:
    """A state writer that fails with ENOSPC while `full` is set, and writes for real otherwise."""

    def __init__(self) -> None:
        self.full = False
        self.writes = 0

    def __call__(self, path: str, state: dict[str, Any]) -> None:
        if self.full:
            raise OSError(28, "No space left on device")
        self.writes += 1
        write_state_file(path, state)


async def open_store(data_dir: str, disk: FlakyDisk) -> tuple[EmbeddedMetadataStore, list]:
    store = EmbeddedMetadataStore(data_dir, 0, writer=disk)
    await store.start()
    await store.register_broker(BrokerInfo(0, (ListenerEndpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092),)))
    announced: list[tuple[str, TopicMetadata | None]] = []
    store.add_listener(lambda name, metadata: announced.append((name, metadata)))
    return store, announced


def snapshot(store: EmbeddedMetadataStore) -> tuple[str, str]:
    """What memory holds and what the file holds, as comparable text."""
    memory = json.dumps({n: [t.topic_id, [p.replicas for p in t.partitions], t.configs]
                         for n, t in store.topics().items()}, sort_keys=True)
    with open(store.path, encoding="utf-8") as handle:
        return memory, handle.read()


MUTATIONS: dict[str, Callable[[EmbeddedMetadataStore], Awaitable[object]]] = {
    "create_topic": lambda store: store.create_topic("fresh", 2, 1, {}),
    "delete_topic": lambda store: store.delete_topic("existing"),
    "add_partitions": lambda store: store.add_partitions("existing", 5),
    "set_topic_configs": lambda store: store.set_topic_configs("existing", {"retention.ms": "1000"}),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_failed_write_changes_nothing_and_a_retry_works(tmp_path, mutation: str) -> None:
    async def scenario() -> None:
        disk = FlakyDisk()
        store, announced = await open_store(str(tmp_path), disk)
        existing = await store.create_topic("existing", 3, 1, {"cleanup.policy": "compact"})
        partitions_before = list(existing.partitions)
        before = snapshot(store)
        announced.clear()
        disk.full = True
        with pytest.raises(MetadataWriteError):
            await MUTATIONS[mutation](store)
        assert snapshot(store) == before, "memory and file are as before the failed write"
        assert announced == [], "nothing announced"
        assert existing.partitions == partitions_before and existing.configs == {"cleanup.policy": "compact"}
        assert not os.path.exists(store.path + ".tmp"), "the temp file of the failed write is gone"
        disk.full = False
        await MUTATIONS[mutation](store)
        assert snapshot(store) != before and len(announced) == 1

    asyncio.run(scenario())


def test_producer_ids_are_handed_out_only_once_persisted(tmp_path) -> None:
    async def scenario() -> None:
        disk = FlakyDisk()
        store, _ = await open_store(str(tmp_path), disk)
        disk.full = True
        with pytest.raises(MetadataWriteError):
            await store.allocate_producer_id()
        disk.full = False
        first = [await store.allocate_producer_id() for _ in range(PRODUCER_ID_BLOCK)]
        assert first == list(range(PRODUCER_ID_BLOCK)), "the failed allocation handed out nothing"
        disk.full = True
        with pytest.raises(MetadataWriteError):
            await store.allocate_producer_id()  # needs the next block: refused, not handed out
        disk.full = False
        assert await store.allocate_producer_id() == PRODUCER_ID_BLOCK

        reopened, _ = await open_store(str(tmp_path), disk)
        assert await reopened.allocate_producer_id() == 2 * PRODUCER_ID_BLOCK, "no id reused after a restart"

    asyncio.run(scenario())


def test_changes_survive_reopening(tmp_path) -> None:
    async def scenario() -> None:
        disk = FlakyDisk()
        store, _ = await open_store(str(tmp_path), disk)
        created = await store.create_topic("kept", 1, 1, {})
        await store.add_partitions("kept", 3)
        await store.set_topic_configs("kept", {"retention.ms": "5"})
        await store.create_topic("gone", 1, 1, {})
        await store.delete_topic("gone")
        reopened, _ = await open_store(str(tmp_path), disk)
        topic = reopened.topic("kept")
        assert topic is not None and topic.topic_id == created.topic_id
        assert len(topic.partitions) == 3 and topic.configs == {"retention.ms": "5"}
        assert reopened.topic("gone") is None

    asyncio.run(scenario())


def test_the_state_file_and_its_directory_are_fsynced(tmp_path, monkeypatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    path = str(tmp_path / "state.json")
    write_state_file(path, {"a": 1})
    assert synced == [path + ".tmp", str(tmp_path)], "the temp file, then the directory after the rename"


def test_a_failed_acl_write_changes_nothing_and_acls_survive_reopening(tmp_path) -> None:
    granted = AclBinding(ResourcePattern(ResourceType.TOPIC, "a.", PatternType.PREFIXED),
                         AccessControlEntry("User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW))

    async def scenario() -> None:
        disk = FlakyDisk()
        store, _ = await open_store(str(tmp_path), disk)
        changes: list[None] = []
        store.add_acl_listener(lambda: changes.append(None))
        with open(store.path, encoding="utf-8") as handle:
            file_before = handle.read()
        disk.full = True
        with pytest.raises(MetadataWriteError):
            await store.alter_acls([granted], [])
        assert store.acls() == {} and changes == []
        with open(store.path, encoding="utf-8") as handle:
            assert handle.read() == file_before
        disk.full = False
        await store.alter_acls([granted], [])
        assert store.acls() == {granted.pattern: frozenset({granted.entry})} and len(changes) == 1
        reopened, _ = await open_store(str(tmp_path), disk)
        assert reopened.acls() == store.acls()
        await reopened.alter_acls([], [granted])
        assert reopened.acls() == {}

    asyncio.run(scenario())

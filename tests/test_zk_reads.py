"""Reads of many znodes at once (cluster/zk_reads.py) against a real ZooKeeper (issue 25)."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from logbus.cluster import zk_reads
from logbus.cluster.zk_reads import ZnodeReader


@pytest.mark.parametrize("multi_read", [True, False], ids=["multiRead", "pipelined gets"])
def test_many_znodes_read_at_once_give_each_its_data_and_stat_or_its_own_error(
        zk_client: KazooClient, multi_read: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zk_reads, "MULTI_READ_PATHS", 3)  # several requests, one of them partly missing
    for index in range(5):
        zk_client.create(f"/states/{index}", b'{"leader": %d}' % index, makepath=True)
    zk_client.set("/states/4", b"changed")
    reader = ZnodeReader(zk_client)
    reader.multi_read = multi_read

    reads = reader.read([f"/states/{index}" for index in range(5)] + ["/states/missing", "/states/0"])

    assert reader.multi_read == multi_read, "the server (3.6+) has multiRead"
    assert [read[0] for read in reads if not isinstance(read, Exception)] == [
        b'{"leader": 0}', b'{"leader": 1}', b'{"leader": 2}', b'{"leader": 3}', b"changed", b'{"leader": 0}']
    assert isinstance(reads[5], NoNodeError), "a missing znode fails alone"
    assert [read[1].version for read in (reads[0], reads[4])] == [0, 1]
    assert reads[0][1] == zk_client.get("/states/0")[1]

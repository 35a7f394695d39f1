"""Real brokers come from logbus.testing (the `logbus_broker` fixture); shared helpers live in helpers.py.

`./dev test` runs the suite on several pytest-xdist workers (`--dist loadgroup`). Every test
of a module runs on one worker (its module fixtures: a broker, a Spark session, are started
once; the two Spark modules share one worker), except the modules in SPREAD, whose tests each
start a cluster of their own and go to whichever worker is free. Work is handed out in
collection order, so the longest modules are collected first (SLOWEST_FIRST) and do not end up
as the last thing a worker runs.
"""

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.testing import running_zookeeper

sys.path.insert(0, os.path.dirname(__file__))

# Modules whose tests share nothing but the session's ZooKeeper: spread test by test over the workers.
SPREAD = {"test_cluster.py", "test_cluster_storage.py", "test_cluster_transactions.py", "test_zookeeper_outage.py",
          "test_fuzz.py", "test_consumer_group_failover.py"}
# Modules that share one worker, one after the other: two Spark JVMs at once starved each other's
# Python workers ("Python worker failed to connect back").
SAME_WORKER = {"test_spark.py": "spark", "test_spark_exactly_once.py": "spark"}
# The longest modules (a minute or more each, measured alone), longest first: collected before the others.
SLOWEST_FIRST = ("test_spark_exactly_once.py", "test_spark.py", "test_cluster.py", "test_fuzz.py")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns xdist_group marks into node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Group each module's tests (SPREAD's excepted) and put the longest modules first."""
    for item in items:
        module = item.path.name
        if module not in SPREAD:
            item.add_marker(pytest.mark.xdist_group(SAME_WORKER.get(module, module)))
    rank = {module: index for index, module in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: file order otherwise


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[ZooKeeperServer]:
    """One ZooKeeper per test process (per xdist worker); each cluster takes a fresh chroot of it
    (running_cluster), so tests sharing it see nothing of each other."""
    with running_zookeeper() as server:
        yield server


@pytest.fixture
def small_disk(tmp_path) -> Iterator[str]:
    """An 8 MiB tmpfs to fill up (the CI container runs as root); skipped, with the reason, elsewhere."""
    mountpoint = str(tmp_path / "disk")
    os.mkdir(mountpoint)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mountpoint], capture_output=True)
    if mounted.returncode:
        pytest.skip(f"mounting a tmpfs is not permitted here: {mounted.stderr.decode().strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", mountpoint], check=False)

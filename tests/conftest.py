"""Real brokers come from logbus.testing (the `logbus_broker` fixture); shared helpers live in helpers.py.

`./dev test` runs the suite on several pytest-xdist workers (`--dist loadgroup`, scheduled by
ModuleScheduling below). Every test of a module runs on one worker (its module fixtures: a
broker, a Spark session, are started once; the two Spark modules share one worker), except the
modules in SPREAD, whose tests each start a cluster of their own and go to whichever worker is
free. Work is handed out in collection order: the Spark modules, the longest unit, first
(SLOWEST_FIRST), then the other modules, then the SPREAD tests, which, one test at a time, keep
every worker busy to the end instead of one worker finishing a long module while the others idle.

The grouping is done by the scheduler, from the test ids, not with `xdist_group` marks: those
work by renaming each test's node id, which pytest 9.2 no longer lets a plugin do
(pytest-xdist#1386), and the suite then silently ran module by module on both workers at once.
"""

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from logbus.cluster.zookeeper_server import ZooKeeperServer
from logbus.testing import running_zookeeper

sys.path.insert(0, os.path.dirname(__file__))

# Modules whose tests share nothing but the session's ZooKeeper: spread test by test over the
# workers, after the other modules, in this order (the longest tests first).
SPREAD = ("test_cluster.py", "test_zookeeper_outage.py", "test_cluster_storage.py", "test_cluster_transactions.py",
          "test_consumer_group_failover.py", "test_fuzz.py")
# Modules that share one worker, one after the other: they share one Spark session (`spark`), and
# two Spark JVMs at once starved each other's Python workers ("Python worker failed to connect back").
SAME_WORKER = {"test_spark.py": "spark", "test_spark_exactly_once.py": "spark"}
# The longest unit of work (several minutes), collected before the others.
SLOWEST_FIRST = ("test_spark_exactly_once.py", "test_spark.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """SLOWEST_FIRST, the other modules, then SPREAD (each worker collects; the scheduler hands
    work out in this order)."""
    rank = {module: index for index, module in enumerate(SLOWEST_FIRST)}
    rank.update({module: len(SLOWEST_FIRST) + 1 + index for index, module in enumerate(SPREAD)})
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOWEST_FIRST)))  # stable: file order otherwise


def work_unit(nodeid: str) -> str:
    """What a test is scheduled with: its module, its SAME_WORKER group, or (SPREAD) itself alone."""
    path = nodeid.split("::", 1)[0]
    module = path.rsplit("/", 1)[-1]
    if module in SPREAD:
        return nodeid
    return SAME_WORKER.get(module, path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """With `--dist loadgroup`, schedule by work_unit; other modes are pytest-xdist's own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def _reschedule(self, node) -> None:  # noqa: ANN001 - xdist's WorkerController
            """As xdist's, but the next unit goes to a worker only once it runs its last test (xdist
            gives it when two are left): a unit handed out early waits there while the other worker
            may have nothing to do. (A worker starts a test once it knows the next, so not later.)"""
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
            elif self._pending_of(self.assigned_work[node]) <= 1:
                self._assign_work_unit(node)

    return ModuleScheduling(config, log)


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[ZooKeeperServer]:
    """One ZooKeeper per test process (per xdist worker); each cluster takes a fresh chroot of it
    (running_cluster), so tests sharing it see nothing of each other."""
    with running_zookeeper() as server:
        yield server


@pytest.fixture
def zk_client(zookeeper: ZooKeeperServer, request: pytest.FixtureRequest) -> Iterator[KazooClient]:
    """A started client in a chroot of its own of the session's ZooKeeper (named after the
    test's module), as each broker of a cluster has one."""
    from helpers import zookeeper_chroot

    client = KazooClient(hosts=zookeeper_chroot(zookeeper.connect_string, request.module.__name__.rsplit(".", 1)[-1]))
    client.start(30)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One local Spark session for both Spark modules (SAME_WORKER runs them on one worker, one
    after the other): `local[2,2]`, two cores, and a failed task is tried once more (the task-retry
    test of test_spark_exactly_once needs that; a test expecting a failure only fails twice).
    Skipped without PySpark, as those modules are."""
    from test_spark import spark_session

    yield from spark_session("logbus-tests", "local[2,2]", tmp_path_factory.getbasetemp() / "spark-home")


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

"""The client CLI (`logbus topics|produce|consume`) run as subprocesses against real brokers."""

from __future__ import annotations

import os
import pty
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Producer
from helpers import QUIET, consume_partition, produce_all, wait_until

from logbus.testing import BrokerProcess, running_broker

CLI_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    """One broker for the module; each test uses its own topics."""
    with running_broker(config={"num.partitions": "1"}) as started:
        yield started


def logbus(bootstrap: str, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m logbus ARGS --bootstrap-server BOOTSTRAP`; stdout and stderr as text."""
    result = subprocess.run(
        [sys.executable, "-m", "logbus", *args, "--bootstrap-server", bootstrap],
        input=stdin if stdin is not None else b"", capture_output=True, timeout=CLI_TIMEOUT_S,
    )
    return subprocess.CompletedProcess(
        result.args, result.returncode, result.stdout.decode(), result.stderr.decode()
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr}"
    return result.stdout


def failed(result: subprocess.CompletedProcess[str], message: str) -> None:
    """A user error: exit 1, one clear line, no traceback."""
    assert result.returncode == 1, f"exit {result.returncode}: {result.stderr}"
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def create_with_auto_create(bootstrap: str, topic: str) -> None:
    """An empty topic with `num.partitions` partitions: a producer's Metadata request auto-creates it.

    The first request only connects: librdkafka drops its bootstrap connection right after the first
    response, and a topic request in flight on it can be cut off mid-creation by the broker.
    """
    producer = Producer({"bootstrap.servers": bootstrap, **QUIET})
    producer.list_topics(timeout=10)
    wait_until(lambda: producer.list_topics(topic, timeout=5).topics[topic].error is None,
               message=f"topic {topic} to be auto-created")


def test_describe_all_topics(broker: BrokerProcess) -> None:
    create_with_auto_create(broker.bootstrap, "described-a")
    create_with_auto_create(broker.bootstrap, "described-b")
    topics = [
        line.split("\t")[0] for line in ok(logbus(broker.bootstrap, "topics", "describe")).splitlines()
        if line.startswith("Topic: ")
    ]
    assert {"Topic: described-a", "Topic: described-b"} <= set(topics)
    assert topics == sorted(topics)


def test_produce_file_with_keys_and_read_back(broker: BrokerProcess, tmp_path: Path) -> None:
    lines = [f"key-{i}:value-{i}:with-colon" for i in range(300)]
    data = tmp_path / "records.txt"
    data.write_text("\n".join(lines) + "\n")
    result = logbus(broker.bootstrap, "produce", "keyed", "--file", str(data), "--key-separator", ":",
                    "--compression", "lz4", "--progress")
    ok(result)
    assert "100%" in result.stderr
    read = ok(logbus(broker.bootstrap, "consume", "keyed", "--from-beginning", "--max", "300", "--print-key",
                     "--key-separator", ":", "--timeout-ms", "10000"))
    assert read.splitlines() == lines
    first = consume_partition(broker.bootstrap, "keyed", 0, 1)[0]
    assert (first.key(), first.value()) == (b"key-0", b"value-0:with-colon")


def test_progress_bar_only_when_stderr_is_a_terminal(broker: BrokerProcess, tmp_path: Path) -> None:
    data = tmp_path / "lines.txt"
    data.write_bytes(b"x" * 1000 + b"\n" + b"y\n")
    quiet = logbus(broker.bootstrap, "produce", "barred", "--file", str(data))
    assert ok(quiet) == "" and quiet.stderr == ""
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "logbus", "produce", "barred", "--file", str(data),
             "--bootstrap-server", broker.bootstrap],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=terminal,
        )
        os.close(terminal)
        assert process.wait(CLI_TIMEOUT_S) == 0
        drawn = read_all(controller)
    finally:
        os.close(controller)
    assert "] 100%" in drawn and drawn.endswith("\n")


def read_all(fd: int) -> str:
    """Everything a finished child wrote to a pty (reading the controller side gives EIO at the end)."""
    output = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    return output.decode()


def test_produce_stdin_without_progress(broker: BrokerProcess) -> None:
    result = logbus(broker.bootstrap, "produce", "from-stdin", stdin=b"one\ntwo\r\nthree")
    ok(result)
    assert result.stderr == ""
    read = ok(logbus(broker.bootstrap, "consume", "from-stdin", "--from-beginning", "--max", "3",
                     "--timeout-ms", "10000"))
    assert read == "one\ntwo\nthree\n"


def test_line_without_separator_fails_but_others_are_sent(broker: BrokerProcess) -> None:
    result = logbus(broker.bootstrap, "produce", "half-keyed", "--key-separator", "=", stdin=b"a=1\nbroken\nb=2\n")
    failed(result, "1 of 3 records failed; first: line 2 has no key separator '='")
    messages = consume_partition(broker.bootstrap, "half-keyed", 0, 2)
    assert [(m.key(), m.value()) for m in messages] == [(b"a", b"1"), (b"b", b"2")]


def test_partition_and_offset() -> None:
    with running_broker(config={"num.partitions": "2"}) as broker:
        create_with_auto_create(broker.bootstrap, "spread")
        check_partition_and_offset(broker)


def check_partition_and_offset(broker: BrokerProcess) -> None:
    values = b"".join(f"v{i}\n".encode() for i in range(10))
    ok(logbus(broker.bootstrap, "produce", "spread", "--partition", "1", stdin=values))
    read = ok(logbus(broker.bootstrap, "consume", "spread", "--partition", "1", "--offset", "6", "--max", "4",
                     "--timeout-ms", "10000"))
    assert read.splitlines() == ["v6", "v7", "v8", "v9"]
    empty = logbus(broker.bootstrap, "consume", "spread", "--partition", "0", "--from-beginning",
                   "--timeout-ms", "500")
    assert ok(empty) == "" and "Processed a total of 0 messages" in empty.stderr
    failed(logbus(broker.bootstrap, "consume", "spread", "--partition", "2", "--max", "1"),
           "topic 'spread' has no partition 2")


def test_consume_from_timestamp(broker: BrokerProcess) -> None:
    create_with_auto_create(broker.bootstrap, "dated")
    producer = Producer({"bootstrap.servers": broker.bootstrap, **QUIET})
    for day in range(1, 6):
        moment = datetime(2024, 3, day, 12, tzinfo=UTC)
        producer.produce("dated", value=f"day-{day}".encode(), timestamp=int(moment.timestamp() * 1000))
    assert producer.flush(30) == 0
    read = ok(logbus(broker.bootstrap, "consume", "dated", "--timestamp", "2024-03-03T00:00:00Z", "--max", "3",
                     "--timeout-ms", "10000"))
    assert read.splitlines() == ["day-3", "day-4", "day-5"]
    after_all = logbus(broker.bootstrap, "consume", "dated", "--timestamp", "2024-04-01", "--timeout-ms", "500")
    assert ok(after_all) == ""


def test_consume_without_start_option_reads_only_new_records(broker: BrokerProcess) -> None:
    create_with_auto_create(broker.bootstrap, "tail")
    produce_all(broker.bootstrap, "tail", [(None, b"old")])
    read = logbus(broker.bootstrap, "consume", "tail", "--timeout-ms", "1500")
    assert ok(read) == ""


def read_stdout_until(process: subprocess.Popen[bytes], expected: bytes, timeout: float = 15.0) -> bytes:
    """What `process` wrote to stdout, read until it contains `expected`; fails after `timeout`."""
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    output = b""
    deadline = time.monotonic() + timeout
    while expected not in output:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"timed out waiting for {expected!r}; got {output!r}"
        if selector.select(timeout=remaining):
            chunk = os.read(process.stdout.fileno(), 4096)
            assert chunk, f"stdout closed before {expected!r}; got {output!r}"
            output += chunk
    return output


def test_ctrl_c_ends_an_open_ended_consume(broker: BrokerProcess) -> None:
    create_with_auto_create(broker.bootstrap, "interrupted")
    produce_all(broker.bootstrap, "interrupted", [(None, b"first"), (None, b"second")])
    process = subprocess.Popen(
        [sys.executable, "-m", "logbus", "consume", "interrupted", "--from-beginning",
         "--bootstrap-server", broker.bootstrap],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        assert read_stdout_until(process, b"second\n") == b"first\nsecond\n"
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    assert b"Processed a total of 2 messages" in stderr and b"Traceback" not in stderr


def test_unknown_topic_with_auto_create_disabled() -> None:
    with running_broker(config={"auto.create.topics.enable": "false"}) as strict:
        failed(logbus(strict.bootstrap, "produce", "missing", stdin=b"x\n"), "topic 'missing' does not exist")
        failed(logbus(strict.bootstrap, "consume", "missing", "--max", "1"), "topic 'missing' does not exist")
        failed(logbus(strict.bootstrap, "topics", "describe", "missing"), "topic 'missing' does not exist")
        assert "missing" not in ok(logbus(strict.bootstrap, "topics", "list")).splitlines()


def test_unreachable_broker_is_reported_within_the_timeout() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    result = logbus(f"127.0.0.1:{closed_port}", "topics", "list", "--timeout", "2")
    failed(result, f"cannot reach a broker at 127.0.0.1:{closed_port} within 2s")


def test_usage_errors_exit_2(broker: BrokerProcess) -> None:
    result = logbus(broker.bootstrap, "consume", "t", "--from-beginning", "--offset", "3")
    assert result.returncode == 2 and "not allowed with argument" in result.stderr
    result = logbus(broker.bootstrap, "topics", "create", "t", "--config", "no-equals-sign")
    assert result.returncode == 2 and "--config expects KEY=VALUE" in result.stderr


def test_topics_create_alter_and_describe_configs(broker: BrokerProcess) -> None:
    created = logbus(
        broker.bootstrap, "topics", "create", "cli-admin", "--partitions", "1", "--config", "retention.ms=60000"
    )
    assert ok(created).strip() == "Created topic cli-admin."
    described = ok(logbus(broker.bootstrap, "topics", "describe", "cli-admin")).splitlines()
    assert "PartitionCount: 1" in described[0] and described[0].endswith("Configs: retention.ms=60000")

    altered = logbus(
        broker.bootstrap, "topics", "alter", "cli-admin", "--partitions", "3", "--config", "segment.bytes=1048576",
        "--delete-config", "retention.ms",
    )
    assert ok(altered).strip() == "Altered topic cli-admin."
    described = ok(logbus(broker.bootstrap, "topics", "describe", "cli-admin")).splitlines()
    assert "PartitionCount: 3" in described[0] and described[0].endswith("Configs: segment.bytes=1048576")
    assert [line.split("\t")[2] for line in described[1:]] == ["Partition: 0", "Partition: 1", "Partition: 2"]


def test_topics_alter_errors(broker: BrokerProcess) -> None:
    ok(logbus(broker.bootstrap, "topics", "create", "cli-alter-errors", "--partitions", "2"))
    failed(
        logbus(broker.bootstrap, "topics", "alter", "cli-alter-errors", "--partitions", "1"),
        "topic 'cli-alter-errors': Topic currently has 2 partitions, which is higher than the requested 1.",
    )
    failed(
        logbus(broker.bootstrap, "topics", "alter", "cli-alter-errors", "--config", "retention.ms=soon"),
        "Invalid value 'soon' for configuration retention.ms",
    )
    failed(
        logbus(broker.bootstrap, "topics", "alter", "cli-missing", "--config", "retention.ms=1000"),
        "topic 'cli-missing' does not exist",
    )
    described = ok(logbus(broker.bootstrap, "topics", "describe", "cli-alter-errors")).splitlines()
    assert "PartitionCount: 2" in described[0] and described[0].endswith("Configs: ")


def test_topics_delete(broker: BrokerProcess) -> None:
    ok(logbus(broker.bootstrap, "topics", "create", "cli-deleted", "--partitions", "2"))
    produce_all(broker.bootstrap, "cli-deleted", [(None, b"gone soon")])
    assert ok(logbus(broker.bootstrap, "topics", "delete", "cli-deleted")).strip() == "Deleted topic cli-deleted."
    assert "cli-deleted" not in ok(logbus(broker.bootstrap, "topics", "list")).splitlines()
    assert not [d for d in os.listdir(broker.data_dir) if d.startswith("cli-deleted-")]
    failed(logbus(broker.bootstrap, "topics", "delete", "cli-deleted"), "topic 'cli-deleted' does not exist")


# --- ./dev: the first-run script, driven with stand-ins for pip, apt-get and sudo ---------------------

REPO = Path(__file__).resolve().parent.parent
DEV_TOOLS = ("bash", "cat", "sha256sum", "cut", "grep", "sort", "mv", "rm", "dirname", "env")


def stand_in(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(0o755)


def dev_checkout(tmp_path: Path, uid: int = 0, venv_python_works: bool = True) -> tuple[Path, dict[str, str]]:
    """A copy of ./dev with the repo's pyproject.toml and constraints.txt, a stand-in .venv whose
    python logs its arguments, and a PATH that holds only the tools ./dev needs plus stand-ins for
    `id`, `sudo` and `apt-get` (which log theirs): so kcat and java are missing."""
    checkout = tmp_path / "checkout"
    (checkout / ".venv" / "bin").mkdir(parents=True)
    for name in ("dev", "pyproject.toml", "constraints.txt"):
        (checkout / name).write_bytes((REPO / name).read_bytes())
    (checkout / "dev").chmod(0o755)
    log = tmp_path / "calls.log"
    stand_in(checkout / ".venv" / "bin" / "python", f'echo "venv-python $*" >> {log}')
    stand_in(checkout / ".venv" / "bin" / "logbus", f'echo "logbus $*" >> {log}')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in DEV_TOOLS:
        (bin_dir / tool).symlink_to(subprocess.run(
            ["bash", "-c", f"command -v {tool}"], capture_output=True, text=True, check=True
        ).stdout.strip())
    stand_in(bin_dir / "id", f"echo {uid}")
    stand_in(bin_dir / "sudo", f'echo "sudo $*" >> {log}; exec "$@"')
    stand_in(bin_dir / "apt-get", f'echo "apt-get DEBIAN_FRONTEND=${{DEBIAN_FRONTEND:-}} $*" >> {log}')
    python = sys.executable if venv_python_works else str(bin_dir / "python-without-venv")
    stand_in(bin_dir / "python-without-venv", 'exit 1')
    return checkout, {"PATH": str(bin_dir), "PYTHON": python, "HOME": str(tmp_path)}


def run_dev(checkout: Path, env: dict[str, str], *args: str) -> list[str]:
    """Run ./dev ARGS; the calls the stand-ins logged during the run."""
    log = checkout.parent / "calls.log"
    log.write_text("")
    result = subprocess.run(["./dev", *args], cwd=checkout, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return log.read_text().splitlines()


def test_dev_installs_with_pip_only_when_pins_change(tmp_path: Path) -> None:
    checkout, env = dev_checkout(tmp_path)
    first = run_dev(checkout, env, "logbus", "topics", "list")
    assert [line for line in first if "pip install" in line][-1].endswith("-c constraints.txt -e .[cli]")
    assert first[-1] == "logbus topics list"
    assert run_dev(checkout, env, "serve", "--port", "0") == [  # no pip: only the byte-compile check
        "venv-python -m compileall -q src", "logbus serve --data-dir ./data --set metrics.port=9404 --port 0"]
    with (checkout / "constraints.txt").open("a") as constraints:
        constraints.write("# changed\n")
    again = run_dev(checkout, env, "serve")
    assert any(line.endswith("-e .[cli]") for line in again), again


def test_dev_installs_missing_debian_packages_with_sudo(tmp_path: Path) -> None:
    checkout, env = dev_checkout(tmp_path, uid=1000, venv_python_works=False)
    calls = run_dev(checkout, env, "logbus", "--version")
    assert calls[:4] == [
        "sudo apt-get update -qq",
        "apt-get DEBIAN_FRONTEND= update -qq",
        "sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv",
        "apt-get DEBIAN_FRONTEND=noninteractive install -y -qq python3-venv",
    ]


def test_dev_test_wants_a_jre_zookeeper_kcat_openssl_node_and_chromium_as_root(tmp_path: Path) -> None:
    checkout, env = dev_checkout(tmp_path)
    stand_in(checkout / ".venv" / "bin" / "ruff", "exit 0")
    stand_in(checkout / ".venv" / "bin" / "pytest", 'echo "pytest $*" >> ../calls.log')
    calls = run_dev(checkout, env, "test", "-k", "nothing")
    assert calls[0] == "apt-get DEBIAN_FRONTEND= update -qq"
    assert calls[1] == ("apt-get DEBIAN_FRONTEND=noninteractive install -y -qq default-jre-headless zookeeper kcat "
                        "openssl nodejs npm chromium chromium-driver")
    assert calls[-1] == "pytest -n 4 --dist loadgroup --no-loadscope-reorder -k nothing"


def test_a_stopped_broker_leaves_without_the_interpreters_teardown() -> None:
    """After a clean stop `logbus serve` exits with its code at once: what it printed and logged
    is flushed, but Python's teardown (atexit, freeing the heap object by object: 0.8 s at 3,000
    partitions, issue 25) does not run."""
    script = ("import atexit, logging\n"
              "from logbus.cli.serve import leave_without_teardown\n"
              "atexit.register(print, 'torn down')\n"
              "logging.basicConfig()\n"
              "logging.getLogger('logbus').warning('the last line')\n"
              "print('buffered', end='')\n"
              "leave_without_teardown(3)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 3, result.stderr
    assert result.stdout == "buffered", "stdout flushed, no atexit output"
    assert "the last line" in result.stderr

"""A local ZooKeeper server from Debian's `zookeeper` package, for `logbus cluster up` and tests.

Standalone mode on loopback: `zoo.cfg` in the given directory, the client port on 127.0.0.1,
the admin server off and the `srvr` four-letter word allowed, which tells when it serves (`ruok`
answers before it does). A small tick time keeps session timeouts of a few seconds possible
(ZooKeeper allows 2 to 20 ticks).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time

JAVA_DIR = "/usr/share/java"
CLASSPATH_JARS = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-simple.jar", "netty-all.jar")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# Kafka's zookeeper-server-start.sh gives ZooKeeper 512 MB. It held 40 MB live (after a full
# collection) with 10,000-15,000 partitions RF 3 of 9 brokers written, about 3 KB a partition
# (its znodes, the state change batches, sessions and watches): 100,000 partitions need ~300 MB,
# more than a 256 MB heap holds.
HEAP_OPTION = "-Xmx512m"
INSTALL_HINT = "ZooKeeper is not installed: apt-get install zookeeper (Debian's package, with a JRE)"


class ZooKeeperNotInstalledError(RuntimeError):
    pass


def zookeeper_classpath() -> str:
    """The Debian package's jars; raises ZooKeeperNotInstalledError when they or java are missing."""
    jars = [os.path.join(JAVA_DIR, jar) for jar in CLASSPATH_JARS]
    missing = [jar for jar in jars if not os.path.exists(jar)]
    if missing or shutil.which("java") is None:
        raise ZooKeeperNotInstalledError(INSTALL_HINT)
    return ":".join(["/etc/zookeeper/conf", *jars])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def four_letter_word(port: int, word: str, timeout: float = 1.0) -> str:
    """ZooKeeper's answer to a four-letter command ('' when it does not answer)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(word.encode())
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperServer:
    """One standalone ZooKeeper process with its data in `directory`."""

    def __init__(self, directory: str, port: int = 0, tick_ms: int = 500) -> None:
        self.directory = os.path.abspath(directory)
        self.port = port or free_port()
        self.tick_ms = tick_ms
        self.process: subprocess.Popen | None = None

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _write_config(self) -> str:
        os.makedirs(os.path.join(self.directory, "data"), exist_ok=True)
        path = os.path.join(self.directory, "zoo.cfg")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(
                f"tickTime={self.tick_ms}\ndataDir={os.path.join(self.directory, 'data')}\n"
                f"clientPort={self.port}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
                "4lw.commands.whitelist=ruok,srvr\nmaxSessionTimeout=60000\n"
            )
        return path

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        config = self._write_config()
        log = open(os.path.join(self.directory, "zookeeper.log"), "ab")  # noqa: SIM115 (the child keeps it)
        self.process = subprocess.Popen(
            ["java", HEAP_OPTION, "-cp", zookeeper_classpath(), MAIN_CLASS, config],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.directory,
            start_new_session=True,
        )
        log.close()
        self.wait_serving(timeout)
        return self

    def wait_serving(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"ZooKeeper exited with {self.process.returncode}; see {self.directory}/zookeeper.log")
            if "Mode:" in four_letter_word(self.port, "srvr"):
                return
            time.sleep(0.1)
        raise TimeoutError(f"ZooKeeper on port {self.port} not serving after {timeout} s")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

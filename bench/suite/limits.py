"""The machine's own limits in the same run: sequential disk write (fio) and one loopback TCP stream (iperf3)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time

from bench.suite.install import CACHE_DIR
from bench.suite.procmon import free_port

TIMEOUT_S = 120


def disk_write_mb_s(size_mb: int, fdatasync: bool) -> float:
    """Sequential 1 MiB writes of `size_mb` into the cache dir (the disk the brokers write to), MB/s.

    Without fdatasync the figure is the page cache's speed; with it, every 1 MiB write waits for the disk.
    """
    workdir = tempfile.mkdtemp(prefix="fio-", dir=CACHE_DIR)
    try:
        args = ["fio", "--name=seqwrite", "--rw=write", "--bs=1M", f"--size={size_mb}M", "--ioengine=psync",
                f"--filename={os.path.join(workdir, 'file')}", "--output-format=json",
                f"--fdatasync={1 if fdatasync else 0}", "--end_fsync=0"]
        done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S, check=True)
        write = json.loads(done.stdout)["jobs"][0]["write"]
        return write["bw_bytes"] / 1e6
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_listening(port: int, timeout_s: float) -> None:
    """Poll /proc/net/tcp for a LISTEN socket on `port`: a probe connection would count as an iperf3 test."""
    deadline = time.monotonic() + timeout_s
    wanted = f":{port:04X} "
    while time.monotonic() < deadline:
        with open("/proc/net/tcp", encoding="ascii") as handle:
            if any(wanted in line and line.split()[3] == "0A" for line in handle):
                return
        time.sleep(0.05)
    raise RuntimeError(f"iperf3 not listening on {port} after {timeout_s} s")


def loopback_tcp_mb_s(seconds: int) -> float:
    """One TCP stream over 127.0.0.1 with iperf3, MB/s received."""
    port = free_port()
    server = subprocess.Popen(["iperf3", "-s", "-B", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_listening(port, 10)
        done = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-J"],
                              capture_output=True, text=True, timeout=seconds + 30, check=True)
        return json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"] / 8 / 1e6
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()

"""The machine's own limits in the same run: sequential disk write (fio) and one loopback TCP stream (iperf3)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile

from bench.suite.install import CACHE_DIR
from bench.suite.procmon import free_port, wait_for_port

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


def loopback_tcp_mb_s(seconds: int) -> float:
    """One TCP stream over 127.0.0.1 with iperf3, MB/s received."""
    port = free_port()
    server = subprocess.Popen(["iperf3", "-s", "-B", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for_port(port, 10, lambda: server.poll() is None)
        done = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-J"],
                              capture_output=True, text=True, timeout=seconds + 30, check=True)
        return json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"] / 8 / 1e6
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()

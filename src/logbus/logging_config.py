"""The broker's own log lines: their format (`log.format`: text or json) and levels.

Levels are set with log4j-style keys, as Kafka's log4j.properties names loggers: `log.level`
for everything, `log.level.<component>` for one package of logbus (`log.level.storage=debug`
sets the `logbus.storage` loggers). Kafka's level names are accepted (TRACE is DEBUG here, FATAL
is CRITICAL, OFF silences).

The json format writes one object per line: `time` (UTC, ISO 8601 with milliseconds), `level`,
`logger`, `message`, then any `extra=` fields a log call passes, and `exception` (the traceback,
as one string) when there is one, so every record stays one line that a log shipper can parse.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

LOG_FORMATS = ("text", "json")
COMPONENTS = ("broker", "cluster", "coordinator", "protocol", "security", "storage")
LEVEL_KEY = "log.level"
LEVELS = {
    "trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
    "warning": logging.WARNING, "error": logging.ERROR, "fatal": logging.CRITICAL, "off": logging.CRITICAL + 10,
}
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# What every LogRecord has; anything else on a record came from a log call's `extra=`.
_STANDARD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


def check_level(value: object) -> None:
    """A ConfigKey check: one of Kafka's level names, any case."""
    if str(value).lower() not in LEVELS:
        raise ValueError(f"not a log level (one of {', '.join(LEVELS)})")


def component_key(component: str) -> str:
    return f"{LEVEL_KEY}.{component}"


class JsonFormatter(logging.Formatter):
    """One JSON object per record and line."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in record.__dict__.items():
            if name not in _STANDARD_ATTRIBUTES and name not in document:
                document[name] = value
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str)


def configure_logging(log_format: str, levels: Mapping[str, str]) -> None:
    """Send log records to stderr in `log_format` with the levels of `levels` (the broker's
    `log.level` and `log.level.<component>` values; missing ones leave the default, INFO)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    handler.addFilter(RecurringRecordFilter(prefix="kazoo"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(LEVELS[levels.get(LEVEL_KEY, "info").lower()])
    for component in COMPONENTS:
        level = levels.get(component_key(component))
        logging.getLogger(f"logbus.{component}").setLevel(LEVELS[level.lower()] if level else logging.NOTSET)


class _Throttle:
    """At most one of a recurring thing every `interval_s`: `allow()` says None while one is to
    be left out, else how many were left out since the last one allowed."""

    __slots__ = ("interval_s", "clock", "_last", "_left_out")

    def __init__(self, interval_s: float, clock: Callable[[], float]) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self._last = float("-inf")
        self._left_out = 0

    def allow(self) -> int | None:
        now = self.clock()
        if now - self._last < self.interval_s:
            self._left_out += 1
            return None
        left_out, self._last, self._left_out = self._left_out, now, 0
        return left_out


def _with_left_out(message: str, left_out: int) -> str:
    return f"{message} ({left_out} more like it left out)" if left_out else message


class RecurringWarning:
    """A warning about a condition that recurs while it lasts (ZooKeeper out of reach): logged in
    one line at most every `interval_s`, saying how many were left out since, so an outage
    leaves a few lines, not one per fetch or per partition."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self._throttle = _Throttle(interval_s, clock)

    def __call__(self, message: str, *args: object) -> None:
        left_out = self._throttle.allow()
        if left_out is not None:
            self.logger.warning(_with_left_out(message, left_out), *args)


class RecurringRecordFilter(logging.Filter):
    """The same for a library's own lines: a record of a logger under `prefix` whose message
    template (and logger) recurs passes at most every `interval_s`. kazoo logs a few lines per
    reconnect attempt ("Connection dropped", "Connecting to"), which while ZooKeeper is out of
    reach is several a second."""

    MAX_TEMPLATES = 256  # bounds the memory a logger with varying templates could take

    def __init__(self, prefix: str, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.prefix = prefix
        self.interval_s = interval_s
        self.clock = clock
        self._throttles: dict[tuple[str, str], _Throttle] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(self.prefix):
            return True
        key = (record.name, str(record.msg))
        throttle = self._throttles.get(key)
        if throttle is None:
            if len(self._throttles) >= self.MAX_TEMPLATES:
                self._throttles.clear()
            throttle = self._throttles[key] = _Throttle(self.interval_s, self.clock)
        left_out = throttle.allow()
        if left_out:
            record.msg = _with_left_out(str(record.msg), left_out)
        return left_out is not None

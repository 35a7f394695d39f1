"""Time as the coordinator sees it: the wall clock in ms and timers.

The coordinator only reads time and schedules callbacks through a `Clock`, so that its state
machine can be driven in-process by a test clock (advance time, timers fire) without waiting
real seconds. Production uses `LoopClock`: `time.time()` and the running event loop's timers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock time in ms (what records and group state timestamps carry)."""
        ...

    def call_later(self, delay_ms: float, callback: Callable[..., Any], *args: Any) -> Timer:
        """Run `callback(*args)` once, `delay_ms` from now, unless cancelled."""
        ...


class LoopClock:
    """The real clock: wall time, timers on the running asyncio loop."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def call_later(self, delay_ms: float, callback: Callable[..., Any], *args: Any) -> Timer:
        return asyncio.get_running_loop().call_later(delay_ms / 1000, callback, *args)

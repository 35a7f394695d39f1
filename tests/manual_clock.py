"""A `Clock` for in-process state-machine tests: time moves only in `advance`."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any


class Timer:
    def __init__(self, due: int, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.due, self.callback, self.args, self.cancelled = due, callback, args, False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """Time moves only in `advance`; due timers fire in order, at their due time."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_000
        self.timers: list[tuple[int, int, Timer]] = []
        self.sequence = itertools.count()

    def now_ms(self) -> int:
        return self.now

    def call_later(self, delay_ms: float, callback: Callable[..., Any], *args: Any) -> Timer:
        timer = Timer(self.now + int(delay_ms), callback, args)
        heapq.heappush(self.timers, (timer.due, next(self.sequence), timer))
        return timer

    def advance(self, ms: int) -> None:
        target = self.now + ms
        while self.timers and self.timers[0][0] <= target:
            due, _, timer = heapq.heappop(self.timers)
            if not timer.cancelled:
                self.now = due
                timer.callback(*timer.args)
        self.now = target

    def live(self) -> int:
        """The timers set and neither fired nor cancelled."""
        return sum(not timer.cancelled for _, _, timer in self.timers)

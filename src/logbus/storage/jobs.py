"""Blocking file work of the storage layer that no request waits for.

Producer-state snapshots taken at a segment roll and the removal of deleted segments' files
(after `file.delete.delay.ms`) run here, in one worker thread, in the order they were asked
for, so the event loop never waits on them and two jobs of one partition never race.
Without a worker (`FileJobs()`, as in-process tests and tools use it) every job runs at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


class FileJobs:
    def __init__(self, executor: concurrent.futures.Executor | None = None) -> None:
        self._executor = executor
        self._last: concurrent.futures.Future | None = None
        self._timers: set[asyncio.TimerHandle] = set()

    def submit(self, job: Callable[..., object], *args: object) -> None:
        """Run `job(*args)` in the worker; a failure is logged (these files are hints or garbage)."""
        if self._executor is None:
            _run_logged(job, *args)
            return
        self._last = self._executor.submit(_run_logged, job, *args)

    def submit_after(self, delay_ms: int, job: Callable[..., object], *args: object) -> None:
        """Submit `job` once `delay_ms` has passed (at once without a worker or a running loop)."""
        if self._executor is None or delay_ms <= 0:
            self.submit(job, *args)
            return
        loop = asyncio.get_running_loop()

        def due() -> None:
            self._timers.discard(handle)
            self.submit(job, *args)

        handle = loop.call_later(delay_ms / 1000, due)
        self._timers.add(handle)

    async def drain(self) -> None:
        """Wait for every job submitted so far (not those still waiting out a delay); at once,
        without a pass of the event loop, when they are done (a shutdown drains for each log)."""
        if self._last is not None and not self._last.done():
            await asyncio.wrap_future(self._last)

    def cancel_delayed(self) -> None:
        """Forget jobs still waiting out a delay (at shutdown: the next start removes their files)."""
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()


def _run_logged(job: Callable[..., object], *args: object) -> None:
    try:
        job(*args)
    except Exception:
        log.exception("background file job %s failed", getattr(job, "__name__", job))

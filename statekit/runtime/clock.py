"""Processing-time clocks: the system clock, and a manual clock that tests advance by hand."""

from __future__ import annotations

import threading
import time

from statekit.errors import InvalidArgumentError


class SystemClock:
    """Wall-clock processing time in epoch milliseconds."""

    def now(self) -> int:
        """Current processing time in milliseconds."""
        return time.time_ns() // 1_000_000

    def sleep(self, ms: int) -> None:
        """Block for `ms` milliseconds (restart delays)."""
        if ms > 0:
            time.sleep(ms / 1000)

    def __call__(self) -> int:
        return self.now()


class ManualClock:
    """A clock that only moves when told to, so tests of timers, TTL and restarts never sleep.

    Examples
    --------
    >>> clock = ManualClock(1_000)
    >>> clock.advance(500)
    1500
    >>> clock.sleep(100)  # a restart delay advances the clock instead of blocking
    >>> clock.now()
    1600
    """

    def __init__(self, start_ms: int = 0) -> None:
        self._now = int(start_ms)
        self._lock = threading.Lock()

    def now(self) -> int:
        """Current processing time in milliseconds."""
        return self._now

    def advance(self, ms: int) -> int:
        """Move time forward by `ms` and return the new time."""
        if ms < 0:
            raise InvalidArgumentError(f"a clock cannot go back; advance by a non-negative amount, got {ms}.")
        with self._lock:
            self._now += int(ms)
            return self._now

    def set(self, ms: int) -> None:
        """Move time forward to `ms` (never backwards)."""
        with self._lock:
            if ms < self._now:
                raise InvalidArgumentError(f"a clock cannot go back from {self._now} to {ms}; set a time >= {self._now}.")
            self._now = int(ms)

    def sleep(self, ms: int) -> None:
        """Advance instead of blocking (used for restart delays)."""
        self.advance(max(0, int(ms)))

    def __call__(self) -> int:
        return self._now


Clock = SystemClock | ManualClock

"""Reconnect policy: exponential backoff with jitter, bounded in attempts and in time.

See docs/design/source.md for why jitter and why bounds.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["ReconnectPolicy"]


@dataclass(frozen=True, slots=True)
class ReconnectPolicy:
    """How to retry after a dropped connection.

    Attempt ``n`` (1-based) waits ``min(max_delay, initial_delay * multiplier**(n-1))``
    scaled by a random factor in ``[1 - jitter, 1]`` ("equal jitter" when 0.5). Retrying stops
    after ``max_attempts`` attempts or once ``max_elapsed`` seconds have passed since the drop
    (``None`` disables either bound; at least one must be set).
    """

    max_attempts: int | None = 10
    max_elapsed: float | None = 300.0
    initial_delay: float = 0.5
    max_delay: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.max_attempts is None and self.max_elapsed is None:
            raise ValueError("a reconnect policy needs max_attempts or max_elapsed (or both)")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if self.initial_delay < 0 or self.max_delay < self.initial_delay or self.multiplier < 1:
            raise ValueError("need 0 <= initial_delay <= max_delay and multiplier >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be within [0, 1]")

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """The successive waits before each attempt (finite when ``max_attempts`` is set)."""
        rng = rng or random.Random()
        attempt = 0
        while self.max_attempts is None or attempt < self.max_attempts:
            base = min(self.max_delay, self.initial_delay * self.multiplier**attempt)
            yield base * (1 - self.jitter * rng.random())
            attempt += 1

"""A per-token rate limit: one token bucket per minted API token, in memory.

Each bucket holds up to ``burst`` requests and refills at ``rate`` per second.
A request that finds it empty is refused with the seconds until one request's
worth has refilled (the Retry-After). Time is an argument (a monotonic clock).
Buckets untouched long enough to be full again are forgotten, so memory follows
the tokens in use, not every token ever seen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["RateLimiter"]


@dataclass(slots=True)
class _Bucket:
    level: float
    at: float


class RateLimiter:
    """Token buckets by identity."""

    def __init__(self, rate: float, burst: int) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._buckets: dict[str, _Bucket] = {}
        self._swept = 0.0

    def take(self, ident: str, now: float) -> int | None:
        """Spend one request of ``ident``'s bucket. None when allowed; otherwise
        the whole seconds to wait (at least 1) before trying again."""
        self._sweep(now)
        bucket = self._buckets.get(ident)
        if bucket is None:
            bucket = self._buckets[ident] = _Bucket(float(self.burst), now)
        bucket.level = min(float(self.burst), bucket.level + (now - bucket.at) * self.rate)
        bucket.at = now
        if bucket.level >= 1.0:
            bucket.level -= 1.0
            return None
        return max(1, math.ceil((1.0 - bucket.level) / self.rate))

    def _sweep(self, now: float) -> None:
        full_after = self.burst / self.rate
        if now - self._swept < max(full_after, 60.0):
            return
        self._swept = now
        self._buckets = {k: b for k, b in self._buckets.items() if now - b.at < full_after}

"""How fast a long command goes and when it will end: smoothed rates and an ETA that holds still.

Work is reported in lumps: the pipelined ingest embeds a group of files in one embedder call
(10-40 s each on a busy laptop) and then writes the whole group in a second, so neither the
average since the start (which includes loading the model and the first parse) nor the rate of
the last report is a fair guide, and a files-per-second ETA swings with every lump.

``SmoothedRate`` keeps an exponentially weighted moving average of the rates of the intervals
between reports, each interval weighted by its length (``1 - exp(-length / TAU_S)``), so a
lump counts for the time it took; reports less than ``MERGE_S`` apart are one lump (a group's
writes). ``Pace`` holds the counts of one run and answers the ETA: after a warm-up
(``WARMUP_S`` and ``WARMUP_ITEMS`` done) from the chunks still to embed (the chunks per item so far
times the items left, less the chunks embedded but not yet written) at the smoothed chunk
rate, or from the items left at the smoothed item rate when nothing is embedded (sync,
reindex, an ingest of unchanged files). Between reports it counts down for as long as a report
usually takes, then waits for the next one rather than running on to 0:00.
"""

from __future__ import annotations

import math

__all__ = ["MERGE_S", "TAU_S", "WARMUP_ITEMS", "WARMUP_S", "Pace", "SmoothedRate"]

TAU_S = 60.0
"""Time constant of the moving average (seconds): a report older than this weighs 1/e."""

MERGE_S = 1.0
"""Reports closer together than this (seconds) are one lump of work."""

WARMUP_S = 10.0
"""No ETA before this long (seconds) since the first report of work in flight."""

WARMUP_ITEMS = 3
"""Nor before this many items are done (or all of them, when fewer)."""


class SmoothedRate:
    """Work per second, averaged over the intervals between reports (see the module)."""

    def __init__(self, *, tau: float = TAU_S, merge: float = MERGE_S) -> None:
        self._tau = tau
        self._merge = merge
        self._rate: float | None = None
        self._interval: float | None = None
        self._mark: float | None = None  # where the next lump's interval starts
        self._work = 0.0  # the newest lump, not yet folded into the average
        self._start = 0.0
        self._end = 0.0

    def begin(self, now: float) -> None:
        """The work starts now (the first interval is measured from here); once only."""
        if self._mark is None:
            self._mark = now

    def add(self, work: float, now: float) -> None:
        """``work`` more units were done by ``now``."""
        self.begin(now)
        if work <= 0:
            return
        if self._work and now - self._end < self._merge:
            self._work += work  # the same lump
            self._end = now
            return
        if self._work:
            self._rate, self._interval = self._folded()
            self._mark = self._end
        start = now if self._mark is None else self._mark
        self._work, self._start, self._end = float(work), start, now

    def _folded(self) -> tuple[float, float]:
        """(rate, interval) with the newest lump folded in."""
        span = max(self._end - self._start, self._merge)
        observed = self._work / span
        if self._rate is None or self._interval is None:
            return observed, span
        weight = 1.0 - math.exp(-span / self._tau)
        return (
            self._rate + weight * (observed - self._rate),
            self._interval + weight * (span - self._interval),
        )

    @property
    def rate(self) -> float | None:
        """The smoothed rate (units per second), ``None`` before any work."""
        return self._folded()[0] if self._work else self._rate

    @property
    def interval(self) -> float:
        """How long a report usually takes to come (seconds; 0 before any)."""
        return self._folded()[1] if self._work else 0.0

    @property
    def last(self) -> float | None:
        """When the newest work was reported."""
        return self._end if self._work else None


class Pace:
    """Items done of ``total``, chunks embedded and written, their smoothed rates, the ETA."""

    def __init__(self, total: int | None) -> None:
        self.total = total
        self.done = 0
        self.chunks = 0  # embedded
        self.written = 0  # chunks of the items done
        self.items = SmoothedRate()
        self.embedding = SmoothedRate()
        self.begun: float | None = None
        self._settled = (0, 0)  # (done, written) before the newest lump of items

    def begin(self, now: float) -> None:
        """Work is in flight from ``now`` (the rates and the warm-up count from here)."""
        if self.begun is None:
            self.begun = now
            self.items.begin(now)
            self.embedding.begin(now)

    def embedded(self, chunks: int, now: float) -> None:
        self.begin(now)
        self.chunks += chunks
        self.embedding.add(chunks, now)

    def finished(self, done: int, now: float, *, chunks: int = 0) -> None:
        """``done`` items are done now; the ones just done wrote ``chunks`` chunks."""
        self.begin(now)
        last = self.items.last
        if last is None or now - last >= MERGE_S:  # a new lump: the one before is complete
            self._settled = (self.done, self.written)
        more = done - self.done
        self.done = done
        self.written += chunks
        self.items.add(more, now)

    def _counts(self, now: float) -> tuple[int, int]:
        """(done, written) as of the newest complete lump of items: a group's files are
        written one by one within a second, and the chunks per item of half a group would
        move the estimate back and forth while they are."""
        last = self.items.last
        if last is not None and now - last < MERGE_S:
            return self._settled
        return self.done, self.written

    def eta(self, now: float) -> float | None:
        """Seconds left, or ``None`` while warming up or without a rate."""
        if self.total is None or self.begun is None:
            return None
        if self.total - self.done <= 0:
            return 0.0
        done, written = self._counts(now)
        if done < min(WARMUP_ITEMS, self.total) or now - self.begun < WARMUP_S:
            return None
        left = self.total - done
        flow: SmoothedRate = self.items
        work = float(left)
        if written and self.embedding.rate:
            flow = self.embedding
            work = max(written / done * left - (self.chunks - written), 0.0)
        rate, last = flow.rate, flow.last
        if not rate or last is None:
            return None
        ahead = min(max(now - last, 0.0), flow.interval)
        return max(work / rate - ahead, 0.0)

"""Fewer threads when the machine is busy: a cheap, repeated check under `threads: auto`.

torch's threads wait on each other at every barrier; when another process keeps a core busy (a
second run, a data job, a colleague's notebook), two threads on two cores run slower than one:
the Quickstart took 100.5 s with 2 threads beside one busy process and 51.9 s with 1 (issue 53).
No start-up rule can see that load, and it comes and goes, so the run measures: a probe runs
`block` iterations at the current count, `block` at a neighbouring count, and `block` at the
current count again (A B A: a trend during the probe weighs on both sides alike), and keeps the
neighbour only when its median iteration is faster by more than `margin`. The first probe starts
after `first` iterations (the first steps are slow anyway); the next `interval` iterations after
each one, so a run that slowed down under a passing load climbs back when the load is gone.

On a quiet machine the cost is the neighbour's `block` iterations per probe: 3 iterations at one
thread of two, once at start-up and once every 500 iterations (about 0.8% of the Quickstart's first
200 iterations; 3 rather than 4 for that: a median of 3 still discounts the one slow iteration
after a change of count).

`ThreadProbe` is only the decision (no clock, no torch): the engine's ThreadTunerHook feeds it the
iterations' times and applies the counts it asks for.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass
class ThreadProbe:
    max_threads: int  # what `threads: auto` chose from the cores this process may use
    first: int = 5  # iterations before the first probe
    block: int = 3  # iterations per side of a probe
    interval: int = 500  # iterations from the end of one probe to the start of the next
    margin: float = 0.05  # the neighbour must be this much faster (a fraction of the current median)
    threads: int = 0  # the count in use (0: max_threads)
    next_start: int = field(init=False)
    _plan: list[int] = field(init=False, default_factory=list)
    _times: dict[int, list[float]] = field(init=False, default_factory=dict)
    _upwards: bool = field(init=False, default=False)  # which neighbour the next probe tries, between 1 and max

    def __post_init__(self):
        self.threads = self.threads or self.max_threads
        self.next_start = self.first

    @property
    def probing(self) -> bool:
        return bool(self._plan)

    def abandon(self) -> None:
        """Forget a probe under way (the run ended in it): the next starts afresh."""
        self._plan, self._times = [], {}

    def neighbour(self) -> int:
        """The count a probe compares with: one less, or one more when at 1 (or every other probe
        between 1 and max_threads), so a slowed-down run can climb back."""
        if self.threads <= 1:
            return 2
        if self.threads >= self.max_threads:
            return self.threads - 1
        return self.threads + 1 if self._upwards else self.threads - 1

    def observe(self, iteration: int, seconds: float) -> tuple[int | None, str | None]:
        """After iteration `iteration` (counted from 1) took `seconds`: (the count to run the next
        iteration with, None for no change; a line to log when the probe changed the count)."""
        if not self._plan:
            if iteration < self.next_start or self.max_threads < 2:
                return None, None
            other = self.neighbour()
            self._plan = [self.threads] * self.block + [other] * self.block + [self.threads] * self.block
            self._times = {self.threads: [], other: []}
            return None, None  # the probe's first block runs at the current count
        ran_with = self._plan.pop(0)
        self._times[ran_with].append(seconds)
        if self._plan:
            return (self._plan[0] if self._plan[0] != ran_with else None), None
        return self._decide(iteration)

    def _decide(self, iteration: int) -> tuple[int | None, str | None]:
        current = self.threads
        (other,) = (count for count in self._times if count != current)
        current_median = statistics.median(self._times[current])
        other_median = statistics.median(self._times[other])
        self.next_start = iteration + self.interval
        self._upwards = not self._upwards
        if other_median < current_median * (1 - self.margin):
            self.threads = other
            why = "the machine is busy" if other < current else "the machine is quieter"
            return other, (f"threads {current} -> {other} ({why}: {other_median:.3g} s per iteration "
                           f"against {current_median:.3g} s, medians of {self.block} and {2 * self.block} "
                           f"iterations; next check at iteration {self.next_start})")
        return None, None

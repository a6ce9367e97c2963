"""How many intra-op threads a run computes with: top-level key `threads: auto | N`.

torch starts one thread per core the machine has, whatever this process may use. In a container
limited by a CPU quota (`docker --cpus 2`, Kubernetes `limits.cpu`) or a job pinned to some
cores (`taskset`, Slurm's `--cpus-per-task`), that is more threads than cores, and threads that
wait on each other at every barrier: on a 2-core machine beside one busy process the Quickstart
took 100.5 s with torch's default against 51.9 s with one thread (issue 53).

`auto` (the default) takes the cores this process may run on: its affinity mask, capped by the
cgroup's CPU quota (v2 `cpu.max`, v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`), rounded down, at
least 1. An `OMP_NUM_THREADS` set in the environment is the user's choice and is kept. `N` pins N
threads. The choice and its reason are one log line; data-loader workers (`num_workers: auto`)
count the same cores (data/loader.py).

A count above the usable cores (`threads: 64` on 2 cores: 0.03 s -> 6.4 s an iteration, issue 63)
is a warning at start-up naming the usable cores; an OMP_NUM_THREADS that is not a whole number
>= 1 (libgomp ignores `abc`, `0`, `-3` and torch runs its default count) is refused in one line.
A `deterministic` run records its count in the checkpoint (meta["threads"]); resumed where
`auto` would take another count, it takes the recorded one again while the cores allow it, and
says when it cannot, or when the user's count differs (`resumed_threads`): sums split over
another number of threads add in another order (docs/checkpoints.md).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from framework.errors import ConfigError

CGROUP = Path("/sys/fs/cgroup")


def affinity_cores() -> int:
    """The cores this process may run on (its affinity mask; every core where there is none)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cgroup_quota(root: Path = CGROUP) -> float | None:
    """The CPU quota of this process's cgroup in cores (2.5 for `docker --cpus 2.5`), or None
    where there is none (no cgroup file, or `max` / -1: unlimited)."""
    for quota_file, period_file, parse in ((root / "cpu.max", None, _cgroup_v2),
                                           (root / "cpu/cpu.cfs_quota_us", root / "cpu/cpu.cfs_period_us", _cgroup_v1),
                                           (root / "cpu,cpuacct/cpu.cfs_quota_us", root / "cpu,cpuacct/cpu.cfs_period_us",
                                            _cgroup_v1)):
        try:
            text = quota_file.read_text()
            period = period_file.read_text() if period_file is not None else None
        except OSError:
            continue
        return parse(text, period)
    return None


def _cgroup_v2(text: str, _period) -> float | None:
    fields = text.split()  # "<quota> <period>", or "max <period>"
    if len(fields) != 2 or fields[0] == "max":
        return None
    return int(fields[0]) / int(fields[1])


def _cgroup_v1(quota: str, period: str) -> float | None:
    quota_us, period_us = int(quota), int(period)
    return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us


def usable_cores(affinity: int | None = None, quota: float | None | str = "read") -> tuple[int, str]:
    """(cores, why): the affinity mask's cores, capped by the cgroup quota rounded down (at least 1)."""
    affinity = affinity_cores() if affinity is None else affinity
    quota = cgroup_quota() if quota == "read" else quota
    if quota is not None and math.floor(quota) < affinity:
        return max(1, math.floor(quota)), f"the CPU quota of this container, {quota:g} cores, of {affinity} usable"
    return affinity, f"{affinity} core{'s' if affinity != 1 else ''} this process may use"


def omp_num_threads(environ=os.environ) -> int | None:
    """OMP_NUM_THREADS from the environment as a count, None when unset or empty. Anything but a
    whole number >= 1 is a ConfigError: OpenMP ignores it (libgomp prints "Invalid value") and
    torch runs one thread per core, while the run would log the text as its count."""
    text = environ.get("OMP_NUM_THREADS", "")
    if not text:
        return None
    try:
        count = int(text.strip())
    except ValueError:
        count = 0
    if count < 1:
        raise ConfigError(f"OMP_NUM_THREADS={text!r} in the environment: expected a whole number >= 1 (OpenMP "
                          "ignores anything else and torch would run its default count); set it to a count or unset it")
    return count


def resolve_threads(setting, environ=os.environ, affinity: int | None = None,
                    quota: float | None | str = "read") -> tuple[int | None, str]:
    """(threads to set, or None to leave torch's count; the log line)."""
    if setting != "auto":
        return int(setting), f"threads {setting} (threads: {setting})"
    from_environment = omp_num_threads(environ)
    if from_environment is not None:
        return None, f"threads {from_environment} (OMP_NUM_THREADS in the environment)"
    cores, why = usable_cores(affinity, quota)
    return cores, f"threads {cores} (threads: auto: {why})"


def oversubscription_warning(threads: int, cores: int, why: str) -> str | None:
    """A warning line when `threads` outnumber the usable `cores` (`why`: usable_cores' reason)."""
    if threads <= cores:
        return None
    return (f"warning: threads {threads} is more than the usable cores ({why}): threads that outnumber the "
            f"cores wait on each other at every step, each iteration can take many times longer; use threads: auto "
            f"or at most threads: {cores}")


def auto_chosen(setting, environ=os.environ) -> bool:
    """Whether `threads: auto` chose the count (not `threads: N`, not OMP_NUM_THREADS): the
    engine then adapts it to the machine's load (runtime/thread_tuning.py)."""
    return setting == "auto" and not environ.get("OMP_NUM_THREADS")


def apply_threads(setting, log=None) -> str:
    """Set torch's intra-op threads for `threads: setting`; the log line. A count above the
    usable cores is warned about through `log` (a logging.Logger) when given."""
    import torch

    threads, line = resolve_threads(setting)
    if threads is not None and threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    warning = oversubscription_warning(torch.get_num_threads(), *usable_cores())
    if warning is not None and log is not None:
        log.warning(warning)
    return line


def resumed_threads(recorded: int | None, current: int, setting, environ=os.environ,
                    cores: int | None = None) -> tuple[int | None, str | None, bool]:
    """A deterministic run resumed from a checkpoint trained with `recorded` threads, now at
    `current`: (the count to set, or None to keep `current`; the line to log, or None; whether
    the line is a warning). Another count adds its partial sums in another order, so the resumed
    run would end elsewhere than an uninterrupted one. Under `threads: auto` the recorded count
    is taken again when the usable cores allow it; with fewer cores, or a count the user chose
    (`threads: N`, OMP_NUM_THREADS), the run keeps its count and warns. Checkpoints written
    before the count was recorded (None) resume as they always did."""
    if recorded is None or recorded == current:
        return None, None, False
    trained = f"a deterministic run trained with {recorded} thread{'s' if recorded != 1 else ''}"
    differs = ("the result will differ from an uninterrupted run (deterministic runs repeat bit for bit only "
               "at one thread count)")
    if not auto_chosen(setting, environ):
        chosen = f"threads: {setting}" if setting != "auto" else "OMP_NUM_THREADS"
        return None, (f"warning: resuming {trained} at {current} ({chosen}): {differs}; threads={recorded} "
                      "resumes it exactly"), True
    cores = usable_cores()[0] if cores is None else cores
    if recorded > cores:
        return None, (f"warning: resuming {trained} on {cores} usable core{'s' if cores != 1 else ''}: it "
                      f"continues with {current}, and {differs}; threads={recorded} resumes it exactly, more slowly"), True
    return recorded, (f"threads {recorded} (the checkpoint's: a deterministic run resumes at the count it was "
                      f"trained with, bit for bit; threads: auto would take {current} here)"), False

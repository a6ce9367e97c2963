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
"""

from __future__ import annotations

import math
import os
from pathlib import Path

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


def resolve_threads(setting, environ=os.environ, affinity: int | None = None,
                    quota: float | None | str = "read") -> tuple[int | None, str]:
    """(threads to set, or None to leave torch's count; the log line)."""
    if setting != "auto":
        return int(setting), f"threads {setting} (threads: {setting})"
    if environ.get("OMP_NUM_THREADS"):
        return None, f"threads {environ['OMP_NUM_THREADS']} (OMP_NUM_THREADS in the environment)"
    cores, why = usable_cores(affinity, quota)
    return cores, f"threads {cores} (threads: auto: {why})"


def auto_chosen(setting, environ=os.environ) -> bool:
    """Whether `threads: auto` chose the count (not `threads: N`, not OMP_NUM_THREADS): the
    engine then adapts it to the machine's load (runtime/thread_tuning.py)."""
    return setting == "auto" and not environ.get("OMP_NUM_THREADS")


def apply_threads(setting) -> str:
    """Set torch's intra-op threads for `threads: setting`; the log line."""
    import torch

    threads, line = resolve_threads(setting)
    if threads is not None and threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    return line

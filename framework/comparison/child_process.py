"""A training process that ends with the comparison that started it.

The runs live in sessions of their own (so a terminal's Ctrl-C reaches them once, through the
runner), which also means nothing ends them when tools/compare.py dies without passing a signal
on: SIGKILL, the OOM killer, a closed ssh session's SIGKILL. On Linux each run asks the kernel for
SIGTERM when its parent dies (prctl PR_SET_PDEATHSIG): it saves a checkpoint and exits, as for a
SIGTERM passed on, and a rerun of the same command resumes it. Elsewhere there is no such request;
such a run goes on alone and is ended by its process group (`kill -TERM -- -<pid>`, the pid in
its work dir's `.lock`), as docs/tools.md says.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # linux/prctl.h
DEATH_SIGNAL = signal.SIGTERM  # the run saves a checkpoint first (tools/train.py's stop signals)

# Loaded before any fork: after fork, in a multi-threaded parent, only async-signal-safe work is
# safe, and loading a library is not.
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def ends_with_parent_supported() -> bool:
    return _LIBC is not None


def child_setup(cores: list[int] | None) -> Callable[[], None] | None:
    """The `preexec_fn` of a run: pinned to `cores` (where the system can pin) and, on Linux,
    sent DEATH_SIGNAL when this process dies. None when there is nothing to do."""
    parent = os.getpid()
    pin = cores is not None and hasattr(os, "sched_setaffinity")
    if not pin and _LIBC is None:
        return None

    def setup() -> None:
        if pin:
            os.sched_setaffinity(0, cores)
        if _LIBC is not None:
            _LIBC.prctl(PR_SET_PDEATHSIG, int(DEATH_SIGNAL), 0, 0, 0)
            if os.getppid() != parent:  # the parent died before the request was made: it would never come
                os.kill(os.getpid(), DEATH_SIGNAL)

    return setup

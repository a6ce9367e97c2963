"""Keep freed host memory for the next step (glibc on Linux), top-level key `malloc_tuning`.

A training step frees and allocates the same few megabytes of tensors every iteration. glibc's
allocator decides from its own history whether to give freed memory back to the operating
system (its trim and mmap thresholds grow only after a large block has been freed), so two
scripts doing the same work can differ: measured on the pix2pix benchmark (64x64, batch 8), the
framework's process returned and re-faulted about 600 pages per iteration (2.4 MB) where the
plain script's did not. Setting the two thresholds ends that whatever the history:

    M_MMAP_THRESHOLD  32 MiB   blocks below this come from the heap, not a fresh mapping
    M_TRIM_THRESHOLD  64 MiB   free memory at the top of the heap kept up to this much

(the values a long-running glibc process reaches on its own; 32 MiB is glibc's ceiling for the
mmap threshold). It costs at most 64 MiB of freed memory not handed back. Nothing is changed
when the process is not on glibc, or when the user already chose: a `MALLOC_*_` tuning variable
or another allocator in `LD_PRELOAD` (jemalloc, tcmalloc).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 64 << 20
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")

logger = logging.getLogger("framework")


def tune_malloc(enabled: bool = True) -> bool:
    """Set glibc's thresholds (see the module doc); returns whether they were set."""
    if not enabled or not sys.platform.startswith("linux"):
        return False
    if any(name in os.environ for name in USER_SETTINGS) or os.environ.get("LD_PRELOAD"):
        return False  # the user tuned the allocator, or replaced it
    libc = _glibc()
    if libc is None:
        return False
    done = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if not done:
        logger.debug("malloc_tuning: mallopt refused the thresholds; glibc's defaults stay")
    return done


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version"):  # glibc only: musl's mallopt does nothing
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return libc

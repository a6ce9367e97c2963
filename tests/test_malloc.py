"""malloc_tuning: freed host memory is kept for the next step instead of being returned to the
operating system and faulted in again (glibc only)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from framework.runtime.malloc import _glibc, tune_malloc

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or _glibc() is None, reason="glibc only")

# Ten rounds of a step's pattern: 40 blocks of 100 KB (each below glibc's initial 128 KB mmap
# threshold, so from the heap), written, then all freed. Prints the page faults of rounds 2-10.
CHURN = """
import ctypes, resource, sys
from framework.runtime.malloc import tune_malloc
print("tuned" if tune_malloc(sys.argv[1] == "on") else "untouched", file=sys.stderr)
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
def step():
    blocks = [libc.malloc(100 << 10) for _ in range(40)]
    for block in blocks:
        ctypes.memset(block, 1, 100 << 10)
    for block in reversed(blocks):
        libc.free(block)
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(9):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def churn_faults(setting: str, **env) -> tuple[int, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "LD_PRELOAD"}
    done = subprocess.run([sys.executable, "-c", CHURN, setting], env={**clean, "PYTHONPATH": str(REPO), **env},
                          capture_output=True, text=True, check=True)
    return int(done.stdout.strip()), done.stderr.strip()


def test_freed_memory_is_kept_for_the_next_step():
    untouched, said = churn_faults("off")
    assert said == "untouched"
    assert untouched > 9 * 500  # glibc's defaults: every round hands ~4 MB back and faults it in again
    tuned, said = churn_faults("on")
    assert said == "tuned"
    assert tuned < 100  # kept: the rounds reuse the same pages


def test_a_users_own_allocator_settings_are_left_alone():
    faults, said = churn_faults("on", MALLOC_TRIM_THRESHOLD_="131072")
    assert said == "untouched" and faults > 9 * 500


def test_off_or_elsewhere_changes_nothing(monkeypatch):
    assert tune_malloc(False) is False
    monkeypatch.setattr(sys, "platform", "darwin")
    assert tune_malloc(True) is False

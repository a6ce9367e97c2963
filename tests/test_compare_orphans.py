"""tools/compare.py killed with SIGKILL (nothing passed on) leaves no training process running:
the kernel sends each run SIGTERM when its parent dies (framework/comparison/child_process.py).
Real processes, bounded waits; a run still alive at the end is killed by the test."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from test_compare import QUICKSTART, TINY

from framework.comparison.child_process import ends_with_parent_supported
from support import REPO

# Far more iterations than the test waits for: only the death signal can end this run.
ENDLESS = [*TINY, "train.max_iters=100000", "train.val_interval=100000"]


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie waiting for its new parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not ends_with_parent_supported(), reason="the parent-death signal (prctl) is Linux's")
def test_a_killed_comparison_ends_the_run_it_started(tmp_path):
    config = tmp_path / "quick.yaml"
    config.write_text(f"_base_: [{QUICKSTART}]\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(REPO / "tools/compare.py"), "--configs", str(config), "--seeds", "0",
               "--jobs", "1", "--work-dir", str(tmp_path / "out"), *ENDLESS]
    compare = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_dir = tmp_path / "out" / "quick" / "seed0"
    child = None
    try:
        deadline = time.monotonic() + 240
        while not (run_dir / "checkpoints" / "iter_10.pth").exists():  # training, its handlers set up
            assert compare.poll() is None and time.monotonic() < deadline, "the run did not reach iteration 10"
            time.sleep(0.05)
        child = json.loads((run_dir / ".lock").read_text())["pid"]
        assert not gone(child)
        compare.send_signal(signal.SIGKILL)
        compare.wait(timeout=30)
        deadline = time.monotonic() + 30
        while not gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone(child), f"train.py (pid {child}) still runs {30} s after compare.py was killed"
    finally:
        if compare.poll() is None:
            compare.kill()
            compare.wait()
        if child is not None and not gone(child):
            os.kill(child, signal.SIGKILL)

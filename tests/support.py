"""Helpers shared by tests (tests/ is on sys.path through pytest.ini's pythonpath)."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_tool(tool: str, *args, cwd=REPO, timeout=600) -> subprocess.CompletedProcess:
    """Run tools/<tool>.py as a user would, against this checkout's framework."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(REPO / "tools" / f"{tool}.py"), *map(str, args)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


# Overrides shrinking the Quickstart config to a run of a few seconds.
TINY_SEGMENTATION = [
    "train.max_iters=20", "train.val_interval=10", "train.ckpt_interval=10", "train.log_interval=5",
    "data.train.dataset.num_samples=64", "data.val.dataset.num_samples=16", "data.train.num_workers=0",
    "data.train.batch_size=4", "data.val.batch_size=8", "device=cpu",
]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_command(nproc: int, script, *args, launcher=()) -> list[str]:
    launcher = launcher or ("--nproc_per_node", str(nproc), "--master_addr", "127.0.0.1",
                            "--master_port", str(free_port()))
    return [sys.executable, "-m", "torch.distributed.run", *map(str, launcher), str(script), *map(str, args)]


def run_torchrun(nproc: int, *args, script=REPO / "tools" / "train.py", launcher=(),
                 timeout=300) -> subprocess.CompletedProcess:
    """`script` (default tools/train.py) under torchrun: `nproc` CPU processes on 127.0.0.1, gloo."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run(torchrun_command(nproc, script, *args, launcher=launcher), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)

"""Helpers shared by tests (tests/ is on sys.path through pytest.ini's pythonpath)."""

import importlib.util
import io
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_tool(tool: str, *args, cwd=REPO, timeout=600) -> subprocess.CompletedProcess:
    """Run tools/<tool>.py as a user would, against this checkout's framework."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(REPO / "tools" / f"{tool}.py"), *map(str, args)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def call_tool(tool: str, *args) -> subprocess.CompletedProcess:
    """Run tools/<tool>.py's main in this process, as `run_tool` would in a new one, without the
    interpreter and import start-up (seconds on a busy 2-core machine)."""
    from framework.engine.cli import run

    spec = importlib.util.spec_from_file_location(f"tools_{tool}", REPO / "tools" / f"{tool}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        code = run(module.main, module.parse_args(), [str(a) for a in args])
    return subprocess.CompletedProcess([tool, *args], code, stdout.getvalue(), stderr.getvalue())


# Overrides shrinking the Quickstart config to a run of a few seconds.
TINY_SEGMENTATION = [
    "train.max_iters=20", "train.val_interval=10", "train.ckpt_interval=10", "train.log_interval=5",
    "data.train.dataset.num_samples=64", "data.val.dataset.num_samples=16", "data.train.num_workers=0",
    "data.train.batch_size=4", "data.val.batch_size=8", "device=cpu",
]

"""Helpers shared by tests (tests/ is on sys.path through pytest.ini's pythonpath)."""

import multiprocessing
import os
import runpy
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def tool_command(tool: str, *args) -> list[str]:
    return [sys.executable, str(REPO / "tools" / f"{tool}.py"), *map(str, args)]


def tool_env(**extra) -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **extra}


def run_tool(tool: str, *args, cwd=REPO, timeout=600) -> subprocess.CompletedProcess:
    """Run tools/<tool>.py as a user would, against this checkout's framework."""
    return subprocess.run(tool_command(tool, *args), cwd=cwd, env=tool_env(), capture_output=True,
                          text=True, timeout=timeout)


def start_tool(tool: str, *args, cwd=REPO, log=None) -> subprocess.Popen:
    """Start tools/<tool>.py in the background, its output going to the file `log`."""
    with open(log or os.devnull, "ab") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(tool_command(tool, *args), cwd=cwd, env=tool_env(), stdout=out,
                                stderr=subprocess.STDOUT)


# Overrides shrinking the Quickstart config to a run of a few seconds.
TINY_SEGMENTATION = [
    "train.max_iters=20", "train.val_interval=10", "train.ckpt_interval=10", "train.log_interval=5",
    "data.train.dataset.num_samples=64", "data.val.dataset.num_samples=16", "data.train.num_workers=0",
    "data.train.batch_size=4", "data.val.batch_size=8", "device=cpu",
]


# Tools started from a fork server that has imported the framework once: a run starts in a
# fraction of a second instead of several (imports dominate tiny runs), which is what lets
# the kill-and-resume tests interrupt and resume a run many times. Each run is still its own
# process, running tools/<tool>.py's __main__, that a test can SIGKILL.
_FORK_SERVER = multiprocessing.get_context("forkserver")
_FORK_SERVER.set_forkserver_preload(["framework", "framework.engine.runner", "torch.utils.tensorboard"])


def _run_tool_here(tool: str, args: list[str], cwd: str, log: str) -> None:
    import torch

    multiprocessing.set_start_method("fork", force=True)  # DataLoader workers as in a plain process
    torch.set_num_threads(1)  # as OMP_NUM_THREADS=1 in run_tool
    out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.chdir(cwd)
    path = str(REPO / "tools" / f"{tool}.py")
    sys.argv = [path, *args]
    runpy.run_path(path, run_name="__main__")  # ends in sys.exit(status): the process's exit code


def fork_tool(tool: str, *args, cwd=REPO, log=os.devnull) -> multiprocessing.Process:
    """Start tools/<tool>.py as a process forked from the fork server; output goes to `log`.
    `.pid`, `.join()` and `.exitcode` (-N when killed by signal N) as for any Process."""
    process = _FORK_SERVER.Process(target=_run_tool_here, args=(tool, list(map(str, args)), str(cwd), str(log)))
    process.start()
    return process

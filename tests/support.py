"""Helpers shared by tests (tests/ is on sys.path through pytest.ini's pythonpath)."""

import importlib.util
import io
import multiprocessing
import os
import re
import runpy
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_tool(tool: str, *args, cwd=REPO, timeout=600) -> subprocess.CompletedProcess:
    """Run tools/<tool>.py as a user would, against this checkout's framework."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(REPO / "tools" / f"{tool}.py"), *map(str, args)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def code_blocks(page: str, language: str, section: str | None = None) -> list[str]:
    """The fenced `language` blocks of docs/`page` (of its `## section` only, when given), in order."""
    text = (REPO / "docs" / page).read_text()
    if section:
        text = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def named(name: str):
    """`msg` for torch.testing.assert_close: torch's own message (the greatest difference, where,
    how many elements) prefixed by the tensor's name."""
    return lambda message: f"{name}: {message}"


def call_tool(tool: str, *args) -> subprocess.CompletedProcess:
    """Run tools/<tool>.py's main in this process, as `run_tool` would in a new one, without the
    interpreter and import start-up (seconds on a busy 2-core machine)."""
    from framework.runtime.cli import run

    spec = importlib.util.spec_from_file_location(f"tools_{tool}", REPO / "tools" / f"{tool}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return captured(lambda argv: run(module.main, module.parse_args(), argv), [str(a) for a in args])


def captured(main, argv: list[str]) -> subprocess.CompletedProcess:
    """`main(argv)`'s exit status (its return value, or a SystemExit's code, as a process would
    end with) and what it printed."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        try:
            code = main(argv)
        except SystemExit as exit:  # sys.exit("text") prints the text, as the interpreter would
            if isinstance(exit.code, str):
                print(exit.code, file=sys.stderr)
            code = exit.code if isinstance(exit.code, int) else 0 if exit.code is None else 1
    return subprocess.CompletedProcess(argv, code, stdout.getvalue(), stderr.getvalue())


def train_run(work_dir, config, *overrides, runner=call_tool) -> Path:
    """Train `config` into `work_dir` (through `runner`: call_tool in-process, run_tool or
    run_forked_tool in a new process), fail the test with its stderr if it fails, return the dir.
    Module-scoped fixtures share one trained run; a test that changes it copies it first
    (`shutil.copytree(run, tmp_path / "run")`)."""
    extra = {"folder": Path(work_dir) / "out"} if runner is run_forked_tool else {}
    result = runner("train", "--config", config, "--work-dir", work_dir, *overrides, **extra)
    assert result.returncode == 0, result.stderr + result.stdout[-2000:]
    return Path(work_dir)


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


# The Quickstart config at its smallest: a tiny UNet on 32x32 images, epochs of 5 iterations.
TINY_UNET = [
    "device=cpu", "deterministic=true", "task.model.base_channels=8", "task.model.depth=2",
    "data.train.dataset.size=32", "data.train.dataset.num_samples=22", "data.train.batch_size=4",
    "data.train.num_workers=1", "data.val.dataset.size=32", "data.val.dataset.num_samples=8",
    "data.val.batch_size=8",
]


# Tools started from a fork server that has imported the framework once: a run starts in a
# fraction of a second instead of several (imports dominate tiny runs), which is what lets
# the kill-and-resume tests interrupt and resume a run many times. Each run is still its own
# process, running tools/<tool>.py's __main__, that a test can SIGKILL.
_FORK_SERVER = multiprocessing.get_context("forkserver")
# Preloaded too: what every run imports on the way (seconds of the run's start-up otherwise):
# albumentations (the transforms), torch._dynamo (torch imports it at an optimizer's first
# add_param_group), torch._inductor (torch.use_deterministic_algorithms imports it).
_FORK_SERVER.set_forkserver_preload(["framework", "framework.engine.build", "torch.utils.tensorboard",
                                     "albumentations", "torch._dynamo", "torch._inductor"])


def _run_tool_here(tool: str, args: list[str], cwd: str, log: str, errors: str | None, env: dict) -> None:
    import torch

    os.environ.update(env)
    multiprocessing.set_start_method("fork", force=True)  # DataLoader workers as in a plain process
    torch.set_num_threads(1)  # as OMP_NUM_THREADS=1 in run_tool
    os.dup2(os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT), 1)
    os.dup2(os.open(errors or log, os.O_WRONLY | os.O_APPEND | os.O_CREAT), 2)
    os.chdir(cwd)
    path = _script(tool)
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(path))  # as `python path` does
    runpy.run_path(path, run_name="__main__")  # ends in sys.exit(status): the process's exit code


def _script(tool: str) -> str:
    return tool if tool.endswith(".py") else str(REPO / "tools" / f"{tool}.py")


def fork_tool(tool: str, *args, cwd=REPO, log=os.devnull, errors=None, env=None) -> multiprocessing.Process:
    """Start tools/<tool>.py (or the script at the path `tool`, ending in .py) as a process forked
    from the fork server; its output goes to the file `log` (stderr to `errors` if given), `env`
    is added to its environment. `.pid`, `.join()` and `.exitcode` (-N when killed by signal N)
    as for any Process."""
    return fork(_run_tool_here, tool, list(map(str, args)), str(cwd), str(log), errors and str(errors), env or {})


def fork(target, *args) -> multiprocessing.Process:
    """Run `target(*args)` (a function of an importable module) in a process from the fork server."""
    process = _FORK_SERVER.Process(target=target, args=args)
    process.start()
    return process


def run_forked_tool(tool: str, *args, folder, cwd=REPO, env=None, timeout=300) -> subprocess.CompletedProcess:
    """`run_tool`, through the fork server: stdout and stderr are kept in files in `folder`."""
    return run_forked_ranks(1, tool, *args, folder=folder, cwd=cwd, env=env, timeout=timeout)


def run_forked_ranks(nproc: int, tool: str, *args, folder, cwd=REPO, env=None, timeout=300,
                     grace=30) -> subprocess.CompletedProcess:
    """tools/<tool>.py (or the script `tool`) as `nproc` ranks of one gloo group on 127.0.0.1,
    forked from the fork server with the variables torchrun would set: the same multi-process
    training as under torchrun (`torchrun_command`) without its start-up (about 7 s on 2
    cores). For tests of what the processes compute; what torchrun itself does (restarts,
    signals, its failure summary) is tested through torchrun. One process (`nproc=1`) gets no
    distributed variables.

    Each rank's stdout and stderr go to files in `folder`; the result holds them concatenated in
    rank order, the first non-zero exit status, and `exit_codes` (each rank's). When a rank
    fails the others are killed after `grace` seconds, as torchrun would, so that no test waits
    on a collective for ever."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port() if nproc > 1 else None
    name = Path(_script(tool)).stem
    processes, logs = [], []
    for rank in range(nproc):
        suffix = f".rank{rank}" if nproc > 1 else ""
        out, err = folder / f"{name}.stdout{suffix}", folder / f"{name}.stderr{suffix}"
        out.write_text(""), err.write_text("")
        group = {} if nproc == 1 else {
            "RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0", "WORLD_SIZE": str(nproc),
            "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        processes.append(fork_tool(tool, *args, cwd=cwd, log=out, errors=err, env={**(env or {}), **group}))
        logs.append((out, err))
    deadline, failed_at = time.monotonic() + timeout, None
    while any(p.is_alive() for p in processes):
        now = time.monotonic()
        if failed_at is None and any(p.exitcode not in (None, 0) for p in processes):
            failed_at = now
        if now > deadline or (failed_at is not None and now > failed_at + grace):
            for p in processes:
                p.kill()
            if now > deadline:
                raise TimeoutError(f"{name}.py ({nproc} processes) did not finish within {timeout}s")
        time.sleep(0.02)
    for p in processes:
        p.join()
    codes = [p.exitcode for p in processes]
    result = subprocess.CompletedProcess([tool, *args], next((c for c in codes if c), 0),
                                         "".join(out.read_text() for out, _ in logs),
                                         "".join(err.read_text() for _, err in logs))
    result.exit_codes = codes
    return result

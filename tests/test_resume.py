"""Exact resume: runs interrupted by SIGKILL (anywhere, even mid-write), SIGTERM and SIGINT and
resumed with --resume, or restarted by torchrun, end bit-identical to an uninterrupted run:
same per-iteration losses, same parameters, optimizer and scheduler states and random generators.
"""

import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from probes import read_losses
from support import REPO, TINY_UNET, fork_tool, named, run_forked_ranks

MAX_ITERS = 40
COMMON = [f"train.max_iters={MAX_ITERS}", "train.ckpt_interval=3", "train.log_interval=1", "train.keep_last=2",
          "custom_imports=[probes]"]
# What a kind of task is tested with: (config, overrides, iterations per epoch). Epochs are
# not multiples of the checkpoint interval, so most checkpoints fall mid-epoch; random
# augmentation stays on, DataLoaders have a worker.
CASES = {
    "segmentation": (REPO / "configs/segmentation/unet_shapes.yaml",
                     [*TINY_UNET, "train.val_interval=13", *COMMON], 5),
    # pix2pix with batch norm, flips, an EMA generator and Adam on both networks; the generator's
    # dropout draws from the global torch generator every iteration, so only a restored random
    # state (not a fresh seed) resumes it exactly.
    "gan": (REPO / "projects/pix2pix/configs/pix2pix_shapes.yaml",
            ["device=cpu", "deterministic=true", "task.generator.num_downs=5", "task.generator.base_channels=8",
             "+task.generator.dropout=0.5",
             "task.discriminator.base_channels=8", "+task.ema_decay=0.9", "data.train.dataset.size=32",
             "data.train.dataset.num_samples=22", "data.train.batch_size=4", "data.train.num_workers=1",
             "data.val.dataset.size=32", "data.val.dataset.num_samples=8", "data.val.batch_size=8",
             "train.val_interval=13", "train.val_at_start=false", *COMMON,
             "custom_imports=[projects.pix2pix, probes]"], 5),
}
# (signal, exit status) of each interruption, in order: SIGKILL anywhere, then graceful stops.
INTERRUPTIONS = [(signal.SIGKILL, -9)] * 5 + [(signal.SIGTERM, 143), (signal.SIGINT, 130)]


def train(case, work_dir, losses_file, *extra, delay=0.0):
    config, overrides, _ = CASES[case]
    hook = f"hooks=[{{type: LossRecorderHook, path: '{losses_file}', delay: {delay}}}]"
    return fork_tool("train", "--config", config, "--work-dir", work_dir, *overrides, hook, *extra,
                     cwd=REPO / "tests", log=work_dir / "console.log")


def last_recorded_iteration(losses_file) -> int:
    try:
        lines = losses_file.read_text().splitlines()
    except FileNotFoundError:
        return 0
    return int(lines[-1].split()[0]) if lines else 0


def interrupt_near(process, losses_file, iteration, sig, timeout=120):
    deadline = time.monotonic() + timeout
    while last_recorded_iteration(losses_file) < iteration:
        assert process.is_alive(), f"the run ended before iteration {iteration}"
        assert time.monotonic() < deadline, f"no iteration {iteration} within {timeout}s"
        time.sleep(0.005)
    os.kill(process.pid, sig)
    process.join(timeout)
    return process.exitcode


def assert_same_state(a, b, where="state"):
    assert type(a) is type(b), where
    if isinstance(a, torch.Tensor):  # bit for bit; a failure says by how much
        torch.testing.assert_close(a, b, atol=0, rtol=0, msg=named(where))
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same_state(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_state(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


@pytest.mark.parametrize("case", list(CASES))
def test_interrupted_runs_resume_bit_identical(tmp_path, case):
    reference_dir, chain_dir = tmp_path / "reference", tmp_path / "interrupted"
    reference_dir.mkdir(), chain_dir.mkdir()
    reference = train(case, reference_dir, reference_dir / "losses.txt")  # runs alongside the chain

    # Interruption points: random, increasing, at least one checkpoint interval apart.
    rng = random.Random(5)
    targets = [4 + 5 * i + rng.randrange(3) for i in range(len(INTERRUPTIONS))]
    losses_file = chain_dir / "losses.txt"
    for i, ((sig, expected_status), target) in enumerate(zip(INTERRUPTIONS, targets)):
        process = train(case, chain_dir, losses_file, *(["--resume"] if i else []), delay=0.03)
        status = interrupt_near(process, losses_file, target, sig)
        assert status == expected_status, (sig, (chain_dir / "console.log").read_text()[-2000:])
    final = train(case, chain_dir, losses_file, "--resume")
    for process, folder in ((final, chain_dir), (reference, reference_dir)):
        process.join(300)
        assert process.exitcode == 0, (folder / "console.log").read_text()[-2000:]

    # Every iteration's loss, including those redone after a SIGKILL, equals the reference's.
    expected = dict(read_losses(reference_dir / "losses.txt"))
    assert sorted(expected) == list(range(1, MAX_ITERS + 1))
    recorded = read_losses(losses_file)
    assert {it for it, _ in recorded} == set(expected)
    for iteration, losses in recorded:
        assert losses == expected[iteration], f"iteration {iteration}"

    final_ckpt = f"checkpoints/iter_{MAX_ITERS}.pth"
    resumed, uninterrupted = (torch.load(d / final_ckpt, weights_only=True) for d in (chain_dir, reference_dir))
    for part in ("task", "optim", "rng"):
        assert_same_state(resumed[part], uninterrupted[part], part)
    assert resumed["meta"]["epoch"] == uninterrupted["meta"]["epoch"]
    # Evaluations redone after a SIGKILL replace the first ones in metrics.jsonl.
    assert (chain_dir / "metrics.jsonl").read_text() == (reference_dir / "metrics.jsonl").read_text()

    # The runs resumed mid-epoch, and graceful stops resumed where they stopped, redoing nothing.
    log = (chain_dir / "console.log").read_text()
    resumed_at = [tuple(map(int, m)) for m in re.findall(r"at iteration (\d+) \(epoch (\d+), (\d+) batches", log)]
    assert len(resumed_at) == len(INTERRUPTIONS)
    epoch_length = CASES[case][2]
    assert any(0 < batches < epoch_length for _, _, batches in resumed_at), resumed_at
    stops = [int(m) for m in re.findall(r"stopped by SIG(?:TERM|INT) at iteration (\d+)", log)]
    assert len(stops) == 2 and [it for it, _, _ in resumed_at[-2:]] == stops


def torchrun(nproc, config, work_dir, *args, restarts=0):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
         f"--max-restarts={restarts}", str(REPO / "tools/train.py"), "--config", config, "--work-dir", work_dir,
         *args], cwd=REPO / "tests", env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("nproc", [1, 2])
def test_torchrun_restart_resumes_by_itself_and_ends_identical(tmp_path, nproc):
    """A worker dies at iteration 8 of its first attempt; torchrun --max-restarts=1 restarts the
    group and auto_resume (on for restarts) continues from the checkpoint of iteration 6. With 2
    processes only rank 1 dies, and each rank's random state must come back as its own."""
    config, overrides, _ = CASES["segmentation"]
    reference_dir, restarted_dir = tmp_path / "reference", tmp_path / "restarted"
    reference_dir.mkdir(), restarted_dir.mkdir()
    if nproc == 1:
        reference = train("segmentation", reference_dir, reference_dir / "losses.txt")
    else:
        hook = f"hooks=[{{type: LossRecorderHook, path: '{reference_dir / 'losses.txt'}'}}]"
        reference = run_forked_ranks(nproc, "train", "--config", config, "--work-dir", reference_dir, *overrides, hook,
                                     cwd=REPO / "tests", folder=tmp_path / "reference_out")
        assert reference.returncode == 0, reference.stderr[-3000:]
    hooks = (f"hooks=[{{type: LossRecorderHook, path: '{restarted_dir / 'losses.txt'}'}}, "
             f"{{type: CrashOnFirstAttemptHook, iteration: 8, rank: {nproc - 1}}}]")
    result = torchrun(nproc, config, restarted_dir, *overrides, hooks, restarts=1)
    if nproc == 1:
        reference.join(300)
        assert reference.exitcode == 0
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resumed from" in result.stdout and "iter_6.pth at iteration 6" in result.stdout

    for suffix in ["", *(f".rank{r}" for r in range(1, nproc))]:
        recorded = read_losses(restarted_dir / f"losses.txt{suffix}")
        assert [it for it, _ in recorded][-(MAX_ITERS - 6):] == list(range(7, MAX_ITERS + 1))
        expected = dict(read_losses(reference_dir / f"losses.txt{suffix}"))
        assert all(losses == expected[it] for it, losses in recorded)
    final_ckpt = f"checkpoints/iter_{MAX_ITERS}.pth"
    restarted, uninterrupted = (torch.load(d / final_ckpt, weights_only=True) for d in (restarted_dir, reference_dir))
    assert sorted(restarted["rng"]) == list(range(nproc))
    for part in ("task", "optim", "rng"):
        assert_same_state(restarted[part], uninterrupted[part], part)

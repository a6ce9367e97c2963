"""Real multi-process training on CPU: gloo, 2 processes on 127.0.0.1. What the processes compute
is tested with ranks forked from the tests' fork server (`run_forked_ranks`, no torchrun start-up);
what torchrun itself does (two nodes, signals, a failing rank, its failure summary) through torchrun."""

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
from torch import nn

from framework.config import load_config
from framework.dist.process_group import choose_backend
from framework.engine.build import build_trainer
from support import REPO, free_port, named, run_forked_ranks, run_forked_tool, torchrun_command

CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"
# A UNet without BatchNorm (statistics would differ by batch split), SGD, 5 iterations.
# amp off: bfloat16 (auto on CPUs with native bf16) rounds differently for every batch split.
NO_BN = ["device=cpu", "amp.enabled=false", "seed=3", "train.max_iters=5", "train.val_interval=0", "train.ckpt_interval=5",
         "train.log_interval=1", "task.model.norm=none", "data.train.dataset.num_samples=64",
         "data.train.dataset.size=32", "data.train.num_workers=0",
         "optim={type: SGD, lr: 0.05, momentum: 0.9, scheduler: {type: WarmupLR, warmup_iters: 2}}"]


def final_weights(work_dir):
    return torch.load(work_dir / "checkpoints/iter_5.pth", weights_only=True)["task"]


# Equivalence tolerance. Without normalisation layers the only difference between one process
# and two is float32 summation order. Measured on a 2-core EPYC after 5 iterations: one process
# with 1 vs 2 torch threads differs from itself by 1e-7 (UNet) and 2e-7 (GAN), two processes
# from one by 2e-8 and 3e-7. 1e-5 leaves ~30x headroom for other CPUs and thread counts; a real
# bug moves weights far more (a discriminator step that bypasses DDP: 3e-3 after 5 iterations).
ATOL = 1e-5


def assert_same_weights(a, b, atol=ATOL):
    assert a.keys() == b.keys()
    for key in a:
        # torch's message (greatest difference, where, how many elements), prefixed by the tensor name
        torch.testing.assert_close(a[key], b[key], atol=atol, rtol=0, msg=named(key))


@pytest.fixture(scope="module")
def one_process_batch_4(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("ref")
    result = run_forked_tool("train", "--config", CONFIG, "--work-dir", work_dir, *NO_BN, "data.train.batch_size=4",
                             folder=work_dir / "out")
    assert result.returncode == 0, result.stderr
    return final_weights(work_dir)


@pytest.mark.parametrize("device, cuda, expected", [
    ("cpu", True, "gloo"),  # NCCL's collectives refuse CPU tensors, even on a machine with GPUs
    ("auto", True, "nccl"), ("cuda", True, "nccl"), ("cuda:1", True, "nccl"),
    ("auto", False, "gloo"), ("cpu", False, "gloo"),
])
def test_backend_auto_follows_the_device_the_run_trains_on(device, cuda, expected):
    assert choose_backend("auto", device, cuda) == expected
    assert choose_backend("gloo", device, cuda) == "gloo" and choose_backend("nccl", device, cuda) == "nccl"


def test_two_processes_equal_one_process_with_double_batch(one_process_batch_4, tmp_path):
    result = run_forked_ranks(2, "train", "--config", CONFIG, "--work-dir", tmp_path, *NO_BN, "data.train.batch_size=2",
                              folder=tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert "processes 2  batch 2 per process x 1 accumulated = 4 per step" in result.stdout
    assert_same_weights(final_weights(tmp_path), one_process_batch_4)


def test_accumulation_equals_double_batch_in_one_process(one_process_batch_4, tmp_path):
    result = run_forked_tool("train", "--config", CONFIG, "--work-dir", tmp_path, *NO_BN,
                             "data.train.batch_size=2", "train.accumulate=2", folder=tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert_same_weights(final_weights(tmp_path), one_process_batch_4)


def test_accumulation_equals_double_batch_in_two_processes(one_process_batch_4, tmp_path):
    result = run_forked_ranks(2, "train", "--config", CONFIG, "--work-dir", tmp_path, *NO_BN,
                              "data.train.batch_size=1", "train.accumulate=2", folder=tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert_same_weights(final_weights(tmp_path), one_process_batch_4)


def test_sync_bn_equals_full_batch_batchnorm(tmp_path):
    sys.path.insert(0, str(REPO / "tests/scripts"))
    try:
        from sync_bn_check import full_batch, loss_weights, network, run
    finally:
        sys.path.pop(0)
    result = run_forked_ranks(2, str(REPO / "tests/scripts/sync_bn_check.py"), tmp_path, folder=tmp_path / "out")
    assert result.returncode == 0, result.stderr
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    reference = run(network(), full_batch(), loss_weights())
    close = dict(atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.cat([r["y"] for r in ranks]), reference["y"], **close)
    # Each rank's loss is the mean over its half: its input gradient is twice the full batch's.
    torch.testing.assert_close(torch.cat([r["x_grad"] for r in ranks]) / 2, reference["x_grad"], **close)
    for rank in ranks:
        for name, grad in reference["grads"].items():
            torch.testing.assert_close(rank["grads"][name], grad, **close, msg=named(name))  # DDP-averaged
        for name, buffer in reference["buffers"].items():
            torch.testing.assert_close(rank["buffers"][name].float(), buffer.float(), **close, msg=named(name))


def test_sync_bn_in_one_process_keeps_batchnorm(tmp_path, caplog):
    """One process has no batch to synchronise with: sync_bn=true keeps torch's BatchNorm2d
    layers and trains as sync_bn=false does (the same operations in one process: bit for bit)."""
    caplog.set_level(logging.INFO, logger="framework")
    logging.getLogger("framework").addHandler(caplog.handler)  # the tools' logger does not propagate
    with_bn = [o for o in NO_BN if o != "task.model.norm=none"]
    weights = {}
    try:
        for sync_bn in ("true", "false"):
            trainer = build_trainer(load_config(CONFIG, [*with_bn, "train.max_iters=2", f"sync_bn={sync_bn}"]),
                                    str(tmp_path / sync_bn))
            trainer.fit()
            norms = {type(m) for m in trainer.task.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)}
            assert norms == {nn.BatchNorm2d}, norms
            weights[sync_bn] = trainer.task.state_dict()
    finally:
        logging.getLogger("framework").removeHandler(caplog.handler)
    assert "sync_bn: a single process, keeping plain BatchNorm" in caplog.messages
    assert any(".running_var" in key for key in weights["true"])
    assert_same_weights(weights["true"], weights["false"], atol=0)


def test_two_nodes_with_one_process_each(one_process_batch_4, tmp_path):
    port = free_port()
    commands = [torchrun_command(1, REPO / "tools/train.py", "--config", CONFIG, "--work-dir", tmp_path,
                                 *NO_BN, "data.train.batch_size=2",
                                 launcher=("--nnodes", 2, "--nproc_per_node", 1, "--node_rank", node,
                                           "--rdzv_backend", "static", "--rdzv_endpoint", f"127.0.0.1:{port}"))
                for node in (0, 1)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    agents = [subprocess.Popen(c, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for c in commands]
    outputs = [a.communicate(timeout=300) for a in agents]
    assert [a.returncode for a in agents] == [0, 0], outputs
    assert "processes 2  batch 2 per process x 1 accumulated = 4 per step" in outputs[0][0]
    assert_same_weights(final_weights(tmp_path), one_process_batch_4)


def test_a_failing_rank_stops_every_rank_with_its_error(tmp_path):
    (tmp_path / "failing_hook.py").write_text(
        "from framework.engine.hooks import Hook\n"
        "from framework.dist import get_rank\n"
        "from framework.registry import HOOKS\n\n"
        "@HOOKS.register()\n"
        "class FailOnRankOne(Hook):\n"
        "    def after_iter(self, trainer):\n"
        "        if get_rank() == 1 and trainer.iter == 2:\n"
        "            raise RuntimeError('injected failure on rank 1')\n")
    result = subprocess.run(
        torchrun_command(2, REPO / "tools/train.py", "--config", CONFIG, "--work-dir", tmp_path / "wd", *NO_BN,
                         "train.max_iters=50", "custom_imports=[failing_hook]", "hooks=[{type: FailOnRankOne}]",
                         "dist.timeout=30"),
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "injected failure on rank 1" in result.stdout + result.stderr


def test_torchruns_failure_summary_shows_the_failing_ranks_error_line(tmp_path):
    # A user error is printed as one line and exits 2 without reaching @record: the line must
    # still reach torchrun's error file, which its summary shows
    (tmp_path / "mistake_hook.py").write_text(
        "from framework.dist import get_rank\n"
        "from framework.engine.hooks import Hook\n"
        "from framework.errors import ConfigError\n"
        "from framework.registry import HOOKS\n\n"
        "@HOOKS.register()\n"
        "class MistakeOnRankOne(Hook):\n"
        "    def after_iter(self, trainer):\n"
        "        if get_rank() == 1 and trainer.iter == 2:\n"
        "            raise ConfigError('injected mistake on rank 1')\n")
    result = subprocess.run(
        torchrun_command(2, REPO / "tools/train.py", "--config", CONFIG, "--work-dir", tmp_path / "wd", *NO_BN,
                         "train.max_iters=50", "custom_imports=[mistake_hook]", "hooks=[{type: MistakeOnRankOne}]",
                         "dist.timeout=30"),
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    root_cause = (result.stdout + result.stderr).split("Root Cause (first observed failure):")[1]
    assert re.search(r"rank\s*: 1 ", root_cause) and re.search(r"exitcode\s*: 2 ", root_cause), root_cause
    assert re.search(r"traceback\s*: error: injected mistake on rank 1\n", root_cause), root_cause


PIX2PIX = REPO / "projects/pix2pix/configs/pix2pix_shapes.yaml"
# pix2pix without normalisation, lsgan + L1, SGD, 5 iterations at 32x32. Not instance norm:
# on the 2x2 maps deep in the UNet it divides by a standard deviation of four numbers and
# amplifies rounding, so one process with 1 or 2 torch threads already differs from itself by
# ~1e-2 after 5 iterations; with norm none that spread is ~2e-7 (see ATOL). Not batch norm
# either: its statistics depend on how the batch is split. Not Adam: its first steps turn
# gradients that are only rounding noise into full-size updates of either sign.
GAN_NO_BN = ["device=cpu", "amp.enabled=false", "seed=3", "train.max_iters=5", "train.val_interval=0", "train.val_at_start=false",
             "train.ckpt_interval=5", "train.log_interval=1", "data.train.dataset.num_samples=32",
             "data.train.dataset.size=32", "data.train.num_workers=0", "task.gan_loss=lsgan",
             "task.generator.num_downs=5", "task.generator.base_channels=8", "task.generator.norm=none",
             "task.discriminator.base_channels=8", "task.discriminator.norm=none",
             "optimizers.generator={type: SGD, lr: 0.01, momentum: 0.9, params: generator}",
             "optimizers.discriminator={type: SGD, lr: 0.01, momentum: 0.9, params: discriminator}"]


def test_gan_two_processes_equal_one_process_with_double_batch(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    result = run_forked_tool("train", "--config", PIX2PIX, "--work-dir", one, *GAN_NO_BN, "data.train.batch_size=4",
                             folder=one / "out")
    assert result.returncode == 0, result.stderr
    result = run_forked_ranks(2, "train", "--config", PIX2PIX, "--work-dir", two, *GAN_NO_BN,
                              "data.train.batch_size=2", folder=two / "out")
    assert result.returncode == 0, result.stderr
    single, double = final_weights(one), final_weights(two)
    assert any(k.startswith("generator.") for k in single) and any(k.startswith("discriminator.") for k in single)
    assert_same_weights(double, single)


def test_sharded_evaluation_of_uneven_shards_equals_one_process(tmp_path):
    """17 validation images on 2 processes: shards of 9 and 8 (3 and 2 batches of 4). Metrics
    summed across ranks equal tools/test.py's on one process, and nothing waits on a rank
    that has no batch left (a DDP forward of a network with BatchNorm buffers is a collective)."""
    with_bn = [o for o in NO_BN if o != "task.model.norm=none"]
    val = ["train.val_interval=5", "data.val.dataset.num_samples=17", "data.val.batch_size=4",
           "data.val.dataset.size=32", "dist.timeout=20"]
    result = run_forked_ranks(2, "train", "--config", CONFIG, "--work-dir", tmp_path, *with_bn, *val,
                              "data.train.batch_size=2", folder=tmp_path / "out", timeout=120)
    assert result.returncode == 0, result.stderr
    trained = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    tested = run_forked_tool("test", "--config", CONFIG, "--checkpoint", tmp_path / "checkpoints/iter_5.pth",
                             "--work-dir", tmp_path / "test", *with_bn, *val, folder=tmp_path / "out")
    assert tested.returncode == 0, tested.stderr
    single = json.loads((tmp_path / "test/metrics.json").read_text())
    for key in ("mIoU", "mAcc", "aAcc"):
        assert single[key] == pytest.approx(trained[key], abs=1e-6), key


def test_sigterm_to_torchrun_stops_every_rank_at_one_iteration_with_a_checkpoint(tmp_path):
    """torchrun passes SIGTERM to its workers; they agree on the iteration to stop at, rank 0
    saves a checkpoint there, and the run can be resumed from it."""
    losses = tmp_path / "losses.txt"
    hook = f"hooks=[{{type: LossRecorderHook, path: '{losses}', delay: 0.3}}]"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    agent = subprocess.Popen(
        torchrun_command(2, REPO / "tools/train.py", "--config", CONFIG, "--work-dir", tmp_path / "wd", *NO_BN,
                         "train.max_iters=200", "train.ckpt_interval=100", "custom_imports=[probes]", hook),
        cwd=REPO / "tests", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (losses.exists() and len(losses.read_text().splitlines()) >= 3):
        assert agent.poll() is None and time.monotonic() < deadline, agent.communicate()
        time.sleep(0.05)
    agent.send_signal(signal.SIGTERM)
    out, err = agent.communicate(timeout=120)
    stops = re.findall(r"stopped by SIGTERM at iteration (\d+)", out)
    assert len(stops) == 1, out + err  # logged by rank 0
    stop = int(stops[0])
    assert (tmp_path / "wd/checkpoints/latest").read_text() == f"iter_{stop}.pth"
    state = torch.load(tmp_path / f"wd/checkpoints/iter_{stop}.pth", weights_only=True)
    assert state["meta"]["iter"] == stop and sorted(state["rng"]) == [0, 1]
    rank1_iterations = [int(line.split()[0]) for line in (tmp_path / "losses.txt.rank1").read_text().splitlines()]
    assert rank1_iterations[-1] == stop  # rank 1 stopped at the same iteration


def test_dist_helpers_gather_unequal_rows_broadcast_rank_0_and_unwrap_ddp(tmp_path):
    """What metrics/, models/ and analysis/ call instead of torch.distributed, on 2 real ranks."""
    result = run_forked_ranks(2, str(REPO / "tests/scripts/dist_helpers_ddp.py"), tmp_path,
                              folder=tmp_path / "out", timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in range(2):
        values = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert values["world_size"] == 2
        # rank 0's three rows then rank 1's one, the padding cut off
        assert values["gathered"] == [[1.0, 0.0], [1.0, 1.0], [1.0, 2.0], [2.0, 0.0]]
        assert values["broadcast"] == [[10.0] * 3] * 2
        assert values["unwrap_is_network"] and values["unwrap_of_plain"]


def test_dist_helpers_in_one_process_leave_the_tensor_alone():
    from framework.dist import all_gather_rows, broadcast_from_main_, unwrap

    rows = torch.arange(6.0).reshape(3, 2)
    assert all_gather_rows(rows) is rows
    counts = torch.tensor([4.0, 5.0])
    assert broadcast_from_main_(counts) is counts and counts.tolist() == [4.0, 5.0]
    network = nn.Linear(2, 2)
    assert unwrap(network) is network

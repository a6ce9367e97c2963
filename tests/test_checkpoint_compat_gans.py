"""0.3.0 checkpoints of both GAN tasks resume under the GAN parts (Adversary, EMA) to the weights
0.3.0 itself reached.

The fixtures were written by framework 0.3.0 before the GAN tasks were rebuilt on the parts
(1 torch thread):

    python tools/train.py --config <CONFIG> --work-dir W <OVERRIDES> train.max_iters=2 train.ckpt_interval=2
    python tools/train.py --config <CONFIG> --work-dir W --resume <OVERRIDES> train.max_iters=4 train.ckpt_interval=2

tests/data/<name>_v0.3.0_iter_2.pth is the first run's checkpoint and <name>_v0.3.0_iter_4.pth the
resumed run's last one. Each run keeps every piece of state the parts took over: the EMA
generators (ema_start 1, so the copy phase ends inside the run), the adaptive DiffAugment's p and
sums (interval 1: p moves every D step), lazy R1 (every 2nd D step: the count decides) and, for
CycleGAN, the image pools. Resumed here from iteration 2 to 4, every tensor must match the old
release's iteration 4, read through the key renames (`upgrade_state_dict`), to float rounding:
the file's first iterations ran on another machine's kernels. SGD, not the configs' Adam: Adam
turns the rounding-level gradients of a bias before an instance norm (zero in exact arithmetic)
into whole learning-rate steps, which no tolerance could tell from a bug.
"""

import shutil
from pathlib import Path

import pytest
import torch
from test_checkpoint_compat import assert_close_state
from test_resume import assert_same_state

from framework.registry import TASKS
from support import call_tool

DATA = Path(__file__).parent / "data"
COMMON = ["device=cpu", "amp.enabled=false", "seed=3", "data.train.dataset.num_samples=16", "data.train.num_workers=0",
          "train.val_interval=0", "train.val_at_start=false", "train.log_interval=2", "train.max_iters=4",
          "train.ckpt_interval=2"]
CYCLEGAN = [*COMMON, *[f"task.{net}.base_channels=4" for net in ("generator_ab", "generator_ba", "discriminator_a",
                                                                 "discriminator_b")],
            "task.generator_ab.num_blocks=1", "task.generator_ba.num_blocks=1", "task.pool_size=3",
            "+task.ema_decay=0.9", "+task.ema_start=1", "task.r1_interval=2", "task.d_augment.interval=1",
            "task.d_augment.speed_images=64",
            "optimizers.generators={type: SGD, lr: 0.002, momentum: 0.9, params: [generator_ab, generator_ba], "
            "scheduler: {type: LinearDecayLR, decay_start: 1}}",
            "optimizers.discriminators={type: SGD, lr: 0.01, momentum: 0.9, params: [discriminator_a, discriminator_b], "
            "scheduler: {type: LinearDecayLR, decay_start: 1}}"]
PIX2PIXHD = [*COMMON, "task.generator.base_channels=4", "task.generator.num_blocks=1",
             "task.discriminator.base_channels=4", "+task.ema_decay=0.9", "+task.ema_start=1", "+task.r1_weight=1.0",
             "+task.r1_interval=2", "+task.d_augment.type=DiffAugment", "+task.d_augment.adaptive=true",
             "+task.d_augment.interval=1", "+task.d_augment.speed_images=64", "task.perceptual=null",
             "optimizers.generator={type: SGD, lr: 0.002, momentum: 0.9, params: generator, "
             "scheduler: {type: WarmupPolyLR, warmup: linear, warmup_iters: 2, power: 1.0}}",
             "optimizers.discriminator={type: SGD, lr: 0.01, momentum: 0.9, params: discriminator, "
             "scheduler: {type: WarmupPolyLR, warmup: linear, warmup_iters: 2, power: 1.0}}"]
CASES = {"cyclegan": ("projects/cyclegan/configs/cyclegan_shapes_toolkit.yaml", CYCLEGAN),
         "pix2pixhd": ("projects/pix2pix/configs/pix2pixhd_shapes.yaml", PIX2PIXHD)}


def upgraded(task_state: dict, config_text: str) -> dict:
    """An old checkpoint's task state with this release's key names (the task's own renames)."""
    import yaml

    import projects.cyclegan  # noqa: F401  (registers the projects' networks)
    import projects.pix2pix  # noqa: F401

    node = yaml.safe_load(config_text)["task"]
    state = dict(task_state)
    TASKS.build(node, path="task").upgrade_state_dict(state)
    return state


def largest(state) -> float:
    if isinstance(state, torch.Tensor):
        return float(state.abs().max()) if state.is_floating_point() and state.numel() else 0.0
    values = state.values() if isinstance(state, dict) else state if isinstance(state, (list, tuple)) else []
    return max((largest(value) for value in values), default=0.0)


def assert_close_to_scale(a, b, where, scale=None):
    """Momentum buffers are summed gradients, which rounding moves more than weights (a bias before
    an instance norm has only rounding for a gradient): each tensor within 5e-4 of the largest
    value in its optimizer's state. A buffer left unread is off by its whole size."""
    if isinstance(a, torch.Tensor) and a.is_floating_point():
        torch.testing.assert_close(a, b, rtol=1e-3, atol=5e-4 * scale, msg=lambda m: f"{where}: {m}")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_close_to_scale(a[key], b[key], f"{where}.{key}", largest(b[key]) if scale is None else scale)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close_to_scale(x, y, f"{where}[{i}]", scale)
    else:
        assert_same_state(a, b, where)


@pytest.mark.parametrize("name", CASES)
def test_a_0_3_0_gan_checkpoint_resumes_to_the_weights_0_3_0_reached(tmp_path, name):
    config, overrides = CASES[name]
    (tmp_path / "checkpoints").mkdir()
    shutil.copy(DATA / f"{name}_v0.3.0_iter_2.pth", tmp_path / "checkpoints" / "iter_2.pth")
    (tmp_path / "checkpoints" / "latest").write_text("iter_2.pth")
    resumed = call_tool("train", "--config", config, "--work-dir", tmp_path, "--resume", *overrides)
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout[-2000:]
    assert "iter_2.pth at iteration 2" in resumed.stdout

    actual = torch.load(tmp_path / "checkpoints" / "iter_4.pth", weights_only=True)
    old = torch.load(DATA / f"{name}_v0.3.0_iter_4.pth", weights_only=True)
    assert old["meta"]["framework_version"] == "0.3.0"
    expected_task = upgraded(old["task"], old["meta"]["config"])
    assert actual["task"].keys() == expected_task.keys()
    assert_close_state(actual["task"], expected_task, "task")
    for name in old["optim"]["optimizers"]:  # each optimizer's state on its own scale
        assert_close_to_scale(actual["optim"]["optimizers"][name], old["optim"]["optimizers"][name], name)
    assert_same_state({k: v for k, v in actual["optim"].items() if k != "optimizers"},
                      {k: v for k, v in old["optim"].items() if k != "optimizers"}, "optim")
    for part in ("hooks", "rng"):  # counters and generator states: equal on any machine
        assert_same_state(actual[part], old[part], part)
    if name == "cyclegan":  # the image pools, per rank
        assert_close_state(actual["task_by_rank"], old["task_by_rank"], "task_by_rank")
    ema_keys = [key for key in actual["task"] if key.startswith("ema.")]
    assert ema_keys and all(not key.startswith(("generator_ema", "generator_ab_ema", "d_augment")) for key in actual["task"])

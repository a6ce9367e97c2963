"""The GAN task of docs/extending.md, written on the GAN parts by a user (124 lines): it trains,
resumes bit for bit (the adversaries' D-step counts, the EMA's update count, ADA's p and the
random windows all continue), takes a user's own adversarial loss by config, and every tool
(tests/test_tools_walk.py) runs on it."""

import shutil

import pytest
import torch
import torch.nn.functional as F
from test_resume import assert_same_state

from framework.losses.gan import AdversarialLoss
from framework.registry import LOSSES
from support import REPO, call_tool

CONFIG = REPO / "projects/example_custom/configs/global_local_gan_pairs.yaml"
TINY = ["device=cpu", "amp.enabled=false", "seed=7", "train.max_iters=4", "train.ckpt_interval=2",
        "train.val_interval=0", "train.val_at_start=false", "train.log_interval=1", "data.train.num_workers=0",
        "data.train.dataset.num_samples=12", "data.train.batch_size=4", "task.generator.base_channels=4",
        "task.generator.num_downs=4", "task.global_discriminator.base_channels=4",
        "task.local_discriminator.base_channels=4", "task.ema_decay=0.9", "+task.ema_start=1",
        "+task.r1_weight=1.0", "+task.r1_interval=2", "+task.d_augment.type=DiffAugment",
        "+task.d_augment.adaptive=true", "+task.d_augment.interval=1", "+task.d_augment.speed_images=16",
        "loggers=[]"]


@LOSSES.register()
class SoftplusTestGANLoss(AdversarialLoss):
    """A user's own adversarial loss (docs/extending.md), bounded below."""

    def on_real(self, logits):
        return F.softplus(-logits).mean()

    def on_fake(self, logits):
        return F.softplus(logits).mean()

    def for_generator(self, logits):
        return F.softplus(-logits).mean()


def train(work_dir, *overrides):
    result = call_tool("train", "--config", CONFIG, "--work-dir", work_dir, *TINY, *overrides)
    assert result.returncode == 0, result.stderr + result.stdout[-2000:]
    return result


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("whole")
    result = train(work_dir)
    return work_dir, result


def test_it_trains_both_adversaries_and_its_own_terms(uninterrupted):
    work_dir, result = uninterrupted
    log = (work_dir / "train.log").read_text()
    for term in ("loss_d_global", "loss_d_local", "loss_g_global", "loss_g_local", "loss_g_l1", "ada_p_global",
                 "loss_d_r1_global", "loss_d_r1_local"):
        assert term in log
    state = torch.load(work_dir / "checkpoints" / "iter_4.pth", weights_only=True)["task"]
    assert int(state["global_adversary.d_steps.count"]) == int(state["local_adversary.d_steps.count"]) == 4
    assert int(state["ema.updates.count"]) == 4
    assert int(state["global_adversary.augment.observed"]) == 4  # ADA read one D step per iteration


def test_a_resumed_run_ends_bit_identical_to_an_uninterrupted_one(uninterrupted, tmp_path):
    whole, _ = uninterrupted
    (tmp_path / "checkpoints").mkdir()
    shutil.copy(whole / "checkpoints" / "iter_2.pth", tmp_path / "checkpoints" / "iter_2.pth")
    (tmp_path / "checkpoints" / "latest").write_text("iter_2.pth")
    result = train(tmp_path, "--resume")
    assert "iter_2.pth at iteration 2" in result.stdout
    expected, actual = (torch.load(d / "checkpoints" / "iter_4.pth", weights_only=True) for d in (whole, tmp_path))
    for part in ("task", "optim", "rng"):
        assert_same_state(actual[part], expected[part], part)


def test_a_users_adversarial_loss_is_named_by_config(tmp_path):
    train(tmp_path, "task.gan_loss={type: SoftplusTestGANLoss}", "train.max_iters=2")
    from framework.engine.trained import load_trained_task

    task, _ = load_trained_task(str(CONFIG), str(tmp_path / "checkpoints" / "iter_2.pth"),
                                [*TINY, "task.gan_loss={type: SoftplusTestGANLoss}"])
    assert type(task.global_adversary.loss) is SoftplusTestGANLoss
    assert task.global_adversary.health.watch_d_loss  # bounded below: "D's loss near 0" is watched

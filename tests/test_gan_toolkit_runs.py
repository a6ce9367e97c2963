"""The GAN toolkit in real runs: 2 processes with R1 and a multi-scale D equal one process
with the double batch; a penalty-only D loss under DDP; exact resume with spectral norm, R1
and adaptive DiffAugment; ada_p in TensorBoard; SyncBN with a penalty refused (GANTask and
CycleGANTask; CycleGAN's toolkit runs are in projects/cyclegan/tests)."""

import shutil

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from test_distributed import assert_same_weights, final_weights
from test_resume import assert_same_state

from support import REPO, call_tool, named, run_forked_ranks, run_forked_tool

PIX2PIXHD = REPO / "projects/pix2pix/configs/pix2pixhd_shapes.yaml"
SMALL_DATA = REPO / "projects/dcgan/configs/dcgan_small_data.yaml"
CYCLEGAN_TOOLKIT = REPO / "projects/cyclegan/configs/cyclegan_shapes_toolkit.yaml"

# pix2pixHD without normalisation (statistics would depend on the batch split) and without
# the perceptual loss, SGD, R1 every 2nd D step: iterations 2 and 4 carry the penalty.
HD_NO_NORM = ["device=cpu", "amp.enabled=false", "seed=3", "train.max_iters=5", "train.val_interval=0", "train.val_at_start=false",
              "train.ckpt_interval=5", "train.log_interval=1", "data.train.dataset.num_samples=32",
              "data.train.dataset.size=32", "data.train.num_workers=0", "task.perceptual=null",
              "+task.r1_weight=50.0", "+task.r1_interval=2",
              "task.generator.base_channels=8", "task.generator.num_blocks=1", "task.generator.norm=none",
              "task.discriminator.base_channels=8", "task.discriminator.num_layers=2",
              "task.discriminator.norm=none",
              "optimizers.generator={type: SGD, lr: 0.01, momentum: 0.9, params: generator}",
              "optimizers.discriminator={type: SGD, lr: 0.01, momentum: 0.9, params: discriminator}"]


# At the GAN initialisation (weights ~ N(0, 0.02)) D's input gradients are tiny: without spectral
# norm, R1 needs a large gamma to move the weights beyond the tolerance (loss_d_r1 ~0.01-0.03
# either way; the penalty summed instead of averaged over samples fails both cases).
@pytest.mark.parametrize("extra", [["task.r1_weight=1.0e6"], ["+task.discriminator.spectral_norm=true"]],
                         ids=["plain", "spectral_norm"])
def test_r1_and_multi_scale_d_in_two_processes_equal_one_process_with_double_batch(tmp_path, extra):
    one, two = tmp_path / "one", tmp_path / "two"
    result = run_forked_tool("train", "--config", PIX2PIXHD, "--work-dir", one, *HD_NO_NORM, *extra,
                             "data.train.batch_size=4", folder=one / "out")
    assert result.returncode == 0, result.stderr
    assert "loss_d_r1" in result.stdout
    result = run_forked_ranks(2, "train", "--config", PIX2PIXHD, "--work-dir", two, *HD_NO_NORM, *extra,
                              "data.train.batch_size=2", folder=two / "out")
    assert result.returncode == 0, result.stderr
    single, double = final_weights(one), final_weights(two)
    assert any(k.startswith("discriminator.scales.1.") for k in single)
    assert ("spectral_norm" in extra[0]) == any(k.endswith("parametrizations.weight.0._u") for k in single)
    assert_same_weights(double, single)


def test_a_penalty_only_d_loss_trains_under_ddp_as_one_process(tmp_path):
    result = run_forked_ranks(2, str(REPO / "tests/scripts/r1_only_ddp.py"), tmp_path, folder=tmp_path / "out",
                              timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    for key, value in ranks[0]["reference"].items():
        torch.testing.assert_close(ranks[0]["weights"][key], value, atol=1e-6, rtol=0, msg=named(key))
        torch.testing.assert_close(ranks[1]["weights"][key], value, atol=1e-6, rtol=0, msg=named(key))


# Spectral norm on D, R1 every 2nd D step, DiffAugment adapting p every 2 D steps (fast), 8
# iterations; the resumed run starts from iteration 3 (mid R1 cycle, mid adjustment interval).
RESUMED = ["device=cpu", "deterministic=true", "train.max_iters=8", "train.ckpt_interval=3", "train.keep_last=5",
           "train.log_interval=1", "train.val_interval=0", "data.train.dataset.num_samples=40",
           "data.train.batch_size=8", "data.train.num_workers=0", "task.num_fixed_samples=4",
           "task.generator.base_channels=8", "task.discriminator.base_channels=8",
           "task.r1_weight=1.0", "task.r1_interval=2", "task.d_augment.interval=2",
           "task.d_augment.speed_images=100"]


def test_resume_is_bit_exact_with_spectral_norm_r1_and_adaptive_diff_augment(tmp_path):
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    result = call_tool("train", "--config", SMALL_DATA, "--work-dir", whole, *RESUMED)
    assert result.returncode == 0, result.stderr
    first = torch.load(whole / "checkpoints/iter_3.pth", weights_only=True)
    shutil.copytree(whole / "checkpoints", tmp_path / "saved")
    result = call_tool("train", "--config", SMALL_DATA, "--work-dir", resumed, *RESUMED,
                       "--resume", tmp_path / "saved/iter_3.pth")
    assert result.returncode == 0, result.stderr
    a = torch.load(whole / "checkpoints/iter_8.pth", weights_only=True)
    b = torch.load(resumed / "checkpoints/iter_8.pth", weights_only=True)
    # the state that makes the run: spectral norm vectors, p and its sums, the step counter
    assert "discriminator.body.0.parametrizations.weight.0._u" in a["task"]
    # saved mid-interval: one observation of the reals' signs waits in the sums; p moves later
    assert int(first["task"]["adversary.augment.observed"]) == 3 and float(first["task"]["adversary.augment.sign_sum"][1]) == 8
    assert float(a["task"]["adversary.augment.p"]) > 0
    for part in ("task", "optim", "rng"):
        assert_same_state(a[part], b[part], part)
    events = EventAccumulator(str(whole / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    p = [event.value for event in events.Scalars("train/ada_p")]
    assert len(p) == 8 and p[0] == 0.0 and p[-1] == float(a["task"]["adversary.augment.p"])


@pytest.mark.parametrize("config", [SMALL_DATA, CYCLEGAN_TOOLKIT], ids=["gan", "cyclegan"])
def test_sync_bn_with_a_gradient_penalty_is_refused_in_one_line(tmp_path, config):
    result = call_tool("train", "--config", config, "--work-dir", tmp_path / "run", "device=cpu",
                       "sync_bn=true", "task.r1_weight=1.0", "data.train.num_workers=0", "train.max_iters=1",
                       "train.val_interval=0")
    assert result.returncode == 2
    assert "error: sync_bn: SyncBatchNorm has no double backward, which the task's gradient penalty (R1 or " \
           "WGAN-GP) needs; set sync_bn: false or remove the penalty" in result.stderr

"""Mixed precision: float16 with a GradScaler owned by the Optimizers object, bfloat16 on CPU."""

import json

import pytest
import torch
from torch import nn

from framework.errors import ConfigError
from framework.optim.optimizers import build_optimizers
from support import REPO, TINY_SEGMENTATION, named, run_forked_tool

CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"


class TwoNets(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.generator = nn.Linear(4, 4)
        self.discriminator = nn.Linear(4, 1)


def two_optimizers(task, scaler=None, clip=None):
    entry = {"type": "SGD", "lr": 0.1}
    cfg = {"optimizers": {"generator": {**entry, "params": "generator", **({"clip_grad": clip} if clip else {})},
                          "discriminator": {**entry, "params": "discriminator"}}}
    return build_optimizers(cfg, task, max_iters=10, scaler=scaler)


def snapshot(module):
    return [p.detach().clone() for p in module.parameters()]


def test_inf_gradient_skips_only_that_optimizer_and_halves_the_scale():
    task = TwoNets()
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    optim = two_optimizers(task, scaler)
    x = torch.randn(8, 4)
    g_before, d_before = snapshot(task.generator), snapshot(task.discriminator)

    optim.update(task.discriminator(x).sum() * float("inf"), "discriminator")  # inf gradients
    optim.update(task.generator(x).pow(2).mean(), "generator")
    optim.end_iteration()

    assert all(torch.equal(a, b) for a, b in zip(d_before, snapshot(task.discriminator)))  # skipped
    assert not any(torch.equal(a, b) for a, b in zip(g_before, snapshot(task.generator)))  # stepped
    assert scaler.get_scale() == 512.0
    assert optim.state_dict()["scaler"]["scale"] == 512.0


def test_skip_policy_with_float16_keeps_the_scale_when_every_step_is_skipped():
    """nan_policy=skip skips the steps of a NaN loss before the GradScaler sees them; with no
    step at all in an iteration, the scale is left as it was (torch's update() would fail)."""
    task = TwoNets()
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    entry = {"type": "SGD", "lr": 0.1}
    optim = build_optimizers({"optimizers": {"generator": {**entry, "params": "generator"},
                                             "discriminator": {**entry, "params": "discriminator"}}},
                             task, max_iters=10, scaler=scaler, skip_nonfinite=True)
    x = torch.randn(8, 4)
    before = snapshot(task)
    for name in ("discriminator", "generator"):
        optim.update(getattr(task, name)(x).sum() * float("nan"), name)
    optim.end_iteration()
    assert optim.skipped_steps == 2 and scaler.get_scale() == 1024.0
    assert all(torch.equal(a, b) for a, b in zip(before, snapshot(task)))

    for name in ("discriminator", "generator"):
        optim.update(getattr(task, name)(x).pow(2).mean(), name)
    optim.end_iteration()
    assert optim.skipped_steps == 2 and scaler.get_scale() == 1024.0  # grows only after 2000 good steps
    assert not any(torch.equal(a, b) for a, b in zip(before, snapshot(task)))


def test_clipping_sees_unscaled_gradients():
    x = torch.randn(8, 4)
    norms = []
    for scaler in (None, torch.amp.GradScaler("cpu", init_scale=4096.0)):
        task = TwoNets()
        optim = two_optimizers(task, scaler, clip={"max_norm": 1e6})
        optim.update(task.generator(x).pow(2).mean(), "generator")
        norms.append(optim.grad_norms["generator"])
    torch.testing.assert_close(norms[0], norms[1])


def test_bfloat16_autocast_trains_the_quickstart_on_cpu(tmp_path):
    # Half the channels, a quarter of the pixels: bf16 is emulated (slow) on CPUs without AMX/AVX512-BF16.
    result = run_forked_tool("train", "--config", REPO / "configs/segmentation/unet_shapes.yaml", "--work-dir", tmp_path,
                             *TINY_SEGMENTATION, "train.max_iters=40", "train.val_interval=40",
                             "task.model.base_channels=8", "data.train.dataset.size=32", "data.val.dataset.size=32",
                             "amp.enabled=true", "amp.dtype=bfloat16", folder=tmp_path / "out")
    assert result.returncode == 0, result.stderr
    losses = [float(line.split("loss ")[1].split()[0]) for line in result.stdout.splitlines() if " loss " in line]
    assert len(losses) == 8 and losses[-1] < losses[0] and all(loss == loss for loss in losses)  # finite, decreasing
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])["iter"] == 40


# float16 on CPU is slow: the smallest UNet, 4 iterations, no evaluation.
FLOAT16 = [*TINY_SEGMENTATION, "train.max_iters=4", "train.ckpt_interval=2", "train.val_interval=0",
           "task.model.base_channels=4", "data.train.dataset.size=32", "amp.enabled=true", "amp.dtype=float16",
           "custom_imports=[probes]"]


def inf_gradient_at(iteration: int) -> str:
    return (f"task.loss={{type: InfGradientAtIteration, iteration: {iteration}, "
            "loss: {type: CrossEntropyLoss, ignore_index: 255}}")


def test_float16_scale_backs_off_at_an_inf_step_and_survives_a_resume(tmp_path):
    """torch's GradScaler rules: the scale starts at 2**16 and halves at a step with inf
    gradients (the step is skipped, the count of good steps restarts); it doubles only after
    2000 good steps in a row. Iteration 2's gradients are inf: 65536 -> 32768, and the count
    of good steps is 0 after iteration 2 and 2 after iteration 4. A run resumed at iteration 2
    (with no inf step of its own) continues from the checkpointed scale and count."""
    run = tmp_path / "run"
    result = run_forked_tool("train", "--config", CONFIG, "--work-dir", run, *FLOAT16, inf_gradient_at(2),
                             cwd=REPO / "tests", folder=tmp_path / "out")
    assert result.returncode == 0, result.stderr
    at_2, at_4 = (torch.load(run / f"checkpoints/iter_{i}.pth", weights_only=True) for i in (2, 4))
    assert (at_2["optim"]["scaler"]["scale"], at_2["optim"]["scaler"]["_growth_tracker"]) == (32768.0, 0)
    assert (at_4["optim"]["scaler"]["scale"], at_4["optim"]["scaler"]["_growth_tracker"]) == (32768.0, 2)

    resumed = tmp_path / "resumed"
    result = run_forked_tool("train", "--config", CONFIG, "--work-dir", resumed, *FLOAT16, inf_gradient_at(0),
                             "--resume", run / "checkpoints/iter_2.pth", cwd=REPO / "tests", folder=tmp_path / "out2")
    assert result.returncode == 0, result.stderr
    state = torch.load(resumed / "checkpoints/iter_4.pth", weights_only=True)
    assert state["optim"]["scaler"] == at_4["optim"]["scaler"]
    for key, value in at_4["task"].items():
        torch.testing.assert_close(state["task"][key], value, atol=0, rtol=0, msg=named(key))


def test_the_scale_is_updated_once_per_iteration_with_two_optimizers():
    """One GradScaler, two optimizers: `scaler.update()` runs once per iteration, in
    end_iteration(). An overflow in both networks' gradients halves the scale once (1024 -> 512,
    not 256), and with growth_interval 2 the scale doubles after two good iterations, not one."""
    task = TwoNets()
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2)
    optim = two_optimizers(task, scaler)
    x = torch.randn(8, 4)
    for name in ("discriminator", "generator"):
        optim.update(getattr(task, name)(x).sum() * float("inf"), name)
    optim.end_iteration()
    assert (scaler.get_scale(), scaler.state_dict()["_growth_tracker"]) == (512.0, 0)

    scales = []
    for _ in range(2):
        for name in ("discriminator", "generator"):
            optim.update(getattr(task, name)(x).pow(2).mean(), name)
        optim.end_iteration()
        scales.append(scaler.get_scale())
    assert scales == [512.0, 1024.0]


@pytest.mark.parametrize("entry", [{"type": "SGD", "momentum": 0.9}, {"type": "Adam"}, {"type": "AdamW"},
                                   {"type": "Adagrad"}], ids=lambda entry: entry["type"])
def test_a_skipped_first_float16_step_leaves_no_state_behind(entry):
    """The first iteration overflows (GradScaler skips it), the next two train: the framework's
    default kernel ends where torch's default loop (foreach) does. torch's fused SGD with
    momentum leaves its momentum buffers uninitialised at a skipped first step (framework/optim/
    fused.py), so SGD with momentum is not fused under float16; Adam, AdamW, Adagrad are."""
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
    weights, kernels = [], []
    for extra in ({}, {"foreach": True}):
        task = TwoNets()
        node = {**entry, "lr": 0.1, "params": "generator", **extra}
        optim = build_optimizers({"optimizers": {"generator": node, "discriminator": {**node, "params": "discriminator"}}},
                                 task, max_iters=10, scaler=torch.amp.GradScaler("cpu", init_scale=1024.0))
        for overflow in (True, False, False):
            for name in ("generator", "discriminator"):
                loss = getattr(task, name)(x).pow(2).mean()
                optim.update(loss * float("inf") if overflow else loss, name)
            optim.end_iteration()
        weights.append(snapshot(task))
        kernels.append(optim.optimizers["generator"].defaults.get("fused"))
    for default, foreach in zip(*weights):
        # the same update to float32 rounding: measured at most 1.5e-8 (Adam), 0 for SGD and Adagrad
        torch.testing.assert_close(default, foreach, atol=1e-7, rtol=0)
    assert kernels == [entry["type"] != "SGD" or None, None]


def test_fused_sgd_with_momentum_is_refused_under_float16_only():
    node = {"type": "SGD", "lr": 0.1, "momentum": 0.9, "fused": True, "params": "generator"}
    cfg = {"optimizers": {"generator": node, "discriminator": {**node, "fused": False, "params": "discriminator"}}}
    with pytest.raises(ConfigError, match=r"^optimizers\.generator\.fused: torch's fused SGD with momentum leaves its "
                                          r"momentum uninitialised when float16's GradScaler skips its first step; "
                                          r"set fused: false \(or train in bfloat16\)$"):
        build_optimizers(cfg, TwoNets(), max_iters=1, scaler=torch.amp.GradScaler("cpu"))
    assert build_optimizers(cfg, TwoNets(), max_iters=1).optimizers["generator"].defaults["fused"] is True
    plain = {**node, "momentum": 0.0}  # no momentum: no buffer to leave uninitialised
    assert build_optimizers({"optimizers": {"generator": plain, "discriminator": {**plain, "params": "discriminator"}}},
                            TwoNets(), max_iters=1, scaler=torch.amp.GradScaler("cpu")).optimizers["generator"] \
        .defaults["fused"] is True

"""The optimisation step in detail (framework/optim/optimizers.py): gradients freed, measured and
clipped, the skip policy's counting, the state a resume restores, and build_optimizers' errors.
Written against the survivors of a mutmut run (tests/MUTATION.md)."""

import pytest
import torch
from torch import nn

import framework  # noqa: F401  (fills the registries)
from framework.config.schema import DEFAULTS
from framework.errors import ConfigError, NonFiniteError
from framework.optim.optimizers import Optimizers, build_optimizers


class TwoBranches(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.generator = nn.Linear(3, 2)
        self.discriminator = nn.Linear(3, 1)


def sgd(task, **settings):
    return build_optimizers({"optim": {"type": "SGD", "lr": 0.5}}, task, max_iters=10, **settings)


def snapshot(module):
    return [p.detach().clone() for p in module.parameters()]


def test_a_parameter_without_gradient_this_step_is_not_moved_by_momentum():
    """zero_grad(set_to_none=True): a branch the loss no longer reaches has no gradient, so Adam
    leaves it alone instead of moving it on its momentum (which a zeroed gradient would)."""
    task = TwoBranches()
    optim = build_optimizers({"optim": {"type": "Adam", "lr": 0.1}}, task, max_iters=10)
    x = torch.ones(4, 3)
    optim.update(task.generator(x).sum() + task.discriminator(x).sum())  # both branches
    before = snapshot(task.discriminator)
    optim.update(task.generator(x).sum())  # the discriminator is not in this loss
    assert all(torch.equal(a, b) for a, b in zip(before, task.discriminator.parameters()))


def test_gradient_norms_are_measured_without_clipping_and_taken_once():
    task = TwoBranches()
    optim = sgd(task)
    x = torch.ones(4, 3)
    optim.update(task.generator(x).sum())  # the discriminator has no gradient: left out of the norm
    grads = torch.cat([p.grad.flatten() for p in task.generator.parameters()])
    assert optim.grad_norms["main"].item() == pytest.approx(grads.norm().item())
    assert optim.take_grad_norms()["main"].item() == pytest.approx(grads.norm().item())
    assert optim.take_grad_norms() == {}


def test_clipping_happens_when_details_are_not_logged_and_nothing_is_measured_without_it():
    task = TwoBranches()
    clipped = build_optimizers({"optim": {"type": "SGD", "lr": 0.5, "clip_grad": {"max_norm": 1e-3}}}, task, 10)
    clipped.log_details = False
    clipped.update(task.generator(torch.ones(4, 3)).sum() * 100)
    assert torch.cat([p.grad.flatten() for p in task.generator.parameters()]).norm() <= 1e-3 * (1 + 1e-4)
    plain = sgd(TwoBranches())
    plain.log_details = False
    plain.update(plain.params()[0].sum())
    assert plain.grad_norms == {}


def test_defaults_match_the_config_defaults():
    assert Optimizers({}).skip_nonfinite is False and Optimizers({}).log_details is True
    built = sgd(TwoBranches())
    assert Optimizers({}).max_skips == built.max_skips == DEFAULTS["train"]["nan_max_skips"]


def skip_iteration(optim, task, finite: bool):
    loss = task.generator(torch.ones(2, 3)).sum()
    optim.update(loss if finite else loss * float("nan"))
    return optim.end_iteration()


def test_skip_policy_counts_consecutive_skips_and_a_finite_step_resets_them():
    task = TwoBranches()
    optim = sgd(task, skip_nonfinite=True, max_skips=2)
    assert [skip_iteration(optim, task, False) for _ in range(2)] == [True, True]  # 2 allowed from the start
    assert all(p.grad is None for p in task.parameters())  # the NaN gradients are dropped
    assert skip_iteration(optim, task, True) is False  # resets the count
    assert [skip_iteration(optim, task, False) for _ in range(2)] == [True, True]
    with pytest.raises(NonFiniteError) as raised:
        skip_iteration(optim, task, False)
    assert str(raised.value) == (
        "training diverged: the loss was not finite in 3 iterations in a row (train.nan_policy=skip allows 2, "
        "train.nan_max_skips); checkpoints and best.pth from before it are kept")
    assert optim.skipped_steps == 5
    assert skip_iteration(sgd(task, skip_nonfinite=True), task, True) is False  # a fresh run's first step


def test_without_the_skip_policy_end_iteration_reports_no_skip():
    task = TwoBranches()
    optim = sgd(task)
    assert skip_iteration(optim, task, False) is False and optim.skipped_steps == 0


def test_state_round_trip_restores_scale_growth_and_skipped_steps():
    task = TwoBranches()
    optim = sgd(task, scaler=torch.amp.GradScaler("cpu", init_scale=1024.0), skip_nonfinite=True)
    skip_iteration(optim, task, False)  # skipped before the scaler sees it
    bias = task.generator.bias
    optim.update(torch.sqrt(bias - bias.detach()).sum())  # a finite loss (0), inf gradients: 1024 -> 512
    optim.end_iteration()
    skip_iteration(optim, task, True)  # one good step
    state = optim.state_dict()
    assert state["skipped_steps"] == 1 and state["scaler"]["scale"] == 512.0

    restored = sgd(TwoBranches(), scaler=torch.amp.GradScaler("cpu", init_scale=1024.0), skip_nonfinite=True)
    restored.load_state_dict(state)
    assert restored.skipped_steps == 1
    assert restored.scaler.state_dict() == optim.scaler.state_dict()

    old = {k: v for k, v in state.items() if k not in ("scaler", "skipped_steps")}  # from an older run
    fresh = sgd(TwoBranches(), scaler=torch.amp.GradScaler("cpu", init_scale=1024.0))
    fresh.load_state_dict(old)
    assert fresh.skipped_steps == 0 and fresh.scaler.get_scale() == 1024.0
    without_scaler = sgd(TwoBranches())
    without_scaler.load_state_dict(state)  # a float16 run's checkpoint resumed in float32
    assert without_scaler.scaler is None and without_scaler.skipped_steps == 1


def test_backward_runs_outside_the_forwards_autocast():
    """Under bfloat16 autocast, update() runs backward with autocast off; the gradients are those
    of the same graph backpropagated outside any autocast region."""
    reference, task = TwoBranches(), TwoBranches()
    x = torch.ones(4, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = reference.generator(x).float().pow(2).sum()
    loss.backward()
    optim = sgd(task)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        optim.update(task.generator(x).float().pow(2).sum())
    assert optim.grad_norms["main"].item() == pytest.approx(
        torch.cat([p.grad.flatten() for p in reference.generator.parameters()]).norm().item())


def test_naming_an_optimizer_is_checked():
    optim = build_optimizers({"optimizers": {"generator": {"type": "SGD", "lr": 0.1, "params": "generator"},
                                             "discriminator": {"type": "SGD", "lr": 0.1, "params": "discriminator"}}},
                             TwoBranches(), max_iters=1)
    with pytest.raises(ValueError, match=r"^several optimizers \(generator, discriminator\): name the one to update$"):
        optim.params()
    with pytest.raises(KeyError, match=r"no optimizer named 'gen' \(have: generator, discriminator\)"):
        optim.params("gen")


class GAN(TwoBranches):
    required_optimizers = ("generator", "discriminator")


@pytest.mark.parametrize("cfg, message", [
    ({}, r"^the config has no 'optim' section \(e\.g\. optim: \{type: AdamW, lr: 1\.0e-3\}\)$"),
    ({"optim": {"type": "SGD", "lr": 0.1}},
     r"^optim: GAN updates optimizers named generator, discriminator; missing generator, discriminator "
     r"\(declare them under optimizers:, each with params: <submodule>\)$"),
    ({"optimizers": {"generator": {"type": "SGD", "lr": 0.1, "params": "generator"}}},
     r"^optimizers: GAN updates optimizers named generator, discriminator; missing discriminator "),
    ({"optimizers": {"generator": 3}},
     r"^optimizers\.generator: expected an optimizer node like \{type: Adam, lr: 1\.0e-3\}, got 3$"),
    ({"optim": {"type": "SGD", "lr": 0.1, "params": "encoder"}},
     r"^optim\.params: the task has no submodule 'encoder' \(it has: generator, discriminator\)$"),
    ({"optim": {"type": "Adamm", "lr": 0.1}}, r"^optim(\.type)?: unknown type 'Adamm'"),
    ({"optim": {"type": "SGD", "lr": 0.1, "param_groups": [{"lr_mult": 0.5}]}},
     r"^optim\.param_groups\[0\]\.params: missing"),
    ({"optim": {"type": "SGD", "lr": 0.1, "scheduler": {"type": "WarmupLR", "warmup": "x"}}},
     r"^optim\.scheduler \(WarmupLR\): warmup must be"),
])
def test_build_errors_name_the_key(cfg, message):
    with pytest.raises(ConfigError, match=message):
        build_optimizers(cfg, GAN(), max_iters=1)


def test_an_entry_selecting_only_frozen_parameters_is_refused():
    task = TwoBranches()
    task.discriminator.requires_grad_(False)
    with pytest.raises(ConfigError, match=r"^optim\.params: selects no trainable parameters$"):
        build_optimizers({"optim": {"type": "SGD", "lr": 0.1, "params": "discriminator"}}, task, 1)


def test_a_gan_with_both_optimizers_builds_and_param_groups_scale_the_lr():
    optim = build_optimizers({"optimizers": {
        "generator": {"type": "SGD", "lr": 0.1, "params": "generator"},
        "discriminator": {"type": "SGD", "lr": 0.2, "params": "discriminator"}}}, GAN(), max_iters=1)
    assert optim.lrs() == {"generator": 0.1, "discriminator": 0.2}
    task = TwoBranches()
    grouped = build_optimizers({"optim": {"type": "SGD", "lr": 0.1, "param_groups": [
        {"name": "disc", "params": "discriminator", "lr_mult": 0.5}]}}, task, max_iters=1)
    groups = grouped.optimizers["main"].param_groups
    assert [g["lr"] for g in groups] == pytest.approx([0.1, 0.05])
    assert {id(p) for p in groups[1]["params"]} == {id(p) for p in task.discriminator.parameters()}


def test_differentiable_optimizers_do_not_get_the_fused_default():
    optim = build_optimizers({"optim": {"type": "SGD", "lr": 0.1, "differentiable": True}}, TwoBranches(), 1)
    assert not optim.optimizers["main"].defaults.get("fused")

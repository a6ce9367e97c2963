"""Named optimizers: parameters by submodule, a scheduler and gradient clipping each, ownership."""

import pytest
import torch
from torch import nn

import framework  # noqa: F401  (fills the registries)
from framework.errors import ConfigError
from framework.optim.optimizers import build_optimizers


class TwoNets(nn.Module):
    def __init__(self):
        super().__init__()
        self.generator = nn.Linear(3, 3)
        self.discriminator = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1))


def two(**discriminator_extra):
    return {"optimizers": {
        "generator": {"type": "Adam", "lr": 0.1, "betas": [0.5, 0.999], "params": "generator",
                      "scheduler": {"type": "WarmupLR", "warmup": "linear", "warmup_iters": 4, "warmup_factor": 0.5}},
        "discriminator": {"type": "SGD", "lr": 0.2, "params": ["discriminator"], **discriminator_extra},
    }}


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")  # no step needed here
def test_each_optimizer_owns_its_submodules_parameters_and_schedule():
    task = TwoNets()
    optim = build_optimizers(two(scheduler={"type": "WarmupMultiStepLR", "milestones": [2], "gamma": 0.1}),
                             task, max_iters=10)
    assert optim.names == ["generator", "discriminator"]
    assert {id(p) for p in optim.params("generator")} == {id(p) for p in task.generator.parameters()}
    assert {id(p) for p in optim.params("discriminator")} == {id(p) for p in task.discriminator.parameters()}
    assert isinstance(optim.optimizers["generator"], torch.optim.Adam)
    lrs = []
    for _ in range(3):
        lrs.append(optim.lrs())
        optim.step_schedulers()
    assert [round(lr["generator"], 6) for lr in lrs] == [0.05, 0.0625, 0.075]  # linear warmup from 0.5x
    assert [round(lr["discriminator"], 6) for lr in lrs] == [0.2, 0.2, 0.02]


def test_step_zeroes_backprops_clips_and_steps_only_the_named_optimizer():
    task = TwoNets()
    optim = build_optimizers(two(clip_grad={"max_norm": 1e-3}), task, max_iters=1)
    for p in task.generator.parameters():
        p.grad = torch.ones_like(p)
    generator_before = [p.detach().clone() for p in task.generator.parameters()]
    discriminator_before = [p.detach().clone() for p in task.discriminator.parameters()]
    loss = task.discriminator(torch.randn(4, 3)).pow(2).sum() * 1e3
    optim.update(loss, "discriminator")
    assert all(torch.equal(p.grad, torch.ones_like(p)) for p in task.generator.parameters())
    assert all(torch.equal(a, b) for a, b in zip(generator_before, task.generator.parameters()))
    grads = torch.cat([p.grad.flatten() for p in task.discriminator.parameters()])
    assert grads.norm() <= 1e-3 * (1 + 1e-4)  # clipped before the step
    # SGD: each parameter moved by lr x its clipped gradient (~5e-5 here). Compared element by
    # element, to within 2 float32 ulps of parameters below 1 in size: the norm of the difference
    # of the weights lost ~1e-4 of its value to that rounding, for some random initialisations.
    for before, after in zip(discriminator_before, task.discriminator.parameters()):
        torch.testing.assert_close(after.detach(), before - 0.2 * after.grad, rtol=0, atol=1.2e-7)
    assert "discriminator" in optim.grad_norms and "generator" not in optim.grad_norms


def test_single_optimizer_config_keeps_working():
    optim = build_optimizers({"optim": {"type": "AdamW", "lr": 1e-3}}, TwoNets(), max_iters=1)
    assert optim.names == ["main"] and len(optim.params()) == 6


def test_state_dict_round_trip_restores_both_optimizers_and_schedulers():
    task = TwoNets()
    optim = build_optimizers(two(), task, max_iters=10)
    optim.update(task.generator(torch.randn(2, 3)).sum(), "generator")
    optim.step_schedulers()
    restored = build_optimizers(two(), task, max_iters=10)
    restored.load_state_dict(optim.state_dict())
    assert restored.lrs() == optim.lrs()
    assert restored.optimizers["generator"].state_dict()["state"].keys() == {0, 1}


@pytest.mark.parametrize("change, message", [
    ({"params": "discriminatr"}, r"^optimizers\.discriminator\.params: the task has no submodule 'discriminatr'; "
                                 r"did you mean 'discriminator'\?"),
    ({"params": "generator"}, r"^optimizers\.discriminator\.params: parameters of 'generator' are already "
                              r"optimized by 'generator'"),
    ({"params": "discriminator.0", "lrr": 1}, r"^optimizers\.discriminator\.lrr: SGD has no parameter 'lrr'"),
])
def test_misconfigured_optimizers_name_the_key(change, message):
    with pytest.raises(ConfigError, match=message):
        build_optimizers(two(**change), TwoNets(), max_iters=1)


@pytest.mark.parametrize("extra, fused", [({}, True), ({"fused": False}, False), ({"foreach": True}, None)])
def test_optimizers_with_a_fused_kernel_use_it_unless_the_entry_chooses(extra, fused):
    optim = build_optimizers({"optim": {"type": "AdamW", "lr": 0.1, **extra}}, TwoNets(), max_iters=1)
    assert optim.optimizers["main"].defaults["fused"] is fused


def test_fused_default_steps_like_torchs_default_and_skips_optimizers_without_a_kernel():
    fused, default = TwoNets(), TwoNets()
    default.load_state_dict(fused.state_dict())
    start = [p.detach().clone() for p in fused.parameters()]
    optims = [build_optimizers({"optim": {"type": "Adam", "lr": 0.1, **extra}}, net, max_iters=1)
              for net, extra in ((fused, {}), (default, {"fused": False}))]
    for net, optim in zip((fused, default), optims):
        for _ in range(3):
            optim.update(net.discriminator(net.generator(torch.ones(2, 3))).sum(), "main")
    for a, b in zip(fused.parameters(), default.parameters()):
        torch.testing.assert_close(a, b)  # the same update, to float32 rounding
    assert all(not torch.equal(a, b) for a, b in zip(fused.parameters(), start))  # it did train
    rmsprop = build_optimizers({"optim": {"type": "RMSprop", "lr": 0.1}}, TwoNets(), max_iters=1)
    assert "fused" not in rmsprop.optimizers["main"].defaults


def lrs_of(scheduler_node, iterations, base_lr=1.0, max_iters=10):
    task = TwoNets()
    optim = build_optimizers({"optim": {"type": "SGD", "lr": base_lr, "scheduler": scheduler_node}}, task, max_iters)
    lrs = []
    for _ in range(iterations):
        lrs.append(optim.lrs()["main"])
        optim.optimizers["main"].step()  # (no gradients: a no-op) keeps torch's order check quiet
        optim.step_schedulers()
    return lrs


@pytest.mark.parametrize("warmup, expected", [
    # lr(it) = base_lr * factor(it); warmup_iters 4, warmup_factor 0.2
    ("constant", [0.2, 0.2, 0.2, 0.2, 1.0, 1.0]),  # the factor until warmup_iters, then 1
    ("linear", [0.2, 0.4, 0.6, 0.8, 1.0, 1.0]),  # 0.2 + 0.8 * it / 4
    (None, [1.0] * 6),
])
def test_warmup_kinds_give_their_learning_rate_at_each_iteration(warmup, expected):
    lrs = lrs_of({"type": "WarmupLR", "warmup": warmup, "warmup_iters": 4, "warmup_factor": 0.2}, 6)
    assert lrs == pytest.approx(expected, abs=1e-12)


def test_warmup_then_poly_decay_by_hand():
    """WarmupPolyLR: lr(it) = base * warmup(it) * max((1 - it/max_iters)^power, min_lr_ratio)."""
    lrs = lrs_of({"type": "WarmupPolyLR", "warmup": "constant", "warmup_iters": 2, "warmup_factor": 0.5,
                  "power": 2.0, "min_lr_ratio": 0.1}, 11, base_lr=0.1)
    expected = [0.1 * (0.5 if it < 2 else 1.0) * max((1 - it / 10) ** 2, 0.1) for it in range(11)]
    assert lrs == pytest.approx(expected, abs=1e-12)
    assert lrs[1] == pytest.approx(0.1 * 0.5 * 0.81) and lrs[9] == pytest.approx(0.1 * 0.1)

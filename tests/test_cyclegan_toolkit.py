"""The GAN toolkit inside CycleGANTask against hand computations: DiffAugment on what each
discriminator sees (a draw per view, in the task's order, the generators differentiated
through it), ADA's p per domain and per D step, a multi-scale discriminator through the losses,
the logs and the health check, and the task's new keys checked by name. (Lazy R1 against a
hand-written iteration: tests/test_cyclegan.py; real runs, resume and DDP:
projects/cyclegan/tests.)"""

import copy

import pytest
import torch
from test_cyclegan import D_WEIGHT, batches, discriminator, generator
from torch import nn

import framework  # noqa: F401  (fills the registries)
from framework.errors import ConfigError
from framework.models.diff_augment import DiffAugment
from framework.models.discriminators import MultiScaleDiscriminator
from framework.optim.optimizers import build_optimizers
from framework.registry import TASKS
from framework.tasks.cyclegan import CycleGANTask
from support import named

LR = 0.1


def sgd(task):
    entry = {"type": "SGD", "lr": LR}
    return build_optimizers({"optimizers": {
        "generators": {**entry, "params": ["generator_ab", "generator_ba"]},
        "discriminators": {**entry, "params": ["discriminator_a", "discriminator_b"]}}}, task, max_iters=10)


def signed(batch):
    return batch["a"].float() / 127.5 - 1, batch["b"].float() / 127.5 - 1


def lsgan(output, target):
    return (output - target).pow(2).mean()


# ----------------------------------------------------------------------------- DiffAugment


def test_diff_augment_draws_every_view_in_order_and_the_generators_learn_through_it():
    """cycle_weight 0: the generators' gradient is their adversarial terms' alone, so it must
    pass through the augmentation. Every view is its own draw (no pair to keep aligned in
    CycleGAN): G step T_b(fake_b), T_a(fake_a); D step T_a(a), T_a(fake_a), T_b(b), T_b(fake_b)."""
    torch.manual_seed(0)
    nets = [generator(), generator(), discriminator(), discriminator()]
    g_ab, g_ba, d_a, d_b = copy.deepcopy(nets)
    task = CycleGANTask(*nets, cycle_weight=0.0, identity_weight=0.0, pool_size=0, d_augment=DiffAugment(p=1.0))
    batch = batches()[0]
    torch.manual_seed(1)
    logs = task.train_iteration([batch], sgd(task))

    augment = DiffAugment(p=1.0)
    a, b = signed(batch)
    torch.manual_seed(1)
    fake_b, fake_a = g_ab(a), g_ba(b)
    expected = {"loss_g_ab": lsgan(d_b(*augment(fake_b)), 1), "loss_g_ba": lsgan(d_a(*augment(fake_a)), 1)}
    generators = [*g_ab.parameters(), *g_ba.parameters()]
    grads = torch.autograd.grad(expected["loss_g_ab"] + expected["loss_g_ba"], generators)
    for domain, d, real, fake in (("a", d_a, a, fake_a), ("b", d_b, b, fake_b)):
        real_view, fake_view = augment(real), augment(fake.detach())
        expected[f"loss_d_{domain}"] = D_WEIGHT * (lsgan(d(*real_view), 1) + lsgan(d(*fake_view), 0))

    for key, value in expected.items():
        torch.testing.assert_close(logs[key], value.detach(), msg=named(key))
    updated = [*task.generator_ab.parameters(), *task.generator_ba.parameters()]
    assert all(grad.abs().sum() > 0 for grad in grads)
    for index, (param, reference, grad) in enumerate(zip(updated, generators, grads)):
        torch.testing.assert_close(param, reference - LR * grad, msg=named(f"generator parameter {index}"))


class Verdict(nn.Module):
    """A discriminator calling everything real (sign +1) or fake (-1): a 1x1 conv of zero
    weight and bias sign x 5 (SGD at LR moves it by far less than 5 in two steps)."""

    def __init__(self, sign):
        super().__init__()
        self.conv = nn.Conv2d(3, 1, 1)
        nn.init.zeros_(self.conv.weight)
        nn.init.constant_(self.conv.bias, 5.0 * sign)

    def forward(self, x):
        return self.conv(x)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_adaptive_p_moves_per_domain_once_per_d_step(accumulate):
    """D_a is always right on its reals (sign +1 > target 0.6): p_a rises from 0; D_b is always
    wrong: p_b falls from 0.5. interval 2: one adjustment after the second D step, by the 2 x 4
    reals seen / speed_images 100, whether the batch of 4 comes whole or in 2 micro-batches."""
    torch.manual_seed(0)
    augment = DiffAugment(adaptive=True, target=0.6, interval=2, speed_images=100)
    task = CycleGANTask(generator(), generator(), Verdict(+1), Verdict(-1), pool_size=0, d_augment=augment)
    task.adversary_b.augment.p.fill_(0.5)
    optim = sgd(task)
    generator_ = torch.Generator().manual_seed(3)
    batch = {side: torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8, generator=generator_) for side in "ab"}
    parts = [{side: images[i::accumulate] for side, images in batch.items()} for i in range(accumulate)]
    p = []
    for _ in range(2):
        logs = task.train_iteration(parts, optim)
        optim.end_iteration()
        p += [float(logs["ada_p_a"]), float(logs["ada_p_b"])]
    assert p == pytest.approx([0.0, 0.5, 0.08, 0.42])
    state = task.state_dict()  # each domain's p is the checkpoint's
    assert float(state["adversary_a.augment.p"]) == pytest.approx(0.08)
    assert float(state["adversary_b.augment.p"]) == pytest.approx(0.42)


# ----------------------------------------------------------------------------- multi-scale D


def multi_scale():
    return MultiScaleDiscriminator(3, num_scales=2, base_channels=4, num_layers=2, norm="none")


def test_a_multi_scale_discriminator_goes_through_the_losses_logs_and_health_check():
    torch.manual_seed(0)
    nets = [generator(), generator(), multi_scale(), multi_scale()]
    g_ab, g_ba, d_a, d_b = copy.deepcopy(nets)
    task = CycleGANTask(*nets, identity_weight=0.0, pool_size=0)
    generator_ = torch.Generator().manual_seed(4)
    batch = {side: torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8, generator=generator_) for side in "ab"}
    logs = task.train_iteration([batch], sgd(task))

    def over_scales(output, target):  # each scale's lsgan term, averaged over the scales
        return sum(lsgan(logits, target) for logits in output.logits) / 2

    a, b = signed(batch)
    with torch.no_grad():  # the fakes and both Ds as the iteration's G and D steps saw them
        fake_b, fake_a = g_ab(a), g_ba(b)
        expected = {"loss_g_ab": over_scales(d_b(fake_b), 1), "loss_g_ba": over_scales(d_a(fake_a), 1)}
        for domain, d, real, fake in (("a", d_a, a, fake_a), ("b", d_b, b, fake_b)):
            real_out, fake_out = d(real), d(fake)
            expected[f"loss_d_{domain}"] = D_WEIGHT * (over_scales(real_out, 1) + over_scales(fake_out, 0))
            expected[f"d_real_logit_{domain}"] = sum(logits.mean() for logits in real_out.logits) / 2
            expected[f"d_fake_logit_{domain}"] = sum(logits.mean() for logits in fake_out.logits) / 2
            expected[f"fake_spread_{domain}"] = fake.std(dim=0).mean()
    for key, value in expected.items():  # some are ~1e-6: a relative check, not the default atol of 1e-5
        torch.testing.assert_close(logs[key], value, rtol=1e-4, atol=1e-9, msg=named(key))

    logged = {key: float(value) for key, value in logs.items()} | {"loss_d_b": 1e-3}  # D_b "wins"
    warnings = [task.diagnose(logged) for _ in range(3)]
    assert warnings[:2] == [[], []] and len(warnings[2]) == 1
    assert f"loss_d_b 1.00e-03 < 0.01 for 3 log intervals (D logits real {logged['d_real_logit_b']:.2f}, " \
           f"fake {logged['d_fake_logit_b']:.2f})" in warnings[2][0]


# ----------------------------------------------------------------------------- config keys


def build(**extra):
    return TASKS.build({"type": "CycleGANTask", "generator_ab": generator(), "generator_ba": generator(),
                        "discriminator_a": discriminator(), "discriminator_b": discriminator(), **extra}, path="task")


@pytest.mark.parametrize("extra, message", [
    ({"r1_wieght": 1.0}, "task.r1_wieght: CycleGANTask has no parameter 'r1_wieght'; did you mean 'r1_weight'"),
    ({"r1_weight": -1.0}, r"task \(CycleGANTask\): r1_weight must be >= 0, got -1.0"),
    ({"r1_interval": 0}, r"task \(CycleGANTask\): r1_interval must be a positive integer, got 0"),
    ({"d_augment": {"type": "DiffAugment", "p": 2.0}}, r"task.d_augment \(DiffAugment\): p must be in \[0, 1\]"),
    ({"gan_loss": "hing"}, r"task \(CycleGANTask\): gan_loss: unknown GAN loss 'hing'; did you mean 'hinge'"),
    ({"cycle_weight": float("nan")}, r"task \(CycleGANTask\): cycle_weight must be a finite number >= 0, got nan"),
    ({"d_weight": float("inf")}, r"task \(CycleGANTask\): d_weight must be a finite number >= 0, got inf"),
])
def test_the_toolkit_keys_are_checked_by_name(extra, message):
    with pytest.raises(ConfigError, match=message):
        build(**extra)


def test_one_diff_augment_node_gives_each_domain_its_own():
    task = build(d_augment={"type": "DiffAugment", "adaptive": True, "interval": 3})
    augment_a, augment_b = task.adversary_a.augment, task.adversary_b.augment
    assert augment_a is not augment_b and augment_b.interval == 3
    assert {"adversary_a.augment.p", "adversary_b.augment.p", "adversary_a.augment.sign_sum",
            "adversary_b.augment.observed"} <= set(task.state_dict())
    assert set(task.networks()) == {"generator_ab", "generator_ba", "discriminator_a", "discriminator_b"}

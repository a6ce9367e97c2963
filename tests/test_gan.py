"""GANTask: equal to a hand-written training loop, gradient isolation between G and D, EMA,
counters in the state dict, and the GAN losses' configuration errors."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import framework  # noqa: F401  (fills the registries)
from framework.errors import ConfigError
from framework.losses.gan import GAN_LOSS_TYPES
from framework.optim.optimizers import build_optimizers
from framework.registry import TASKS
from framework.tasks.gan import GANTask
from support import named

SIZE, BATCH, ITERATIONS, LATENT = 16, 4, 5, 8
LR, BETAS = 2e-3, (0.5, 0.999)
L1_WEIGHT, D_WEIGHT, ADV_WEIGHT, GP_WEIGHT = 10.0, 0.5, 1.5, 5.0


class TinyGenerator(nn.Module):
    def __init__(self, in_channels=3):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(in_channels, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.Conv2d(8, 3, 3, padding=1), nn.Tanh())

    def forward(self, x):
        if x.shape[-1] == 1:  # noise N x latent x 1 x 1 -> an image
            x = x.expand(-1, -1, SIZE, SIZE)
        return self.body(x)


class TinyDiscriminator(nn.Module):
    def __init__(self, in_channels=6):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(in_channels, 8, 4, 2, 1), nn.BatchNorm2d(8), nn.LeakyReLU(0.2),
                                  nn.Conv2d(8, 1, 4, 2, 1))

    def forward(self, x):
        return self.body(x)


def optimizer_config(**extra):
    entry = {"type": "Adam", "lr": LR, "betas": list(BETAS), **extra}
    return {"optimizers": {"generator": {**entry, "params": "generator"},
                           "discriminator": {**entry, "params": "discriminator"}}}


def batches(conditional: bool):
    generator = torch.Generator().manual_seed(1)
    for _ in range(ITERATIONS):
        images = torch.randint(0, 256, (2, BATCH, 3, SIZE, SIZE), dtype=torch.uint8, generator=generator)
        yield {"input": images[0], "target": images[1]} if conditional else {"image": images[1]}


def as_float(image):
    return image.float() / 127.5 - 1


# ----------------------------------------------------------------------------- the reference


def reference_losses(kind):
    """Hand-written (D on real, D on fake, G) losses, independent of framework/losses/gan.py."""
    if kind == "vanilla":
        return (lambda r: F.binary_cross_entropy_with_logits(r, torch.ones_like(r)),
                lambda f: F.binary_cross_entropy_with_logits(f, torch.zeros_like(f)),
                lambda f: F.binary_cross_entropy_with_logits(f, torch.ones_like(f)))
    if kind == "lsgan":
        return (lambda r: F.mse_loss(r, torch.ones_like(r)), lambda f: F.mse_loss(f, torch.zeros_like(f)),
                lambda f: F.mse_loss(f, torch.ones_like(f)))
    if kind == "hinge":
        return (lambda r: torch.clamp(1 - r, min=0).mean(), lambda f: torch.clamp(1 + f, min=0).mean(),
                lambda f: -f.mean())
    return lambda r: -r.mean(), lambda f: f.mean(), lambda f: -f.mean()


def reference_training(generator, discriminator, kind, conditional, d_steps_per_g_step=1, ema_decay=None,
                       ema_start=0):
    """The textbook loop: D on real and detached fake, then G through a D that needs no grads;
    the EMA copies G for its first `ema_start` updates, then averages."""
    # fused, as the framework's optimizers are by default: Adam turns the rounding noise of the
    # near-zero gradients of biases before a norm layer into +-lr steps, so the kernel must match
    opt_g = torch.optim.Adam(generator.parameters(), lr=LR, betas=BETAS, fused=True)
    opt_d = torch.optim.Adam(discriminator.parameters(), lr=LR, betas=BETAS, fused=True)
    ema = copy.deepcopy(generator) if ema_decay is not None else None
    d_real_loss, d_fake_loss, g_loss = reference_losses(kind)
    for step, batch in enumerate(batches(conditional), start=1):
        if conditional:
            condition, real = as_float(batch["input"]), as_float(batch["target"])
            fake = generator(condition)

            def d_input(image, condition=condition):
                return torch.cat([condition, image], 1)
        else:
            real = as_float(batch["image"])
            fake = generator(torch.randn(BATCH, LATENT, 1, 1))

            def d_input(image):
                return image
        opt_d.zero_grad()
        loss_d = D_WEIGHT * d_real_loss(discriminator(d_input(real))) + \
            D_WEIGHT * d_fake_loss(discriminator(d_input(fake.detach())))
        if kind == "wgan-gp":
            alpha = torch.rand(BATCH, 1, 1, 1)
            mixed = (alpha * real + (1 - alpha) * fake.detach()).requires_grad_(True)
            grad = torch.autograd.grad(discriminator(d_input(mixed)).sum(), mixed, create_graph=True)[0]
            loss_d = loss_d + GP_WEIGHT * ((grad.reshape(BATCH, -1).norm(dim=1) - 1) ** 2).mean()
        loss_d.backward()
        opt_d.step()
        if step % d_steps_per_g_step:
            continue
        opt_g.zero_grad()
        for p in discriminator.parameters():
            p.requires_grad_(False)
        loss_g = ADV_WEIGHT * g_loss(discriminator(d_input(fake)))
        if conditional:
            loss_g = loss_g + L1_WEIGHT * (fake - real).abs().mean()
        loss_g.backward()
        opt_g.step()
        for p in discriminator.parameters():
            p.requires_grad_(True)
        if ema is not None:
            decay = 0.0 if step // d_steps_per_g_step <= ema_start else ema_decay
            with torch.no_grad():
                for e, p in zip(ema.parameters(), generator.parameters()):
                    e.copy_(decay * e + (1 - decay) * p)
                for e, b in zip(ema.buffers(), generator.buffers()):
                    e.copy_(b)
    return ema


def engine_training(task, optim, conditional):
    logs = []
    for batch in batches(conditional):
        logs.append(task.train_step(batch, optim))
    return logs


def assert_same_parameters(ours, theirs):
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0, msg=named(name))
    for (name, a), b in zip(ours.named_buffers(), theirs.buffers()):
        torch.testing.assert_close(a.float(), b.float(), atol=1e-6, rtol=0, msg=named(name))


@pytest.mark.parametrize("kind", GAN_LOSS_TYPES)
def test_gan_step_equals_a_hand_written_loop(kind):
    torch.manual_seed(0)
    generator, discriminator = TinyGenerator(), TinyDiscriminator()
    reference_g, reference_d = copy.deepcopy(generator), copy.deepcopy(discriminator)
    task = GANTask(generator, discriminator, gan_loss=kind, adv_weight=ADV_WEIGHT, l1_weight=L1_WEIGHT,
                   d_weight=D_WEIGHT, gp_weight=GP_WEIGHT)
    optim = build_optimizers(optimizer_config(), task, max_iters=ITERATIONS)

    torch.manual_seed(123)
    logs = engine_training(task, optim, conditional=True)
    torch.manual_seed(123)
    reference_training(reference_g, reference_d, kind, conditional=True)

    assert_same_parameters(task.generator, reference_g)
    assert_same_parameters(task.discriminator, reference_d)
    expected = {"loss_d", "loss_d_real", "loss_d_fake", "loss_g", "loss_g_adv", "loss_g_l1",
                "d_real_logit", "d_fake_logit", "fake_spread"}
    assert set(logs[-1]) == expected | ({"loss_d_gp"} if kind == "wgan-gp" else set())
    assert all(not v.requires_grad for v in logs[-1].values())


def test_unconditional_gan_with_d_steps_per_g_step_and_ema_equals_the_loop():
    # G updates at iterations 2 and 4: with ema_start=1 the first is copied, the second averaged.
    torch.manual_seed(0)
    generator, discriminator = TinyGenerator(LATENT), TinyDiscriminator(3)
    reference_g, reference_d = copy.deepcopy(generator), copy.deepcopy(discriminator)
    task = GANTask(generator, discriminator, gan_loss="hinge", adv_weight=ADV_WEIGHT, d_weight=D_WEIGHT,
                   latent_dim=LATENT, d_steps_per_g_step=2, ema_decay=0.9, ema_start=1)
    optim = build_optimizers(optimizer_config(), task, max_iters=ITERATIONS)

    torch.manual_seed(5)
    logs = engine_training(task, optim, conditional=False)
    torch.manual_seed(5)
    reference_ema = reference_training(reference_g, reference_d, "hinge", conditional=False,
                                       d_steps_per_g_step=2, ema_decay=0.9, ema_start=1)

    assert_same_parameters(task.generator, reference_g)
    assert_same_parameters(task.discriminator, reference_d)
    assert_same_parameters(task.generator_ema, reference_ema)
    assert ["loss_g" in step for step in logs] == [False, True, False, True, False]
    assert int(task.state_dict()["adversary.d_steps.count"]) == ITERATIONS  # the checkpointed counter


def test_generator_step_leaves_d_grads_alone_and_discriminator_step_leaves_g_grads_alone():
    torch.manual_seed(0)
    task = GANTask(TinyGenerator(), TinyDiscriminator(), gan_loss="wgan-gp", l1_weight=1.0)
    optim = build_optimizers(optimizer_config(), task, max_iters=1)
    batch = next(batches(conditional=True))
    condition, real = task.unpack(batch)

    def mark(module, value):
        for p in module.parameters():
            p.grad = torch.full_like(p, value)

    mark(task.generator, 7.0)
    loss_d, _ = task.adversary.d_loss(task.discriminator, real, task.generator(condition).detach(), condition)
    optim.update(loss_d, "discriminator")
    assert all(torch.equal(p.grad, torch.full_like(p, 7.0)) for p in task.generator.parameters())
    assert all(p.grad is not None and not torch.equal(p.grad, torch.full_like(p, 7.0))
               for p in task.discriminator.parameters())

    mark(task.discriminator, 3.0)
    d_before = [p.detach().clone() for p in task.discriminator.parameters()]
    task.generator_step(condition, real, task.generator(condition), optim)
    assert all(torch.equal(p.grad, torch.full_like(p, 3.0)) for p in task.discriminator.parameters())
    assert all(torch.equal(a, b) for a, b in zip(d_before, task.discriminator.parameters()))
    assert all(not torch.equal(p.grad, torch.full_like(p, 7.0)) for p in task.generator.parameters())
    assert all(p.requires_grad for p in task.discriminator.parameters())  # unfrozen afterwards


def test_ema_generator_is_checkpointed_but_trained_by_no_optimizer():
    task = GANTask(TinyGenerator(LATENT), TinyDiscriminator(3), latent_dim=LATENT, ema_decay=0.99)
    optim = build_optimizers(optimizer_config(), task, max_iters=1)
    state = task.state_dict()
    assert {"adversary.d_steps.count", "ema.updates.count", "fixed_noise"} <= set(state)
    assert any(k.startswith("ema.generator.") for k in state)
    assert set(task.networks()) == {"generator", "discriminator"}
    optimized = {id(p) for name in optim.names for p in optim.params(name)}
    assert not any(id(p) in optimized for p in task.generator_ema.parameters())


def test_step_counter_survives_a_state_dict_round_trip():
    task = GANTask(TinyGenerator(LATENT), TinyDiscriminator(3), latent_dim=LATENT, d_steps_per_g_step=3)
    optim = build_optimizers(optimizer_config(), task, max_iters=5)
    stream = batches(conditional=False)
    for _ in range(2):
        task.train_step(next(stream), optim)
    restored = GANTask(TinyGenerator(LATENT), TinyDiscriminator(3), latent_dim=LATENT, d_steps_per_g_step=3)
    restored_optim = build_optimizers(optimizer_config(), restored, max_iters=5)
    restored.train_step(next(batches(conditional=False)), restored_optim)  # a counter to be overwritten
    restored.load_state_dict(task.state_dict())
    assert "loss_g" in restored.train_step(next(stream), restored_optim)  # the 3rd D step: a G step


@pytest.mark.parametrize("kwargs, message", [
    ({"gan_loss": "hing"}, r"gan_loss: unknown GAN loss 'hing'; did you mean 'hinge'\? \(choose one of vanilla, lsgan, hinge, wgan-gp, oasis, or a registered AdversarialLoss\)"),
    ({"latent_dim": 8, "l1_weight": 1.0},
     r"l1_weight: the L1 reconstruction loss needs paired targets; an unconditional GAN \(latent_dim set\) has none$"),
    ({"latent_dim": 8, "perceptual": {"type": "VGGPerceptualLoss", "arch": "vgg16", "weights": "random"}},
     r"perceptual: the perceptual loss needs paired targets; an unconditional GAN \(latent_dim set\) has none$"),
    ({"latent_dim": 0}, r"latent_dim must be a positive number of noise channels or null, got 0$"),
    ({"d_steps_per_g_step": 0}, r"d_steps_per_g_step must be a positive integer"),
    ({"ema_decay": 1.5}, r"ema_decay must be in \[0, 1\)"),
    ({"ema_decay": 1.0}, r"ema_decay must be in \[0, 1\) or null, got 1.0$"),
])
def test_task_configuration_errors_name_the_key(kwargs, message):
    node = {"type": "GANTask", "generator": TinyGenerator(), "discriminator": TinyDiscriminator(), **kwargs}
    with pytest.raises(ConfigError, match=r"^task \(GANTask\): " + message):
        TASKS.build(node, path="task")


def test_gan_task_defaults_and_the_bounds_it_accepts():
    task = GANTask(TinyGenerator(), TinyDiscriminator())
    adversary = task.adversary
    assert (adversary.loss.name, adversary.adv_weight, task.l1_weight, adversary.d_weight, adversary.gp_weight,
            task.d_steps_per_g_step, task.ema, adversary.r1.weight, adversary.r1.interval) == (
        "vanilla", 1.0, 0.0, 1.0, 10.0, 1, None, 0.0, 1)
    ema = GANTask(TinyGenerator(), TinyDiscriminator(), ema_decay=0.0).ema
    assert (ema.decay, ema.start, ema.updates.value) == (0.0, 0, 0)
    assert GANTask(TinyGenerator(), TinyDiscriminator(), r1_weight=1.0, r1_interval=4).adversary.r1.interval == 4
    unconditional = GANTask(TinyGenerator(1), TinyDiscriminator(3), latent_dim=1)
    # 64 fixed noise vectors from a generator seeded with noise_seed 0: the same grid in every run
    expected = torch.randn(64, 1, 1, 1, generator=torch.Generator().manual_seed(0))
    assert torch.equal(unconditional.fixed_noise, expected)
    assert unconditional.adversary.d_steps.value == 0 and unconditional.adversary.d_steps.count.dtype == torch.int64


@pytest.mark.parametrize("gan_loss, warned", [("hinge", True), ("wgan-gp", False)])
def test_a_discriminator_loss_near_zero_is_reported_except_for_wgan(gan_loss, warned):
    """wgan-gp's critic loss is unbounded, so near 0 it means nothing; the others' means D wins."""
    task = GANTask(TinyGenerator(), TinyDiscriminator(), gan_loss=gan_loss)
    logged = {"loss_d": 1e-3, "d_real_logit": 5.0, "d_fake_logit": -5.0}
    warnings = [task.diagnose(logged) for _ in range(3)]
    assert warnings[:2] == [[], []] and len(warnings[2]) == (1 if warned else 0)


def test_a_gan_needs_both_named_optimizers():
    task = GANTask(TinyGenerator(), TinyDiscriminator())
    with pytest.raises(ConfigError, match=r"^optim: GANTask updates optimizers named generator, discriminator; "
                                          r"missing generator, discriminator"):
        build_optimizers({"optim": {"type": "Adam", "lr": 1e-3}}, task, max_iters=1)
    only_g = {"optimizers": {"generator": optimizer_config()["optimizers"]["generator"]}}
    with pytest.raises(ConfigError, match=r"^optimizers: .*missing discriminator"):
        build_optimizers(only_g, task, max_iters=1)

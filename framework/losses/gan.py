"""Adversarial losses of a GAN, chosen by name, and the WGAN-GP gradient penalty.

    loss = GANLoss("hinge")
    loss_real, loss_fake = loss.discriminator(d_real_logits, d_fake_logits)   # D step
    loss_adv = loss.generator(d_fake_logits)                                  # G step

| name      | D on real            | D on fake            | G                       |
| --------- | -------------------- | -------------------- | ----------------------- |
| vanilla   | BCEWithLogits(x, 1)  | BCEWithLogits(x, 0)  | BCEWithLogits(x, 1)     |
| lsgan     | mean((x - 1)^2)      | mean(x^2)            | mean((x - 1)^2)         |
| hinge     | mean(relu(1 - x))    | mean(relu(1 + x))    | -mean(x)                |
| wgan-gp   | -mean(x)             | mean(x)              | -mean(x)                |

The generator losses are the non-saturating forms. wgan-gp also needs the gradient penalty
(`gradient_penalty`), which the task adds to the discriminator's loss.

A discriminator's output is a logit tensor, or a multi-scale output with `.logits` (a list,
one logit map per scale; framework/models/discriminators.py): each loss is then the mean over
the scales of the loss at each scale.

Both penalties (`gradient_penalty`, `r1_penalty`) run their discriminator pass in float32
with autocast off, and differentiate the unscaled discriminator output: under float16 AMP the
GradScaler scales only the final loss in `optim.update`, so the penalty is neither computed in
half precision nor taken on gradients 2^16 times too large.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from framework.registry import did_you_mean

GAN_LOSS_TYPES = ("vanilla", "lsgan", "hinge", "wgan-gp")


def check_gan_loss_type(name: str, key: str = "gan_loss") -> str:
    """`name` if it is a GAN loss type, else a ValueError naming `key` with close matches."""
    if name not in GAN_LOSS_TYPES:
        raise ValueError(f"{key}: unknown GAN loss '{name}'{did_you_mean(str(name), GAN_LOSS_TYPES)} "
                         f"(choose one of {', '.join(GAN_LOSS_TYPES)})")
    return name


def _bce(logits: torch.Tensor, target: float) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, target))


def scale_logits(output) -> list[torch.Tensor]:
    """The logit maps of a discriminator output: [logits], or one per scale."""
    logits = getattr(output, "logits", output)
    return list(logits) if isinstance(logits, (list, tuple)) else [logits]


def sample_verdicts(output) -> torch.Tensor:
    """Each sample's verdict (N,): its mean logit over the patches of each scale, averaged over
    the scales (a scalar-output discriminator's logit itself)."""
    per_scale = [logits.flatten(1).float().mean(dim=1) for logits in scale_logits(output)]
    return torch.stack(per_scale).mean(dim=0) if len(per_scale) > 1 else per_scale[0]


def _over_scales(term: Callable[[torch.Tensor], torch.Tensor], output) -> torch.Tensor:
    losses = [term(logits) for logits in scale_logits(output)]
    return losses[0] if len(losses) == 1 else torch.stack(losses).mean()


class GANLoss:
    """The adversarial loss terms of one GAN loss type (no parameters, no state)."""

    def __init__(self, name: str):
        self.name = check_gan_loss_type(name)

    @property
    def needs_gradient_penalty(self) -> bool:
        return self.name == "wgan-gp"

    def discriminator(self, real, fake) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss on real logits, loss on fake logits) for the discriminator's update, each
        averaged over the scales of a multi-scale output."""
        return _over_scales(self._on_real, real), _over_scales(self._on_fake, fake)

    def generator(self, fake) -> torch.Tensor:
        """The generator's adversarial loss on the discriminator's output for its fakes."""
        return _over_scales(self._generator, fake)

    def _on_real(self, real: torch.Tensor) -> torch.Tensor:
        if self.name == "vanilla":
            return _bce(real, 1.0)
        if self.name == "lsgan":
            return (real - 1).pow(2).mean()
        if self.name == "hinge":
            return F.relu(1 - real).mean()
        return -real.mean()

    def _on_fake(self, fake: torch.Tensor) -> torch.Tensor:
        if self.name == "vanilla":
            return _bce(fake, 0.0)
        if self.name == "lsgan":
            return fake.pow(2).mean()
        if self.name == "hinge":
            return F.relu(1 + fake).mean()
        return fake.mean()

    def _generator(self, fake: torch.Tensor) -> torch.Tensor:
        if self.name == "vanilla":
            return _bce(fake, 1.0)
        if self.name == "lsgan":
            return (fake - 1).pow(2).mean()
        return -fake.mean()


def gradient_penalty(critic: Callable[[torch.Tensor], torch.Tensor], real: torch.Tensor,
                     fake: torch.Tensor) -> torch.Tensor:
    """WGAN-GP (Gulrajani et al., 2017): mean over samples of (||grad_x critic(x)||_2 - 1)^2
    at random points x on the lines between real and (detached) fake samples, in float32
    (critic(x): the sum of its logits, over the patches and scales of a patch discriminator).

    The gradient keeps its graph (create_graph) so that the penalty itself is differentiated
    in the discriminator's backward.
    """
    alpha = torch.rand(real.shape[0], 1, 1, 1, device=real.device, dtype=torch.float32)
    with torch.autocast(real.device.type, enabled=False):
        between = (alpha * real.float() + (1 - alpha) * fake.detach().float()).requires_grad_(True)
        scores = sum(logits.float().sum() for logits in scale_logits(critic(between)))
        (grad,) = torch.autograd.grad(scores, between, create_graph=True)
        return (grad.flatten(1).norm(2, dim=1) - 1).pow(2).mean()


def r1_penalty(critic: Callable[[torch.Tensor], object], real: torch.Tensor) -> tuple[object, torch.Tensor]:
    """R1 (Mescheder et al., 2018): the mean over samples of ||grad_x D(x)||^2 at the real
    images, D(x) being each sample's verdict (`sample_verdicts`). Returns (the critic's output
    on the reals, in float32, for the adversarial term as well; the penalty, not yet weighted).

    Computed with autocast off on float32 reals that require a gradient; the gradient keeps
    its graph so the discriminator's backward differentiates the penalty.
    """
    with torch.autocast(real.device.type, enabled=False):
        real = real.detach().float().requires_grad_(True)
        output = critic(real)
        (grad,) = torch.autograd.grad(sample_verdicts(output).sum(), real, create_graph=True)
        return output, grad.flatten(1).pow(2).sum(dim=1).mean()

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


class GANLoss:
    """The adversarial loss terms of one GAN loss type (no parameters, no state)."""

    def __init__(self, name: str):
        self.name = check_gan_loss_type(name)

    @property
    def needs_gradient_penalty(self) -> bool:
        return self.name == "wgan-gp"

    def discriminator(self, real: torch.Tensor, fake: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss on real logits, loss on fake logits) for the discriminator's update."""
        if self.name == "vanilla":
            return _bce(real, 1.0), _bce(fake, 0.0)
        if self.name == "lsgan":
            return (real - 1).pow(2).mean(), fake.pow(2).mean()
        if self.name == "hinge":
            return F.relu(1 - real).mean(), F.relu(1 + fake).mean()
        return -real.mean(), fake.mean()

    def generator(self, fake: torch.Tensor) -> torch.Tensor:
        """The generator's adversarial loss on the discriminator's logits for its fakes."""
        if self.name == "vanilla":
            return _bce(fake, 1.0)
        if self.name == "lsgan":
            return (fake - 1).pow(2).mean()
        return -fake.mean()


def gradient_penalty(critic: Callable[[torch.Tensor], torch.Tensor], real: torch.Tensor,
                     fake: torch.Tensor) -> torch.Tensor:
    """WGAN-GP (Gulrajani et al., 2017): mean over samples of (||grad_x critic(x)||_2 - 1)^2
    at random points x on the lines between real and (detached) fake samples.

    The gradient keeps its graph (create_graph) so that the penalty itself is differentiated
    in the discriminator's backward.
    """
    alpha = torch.rand(real.shape[0], 1, 1, 1, device=real.device, dtype=real.dtype)
    between = (alpha * real + (1 - alpha) * fake.detach()).requires_grad_(True)
    scores = critic(between)
    (grad,) = torch.autograd.grad(scores.sum(), between, create_graph=True)
    return (grad.flatten(1).norm(2, dim=1) - 1).pow(2).mean()

"""Pieces of a discriminator step that any GAN task uses alike (GANTask, CycleGANTask).

- `LazyR1`: the R1 penalty every `interval` D steps, scaled by the interval (StyleGAN2).
- `tie_to_outputs`: `0 x sum(logits)` added to a penalty, so every parameter of D gets a
  gradient even when the D loss is made only of the penalty (see below).
- `d_input_pair`: the discriminator's input, augmented (DiffAugment) with one transform
  shared by the conditional input and the image.
- `judge_fake_for_generator`: the (frozen) discriminator's output on a fake for the
  generator's loss, and with feature matching its output on the real under the same transform.
- `d_diagnostics`: what GANHealth watches (D's mean verdicts, the spread of the fakes), for a
  single or multi-scale output.

R1 under DDP. The penalty needs the gradient of D's output with respect to its input, then a
backward through that gradient. The forward runs through the DDP-wrapped discriminator; the
first gradient is `torch.autograd.grad` with respect to the (float32) real images only, so no
parameter gradient is accumulated and DDP's hooks stay quiet; the penalty's own backward is
the one `optim.update` runs on the whole D loss, which reaches every parameter once, where
DDP averages it over the ranks. The mean over a rank's samples, averaged over the ranks, is
the mean over the global batch, so N processes compute what one process does on the N-fold
batch (for networks without batch statistics; tests/test_gan_toolkit_ddp.py). A penalty's
graph does not reach every parameter (the last layer's bias does not change dD/dx): a loss
made only of it leaves those gradients None, DDP's buckets never complete and the next
iteration fails (or ranks drift); `tie_to_outputs` adds `0 x logits` as stylegan2-ada does.
Double backward is not implemented for SyncBatchNorm: the engine refuses `sync_bn` for a task
whose `uses_double_backward` is true.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from framework.losses.gan import r1_penalty, sample_verdicts, scale_logits


def tie_to_outputs(term: torch.Tensor, output) -> torch.Tensor:
    """`term` + 0 x the sum of the discriminator's logits: the same value, and a (zero)
    gradient for every parameter that produced the logits."""
    for logits in scale_logits(output):
        term = term + 0 * logits.sum()
    return term


class LazyR1:
    """R1 = weight / 2 x E||grad_x D(x)||^2 at the reals (Mescheder et al. 2018, gamma = weight),
    applied every `interval` D steps and multiplied by `interval` then (StyleGAN2's lazy
    regularisation), so its average strength does not depend on the interval."""

    def __init__(self, weight: float = 0.0, interval: int = 1):
        if not weight >= 0:
            raise ValueError(f"r1_weight must be >= 0, got {weight}")
        if not isinstance(interval, int) or interval < 1:
            raise ValueError(f"r1_interval must be a positive integer, got {interval!r}")
        self.weight, self.interval = weight, interval

    @property
    def enabled(self) -> bool:
        return self.weight > 0

    def due(self, d_step: int) -> bool:
        """Whether D step number `d_step` (1, 2, ...) carries the penalty."""
        return self.enabled and d_step % self.interval == 0

    def real_pass(self, critic: Callable[[torch.Tensor], object], real: torch.Tensor) -> tuple[object, torch.Tensor]:
        """(critic's output on the reals, the weighted penalty term tied to that output)."""
        output, penalty = r1_penalty(critic, real)
        return output, tie_to_outputs(0.5 * self.weight * self.interval * penalty, output)


def d_input_pair(condition: torch.Tensor | None, image: torch.Tensor, augment=None) -> torch.Tensor:
    """What the discriminator sees: the image, or the condition and the image concatenated
    along the channels; augmented first when `augment` (a DiffAugment) is given, with one
    transform for both halves of the pair."""
    if augment is not None:
        if condition is None:
            (image,) = augment(image)
        else:
            condition, image = augment(condition, image)
    return image if condition is None else torch.cat([condition, image], dim=1)


def judge_fake_for_generator(discriminator, condition: torch.Tensor | None, fake: torch.Tensor, real: torch.Tensor,
                             augment=None, with_real: bool = False) -> tuple[object, object | None]:
    """(D's output on the fake, D's output on the real or None) for a generator step; the
    caller has frozen D. With `with_real` (feature matching) real and fake go through one
    augmentation draw, so their features compare, and the real pass keeps no graph."""
    if not with_real:
        return discriminator(d_input_pair(condition, fake, augment)), None
    images = (fake, real) if condition is None else (condition, fake, real)
    if augment is not None:
        images = augment(*images)
    if condition is not None:
        condition, images = images[0], images[1:]
    fake_output = discriminator(d_input_pair(condition, images[0]))
    with torch.no_grad():
        real_output = discriminator(d_input_pair(condition, images[1]))
    return fake_output, real_output


def d_diagnostics(real_output, fake_output, fake: torch.Tensor, suffix: str = "") -> dict:
    """What GANHealth watches: D's mean verdicts on real and fake (`sample_verdicts`, so a
    multi-scale output counts each scale alike), and how much the fakes differ across the
    batch (the mean over pixels of their standard deviation). `suffix` names the
    discriminator when a task has several (CycleGAN's "_a", "_b")."""
    logs = {f"d_real_logit{suffix}": sample_verdicts(real_output).detach().mean(),
            f"d_fake_logit{suffix}": sample_verdicts(fake_output).detach().mean()}
    if fake.shape[0] > 1:
        logs[f"fake_spread{suffix}"] = fake.detach().float().std(dim=0).mean()
    return logs

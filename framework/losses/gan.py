"""Adversarial losses of a GAN as registry entries, and the two gradient penalties.

    task: {type: GANTask, gan_loss: hinge, ...}               # a built-in one by its short name
    task: {type: GANTask, gan_loss: {type: HingeGANLoss}}     # the same, as a node
    task: {type: GANTask, gan_loss: {type: MyGANLoss, margin: 2.0}}   # a user's own (below)

| short name | entry            | D on real            | D on fake            | G                   |
| ---------- | ---------------- | -------------------- | -------------------- | ------------------- |
| vanilla    | VanillaGANLoss   | BCEWithLogits(x, 1)  | BCEWithLogits(x, 0)  | BCEWithLogits(x, 1) |
| lsgan      | LSGANLoss        | mean((x - 1)^2)      | mean(x^2)            | mean((x - 1)^2)     |
| hinge      | HingeGANLoss     | mean(relu(1 - x))    | mean(relu(1 + x))    | -mean(x)            |
| wgan-gp    | WGANGPLoss       | -mean(x)             | mean(x)              | -mean(x)            |
| oasis      | OASISLoss        | class-balanced CE to the true classes | CE to "fake" | class-balanced CE to the true classes |

The generator losses are the non-saturating forms. An entry declares what it needs instead of
being recognised by name: `needs_gradient_penalty` (WGAN-GP: the adversary adds
`gradient_penalty` to D's loss) and `bounded_below` (D's loss cannot go below 0, so a loss
near 0 means D wins outright: GANHealth watches it; a Wasserstein critic's loss is unbounded).

A user's own loss subclasses `AdversarialLoss`, registers itself and writes the three
per-scale terms (a loss that reads the label map overrides `discriminator` and `generator`
instead and declares `reads_labels`: framework/losses/oasis.py's `OASISLoss`):

    @LOSSES.register()
    class MyGANLoss(AdversarialLoss):
        def on_real(self, logits): ...
        def on_fake(self, logits): ...
        def for_generator(self, logits): ...

A discriminator's output is a logit tensor, or a multi-scale output with `.logits` (a list,
one logit map per scale; framework/models/discriminators.py): each loss is then the mean over
the scales of the loss at each scale (SPADE's GANLoss divides by the scales), or with
`scales: sum` their sum (pix2pixHD's GANLoss adds them up: with 2 scales twice the mean, at the
same d_weight, adv_weight and feature-matching weight as its code):

    task: {gan_loss: {type: LSGANLoss, scales: sum}, ...}   # pix2pixHD

The terms get the logits in float32 under AMP too.

Both penalties (`gradient_penalty`, `r1_penalty`) run their discriminator pass in float32
with autocast off, and differentiate the unscaled discriminator output: under float16 AMP the
GradScaler scales only the final loss in `optim.update`, so the penalty is neither computed in
half precision nor taken on gradients 2^16 times too large.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from framework.losses.oasis import class_balanced_ce, fake_class_ce
from framework.registry import LOSSES, did_you_mean


def scale_logits(output) -> list[torch.Tensor]:
    """The logit maps of a discriminator output: [logits], or one per scale."""
    logits = getattr(output, "logits", output)
    return list(logits) if isinstance(logits, (list, tuple)) else [logits]


def sample_verdicts(output) -> torch.Tensor:
    """Each sample's verdict (N,): its mean logit over the patches of each scale, averaged over
    the scales (a scalar-output discriminator's logit itself)."""
    per_scale = [(logits if logits.dtype == torch.float64 else logits.float()).flatten(1).mean(dim=1)
                 for logits in scale_logits(output)]  # float64 stays float64: saliency's finite differences
    return torch.stack(per_scale).mean(dim=0) if len(per_scale) > 1 else per_scale[0]


SCALE_REDUCTIONS = ("mean", "sum")  # how a multi-scale output's per-scale losses combine


def _over_scales(term: Callable[[torch.Tensor], torch.Tensor], output, reduction: str = "mean") -> torch.Tensor:
    # In float32 whatever D computed in: under autocast, relu/pow/mean keep their input's dtype,
    # so a hinge loss of bfloat16 logits was itself bfloat16, steps of 1/128 near 2 (a SPADE
    # run logged loss_d 1.984375), and a float16 logit over 256 overflows when squared.
    losses = [term(logits.float()) for logits in scale_logits(output)]
    if len(losses) == 1:
        return losses[0]
    return torch.stack(losses).sum() if reduction == "sum" else torch.stack(losses).mean()


class AdversarialLoss(nn.Module):
    """The adversarial terms of one GAN loss (no parameters, no state). Subclasses write the
    per-scale terms; `discriminator` and `generator` average them over a multi-scale output."""

    name = ""  # the short name a config may use (`gan_loss: hinge`); "" for a user's own
    needs_gradient_penalty = False  # D's loss takes gradient_penalty (weighted by gp_weight)
    bounded_below = True  # D's loss is >= 0: near 0, D wins outright (GANHealth watches it)
    reads_labels = False  # the terms read the label map (OASIS's per-pixel classes): pass `labels`

    def __init__(self, scales: str = "mean"):
        super().__init__()
        if scales not in SCALE_REDUCTIONS:
            raise ValueError(f"scales: expected one of {', '.join(SCALE_REDUCTIONS)} (how the losses of a "
                             f"multi-scale discriminator's scales combine), got {scales!r}")
        self.scales = scales

    def on_real(self, logits: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def on_fake(self, logits: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def for_generator(self, logits: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def discriminator(self, real, fake, labels: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss on real logits, loss on fake logits) for the discriminator's update. `labels`:
        the batch's label map, for a loss that `reads_labels` (the others ignore it)."""
        return _over_scales(self.on_real, real, self.scales), _over_scales(self.on_fake, fake, self.scales)

    def generator(self, fake, labels: torch.Tensor | None = None) -> torch.Tensor:
        """The generator's adversarial loss on the discriminator's output for its fakes."""
        return _over_scales(self.for_generator, fake, self.scales)

    def extra_repr(self) -> str:
        return self.name if self.scales == "mean" else f"{self.name}, scales={self.scales}"


def _bce(logits: torch.Tensor, target: float) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, target))


@LOSSES.register()
class VanillaGANLoss(AdversarialLoss):
    """The original GAN's loss (Goodfellow et al., 2014), non-saturating for the generator."""

    name = "vanilla"

    def on_real(self, logits):
        return _bce(logits, 1.0)

    def on_fake(self, logits):
        return _bce(logits, 0.0)

    def for_generator(self, logits):
        return _bce(logits, 1.0)


@LOSSES.register()
class LSGANLoss(AdversarialLoss):
    """Least squares (Mao et al., 2017): pix2pixHD's and CycleGAN's."""

    name = "lsgan"

    def on_real(self, logits):
        return (logits - 1).pow(2).mean()

    def on_fake(self, logits):
        return logits.pow(2).mean()

    def for_generator(self, logits):
        return (logits - 1).pow(2).mean()


@LOSSES.register()
class HingeGANLoss(AdversarialLoss):
    """Hinge (Lim & Ye, 2017; SAGAN, BigGAN, SPADE)."""

    name = "hinge"

    def on_real(self, logits):
        return F.relu(1 - logits).mean()

    def on_fake(self, logits):
        return F.relu(1 + logits).mean()

    def for_generator(self, logits):
        return -logits.mean()


@LOSSES.register()
class WGANGPLoss(AdversarialLoss):
    """Wasserstein with gradient penalty (Gulrajani et al., 2017): the critic's loss is
    unbounded, and the adversary adds `gradient_penalty`."""

    name = "wgan-gp"
    needs_gradient_penalty = True
    bounded_below = False

    def on_real(self, logits):
        return -logits.mean()

    def on_fake(self, logits):
        return logits.mean()

    def for_generator(self, logits):
        return -logits.mean()


@LOSSES.register()
class OASISLoss(AdversarialLoss):
    """OASIS (Schönfeld et al., 2021): the discriminator is a segmenter with num_classes + 1
    outputs per pixel (the last: "fake"). D on reals: class-balanced CE towards the true classes;
    D on fakes: CE towards the fake class; G: class-balanced CE of D(fake) towards the true
    classes (framework/losses/oasis.py). Reads the label map; `ignore_index` pixels count in no term.

    dont_care_class   a class the balanced CE gives weight 0 and leaves out of the balancing (OASIS's
                      contain_dontcare_label: label 0 of its Cityscapes and ADE20K); null: every class
                      is supervised (a dataset without a don't-care class)"""

    name = "oasis"
    reads_labels = True

    def __init__(self, ignore_index: int = 255, dont_care_class: int | None = None):
        super().__init__()
        if dont_care_class is not None and (isinstance(dont_care_class, bool) or not isinstance(dont_care_class, int)
                                            or dont_care_class < 0):
            raise ValueError(f"dont_care_class: expected a class index >= 0 or null, got {dont_care_class!r}")
        self.ignore_index, self.dont_care_class = ignore_index, dont_care_class

    def discriminator(self, real, fake, labels=None):
        return (class_balanced_ce(real, labels, self.ignore_index, self.dont_care_class),
                fake_class_ce(fake, labels, self.ignore_index))

    def generator(self, fake, labels=None):
        return class_balanced_ce(fake, labels, self.ignore_index, self.dont_care_class)


ON_LOGITS = (VanillaGANLoss, LSGANLoss, HingeGANLoss, WGANGPLoss)  # terms of D's real/fake logits alone
GAN_LOSS_TYPES = tuple(loss.name for loss in ON_LOGITS)
SHORT_NAMES = {loss.name: loss for loss in (*ON_LOGITS, OASISLoss)}  # what a config may give as `gan_loss`


def adversarial_loss(spec: str | AdversarialLoss, key: str = "gan_loss") -> AdversarialLoss:
    """The loss a task's `gan_loss` names: a short name (`hinge`), a registered entry's name
    (`HingeGANLoss`), an entry already built from a node, or the node itself ({type: LSGANLoss,
    scales: sum}); else a ValueError naming `key`."""
    if isinstance(spec, AdversarialLoss):
        return spec
    if isinstance(spec, Mapping) and "type" in spec:  # a node not yet built (the task class called directly)
        return adversarial_loss(LOSSES.build(spec, path=key), key)
    if isinstance(spec, str) and spec in SHORT_NAMES:
        return SHORT_NAMES[spec]()
    if isinstance(spec, str) and spec in LOSSES:
        entry = LOSSES.get(spec)
        if isinstance(entry, type) and issubclass(entry, AdversarialLoss):
            return entry()
        raise ValueError(f"{key}: '{spec}' is a loss, but not an adversarial one (an AdversarialLoss subclass)")
    if not isinstance(spec, str):
        raise ValueError(f"{key}: expected a GAN loss name or an AdversarialLoss node, got {type(spec).__name__}")
    raise ValueError(f"{key}: unknown GAN loss '{spec}'{did_you_mean(spec, SHORT_NAMES)} "
                     f"(choose one of {', '.join(SHORT_NAMES)}, or a registered AdversarialLoss)")


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

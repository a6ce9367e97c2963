"""OASIS's losses (Schönfeld et al., 2021, "You Only Need Adversarial Supervision for Semantic
Image Synthesis"): a segmenter as the discriminator, N + 1 outputs per pixel.

D's logits are N x (num_classes + 1) x H x W: the true classes 0..num_classes-1 and, last, the
"fake" class (index num_classes; the OASIS code puts it first, at index 0: only the order
differs). Labels are N x H x W class ids; pixels equal to `ignore_index` (the don't-care label)
count in no term. Label maps of another size than the logits are resized (nearest) to them.

- `class_balanced_ce`: D on real images, and G's adversarial term on D(fake): per-pixel CE
  towards the true class, weighted by OASIS's class balancing of the batch's label map
  (`class_balancing_weights`), averaged over all pixels, as OASIS (ignored pixels weigh 0).
  `dont_care_class` (OASIS's `contain_dontcare_label`, set by its Cityscapes and ADE20K loaders:
  label 0, "unlabeled" / "other"): that class weighs 0 and is not counted among the present
  classes, so D and G are never scored on it; its pixels still count in the mean's denominator,
  in D's fake term and in LabelMix, as in models/losses.py. None: every class is supervised.
- `fake_class_ce`: D on fakes: CE towards the fake class, averaged over the non-ignored pixels.
- LabelMix: `labelmix_mask` (each class region of each image goes wholly to the real or to
  the fake image, by a fair coin per image and class, or with `per_image=False` one coin per class
  for the whole batch, as OASIS), `labelmix_images`, and `labelmix_consistency`: weight x the
  mean squared difference between D(mixed) and mask x D(real) + (1 - mask) x D(fake) logits.

Everything stays on the device: no host sync, so these can run every step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from framework.models.spade import resize_labels

LABELMIX_WEIGHT = 10.0  # OASIS's lambda_labelmix


def class_balancing_weights(labels: torch.Tensor, num_classes: int, ignore_index: int = 255,
                            dont_care_class: int | None = None) -> torch.Tensor:
    """OASIS's per-pixel class weights of a batch (N x H x W float; ignored pixels 0).

    weight of a class c pixel = pixels / (present * pixels_c): `pixels` every pixel of the
    batch (ignored ones included, as OASIS's numel of the one-hot map over its channels),
    `present` the number of classes with at least one pixel, `pixels_c` class c's count. Every
    present class then weighs the same in the sum: pixels / present. `dont_care_class`: weighs 0
    and is left out of `present` (OASIS zeroes its count before counting the present classes).
    """
    valid = labels != ignore_index
    index = torch.where(valid, labels, torch.full_like(labels, num_classes))  # ignored -> spare slot
    # scatter_add, not bincount: bincount on CUDA reads the maximum back to the host.
    counts = torch.zeros(num_classes + 1, dtype=torch.float32, device=labels.device)
    counts.scatter_add_(0, index.flatten(), torch.ones(index.numel(), dtype=torch.float32, device=labels.device))
    counts = counts[:num_classes]
    if dont_care_class is not None:
        counts[dont_care_class] = 0  # as absent: weight 0, not one of the present classes
    present = (counts > 0).sum()
    coefficients = torch.where(counts > 0, labels.numel() / (present * counts).clamp_min(1), torch.zeros_like(counts))
    coefficients = torch.cat([coefficients, coefficients.new_zeros(1)])  # the spare slot weighs 0
    return coefficients[index]


def class_balanced_ce(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = 255,
                      dont_care_class: int | None = None) -> torch.Tensor:
    """Class-balanced CE towards the true classes: D's loss on real images, and the generator's
    adversarial loss on D(fake). num_classes = logits' channels - 1 (the last is "fake")."""
    num_classes = logits.shape[1] - 1
    labels = resize_labels(labels, logits.shape[-2:])
    weights = class_balancing_weights(labels, num_classes, ignore_index, dont_care_class)
    target = torch.where(labels == ignore_index, torch.zeros_like(labels), labels)  # weighed 0 below
    per_pixel = F.cross_entropy(logits.float(), target, reduction="none")
    return (per_pixel * weights).mean()


def fake_class_ce(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = 255) -> torch.Tensor:
    """D's loss on generated images: every non-ignored pixel should be the fake class (the last)."""
    labels = resize_labels(labels, logits.shape[-2:])
    valid = (labels != ignore_index).float()
    fake = torch.full_like(labels, logits.shape[1] - 1)
    per_pixel = F.cross_entropy(logits.float(), fake, reduction="none")
    return (per_pixel * valid).sum() / valid.sum().clamp_min(1)


def labelmix_mask(labels: torch.Tensor, num_classes: int, ignore_index: int = 255,
                  generator: torch.Generator | None = None, per_image: bool = True) -> torch.Tensor:
    """N x 1 x H x W float of 0/1: each class region of each image (the ignored pixels as one
    more region) is 1 (take the real image) or 0 (the fake) by a fair coin per image and class,
    or with `per_image=False` one coin per class shared by every image of the batch (OASIS's
    models/models.py generate_labelmix, on each GPU's share of the batch)."""
    index = torch.where(labels == ignore_index, torch.full_like(labels, num_classes), labels)
    draws = labels.shape[0] if per_image else 1
    coins = torch.randint(0, 2, (draws, num_classes + 1), generator=generator,
                          device="cpu" if generator is not None else labels.device)
    coins = coins.to(labels.device, dtype=torch.float32).expand(labels.shape[0], -1)
    return torch.gather(coins, 1, index.flatten(1)).view(labels.shape)[:, None]


def labelmix_images(mask: torch.Tensor, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    """mask x real + (1 - mask) x fake: the image D must judge region by region."""
    return mask * real + (1 - mask) * fake


def labelmix_consistency(mixed_logits: torch.Tensor, real_logits: torch.Tensor, fake_logits: torch.Tensor,
                         mask: torch.Tensor, labels: torch.Tensor, ignore_index: int = 255,
                         weight: float = LABELMIX_WEIGHT) -> torch.Tensor:
    """weight x mean over non-ignored pixels and every channel of
    (D(mixed) - (mask x D(real) + (1 - mask) x D(fake)))**2, OASIS's LabelMix regulariser."""
    size = mixed_logits.shape[-2:]
    if tuple(mask.shape[-2:]) != tuple(size):
        mask = F.interpolate(mask, size=tuple(size), mode="nearest")
    valid = (resize_labels(labels, size) != ignore_index).float()[:, None]
    target = mask * real_logits.float() + (1 - mask) * fake_logits.float()
    squared = (mixed_logits.float() - target).pow(2) * valid
    return weight * squared.sum() / (valid.sum() * mixed_logits.shape[1]).clamp_min(1)

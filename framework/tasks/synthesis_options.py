"""SemanticSynthesisTask's refusals of networks and options that do not fit together, each one line
naming the keys (framework/tasks/synthesis.py builds the task after them)."""

from __future__ import annotations

from torch import nn

from framework.dist import unwrap
from framework.tasks.adversary import check_segmenter_outputs


def check_networks(generator: nn.Module, discriminator: nn.Module, num_classes: int, reads_labels: bool,
                   instance_edges: bool) -> None:
    """The generator's classes and instance-edge channel are the task's; a segmenter D (a loss that
    reads labels) has num_classes + 1 outputs."""
    generator_classes = getattr(unwrap(generator), "num_classes", num_classes)
    if generator_classes != num_classes:
        raise ValueError(f"generator.num_classes {generator_classes} differs from the task's num_classes {num_classes}")
    if reads_labels:
        check_segmenter_outputs(discriminator, num_classes)
    if getattr(unwrap(generator), "instance_edges", False) != instance_edges:
        raise ValueError(f"instance_edges {instance_edges} differs from the generator's: both take the "
                         "instance-edge channel, or neither")


def check_options(generator: nn.Module, reads_labels: bool, labelmix_weight: float, mode_seeking_weight: float,
                  fresh_noise_for_g, instance_edges: bool, ema_decay, ema_bn_batches: int) -> None:
    """Options that need another (LabelMix: a segmenter D; mode seeking: noise) or exclude one."""
    if labelmix_weight and not reads_labels:
        raise ValueError("labelmix_weight: LabelMix needs a segmenter discriminator (gan_loss: oasis)")
    if mode_seeking_weight and not unwrap(generator).noise_dim:
        raise ValueError("mode_seeking_weight: the generator has no noise (noise_dim 0), so its two draws of a "
                         "label map cannot differ")
    if not isinstance(fresh_noise_for_g, bool):
        raise ValueError(f"fresh_noise_for_g must be true or false, got {fresh_noise_for_g!r}")
    if instance_edges and ema_decay is not None and ema_bn_batches:
        raise ValueError("ema_bn_batches: the EMA's statistics are re-estimated from label maps alone, without "
                         "their instance edges; set ema_bn_batches: 0 with instance_edges")


def check_dont_care_class(loss: nn.Module, num_classes: int) -> None:
    """A loss's don't-care class (OASISLoss's dont_care_class) is one of the task's classes."""
    dont_care = getattr(loss, "dont_care_class", None)
    if dont_care is not None and dont_care >= num_classes:
        raise ValueError(f"gan_loss.dont_care_class: {dont_care} is not one of the task's {num_classes} classes "
                         f"(0..{num_classes - 1})")


LABELMIX_COINS = ("image", "batch")


def check_labelmix_coin(value) -> str:
    """`labelmix_coin`: a coin per image and class (image) or per class for the batch (batch, OASIS's)."""
    if value not in LABELMIX_COINS:
        raise ValueError(f"labelmix_coin: expected image (a coin per image and class) or batch (a coin per class "
                         f"for the whole batch, OASIS's), got {value!r}")
    return value

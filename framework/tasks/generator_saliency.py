"""What a generator's saliency differentiates (GeneratorTask.saliency_score), for tasks whose
generator takes an image (pix2pix, CycleGAN):

    "output"          the generated image's pixels, in [0, 1] as tools/infer.py writes them, summed
                      over the channels: a map N x H x W, summed over a region (one output pixel,
                      a box, a mask) or the whole image by framework/inference/saliency.py
    "discriminator"   the discriminator's verdict on the generated image (its mean logit: how real
                      it finds it; `sample_verdicts`), one number per item; the task's `verdict`
                      says which discriminator judges which direction and what it sees

Both run the generator as inference does (padded to its size divisor, cropped back), so the
gradient is with respect to the pixels of the image given, at its size.
"""

from __future__ import annotations

import torch

from framework.dist import unwrap
from framework.errors import ConfigError
from framework.inference.generator import GeneratorPredictor, to_unit
from framework.losses.gan import sample_verdicts

TARGETS = ("output", "discriminator")


class GeneratorSaliency:
    """GeneratorTask's part: `saliency_score` from its `generator_for`, and `verdict`, which a GAN
    task with a discriminator defines."""

    def saliency_score(self, target, direction: str | None = None, settings=None, discriminator_loaded: bool = True):
        name = type(self).__name__
        if self.conditioning not in ("image", "unpaired"):
            raise ConfigError(f"saliency: {name} generates from {self.conditioning}, not from image pixels: there is "
                              "no input image to differentiate (saliency is for segmenters and image-to-image GANs)")
        if target not in TARGETS:
            raise ConfigError(f"saliency target {target!r}: {name} scores 'output' (the generated pixels, in a "
                              "region or all) or 'discriminator' (its verdict on the generated image)")
        if settings is not None:
            raise ConfigError(f"saliency settings: {name} is a GAN; inference settings are for segmentation")
        direction = self.check_direction(direction)
        predictor = GeneratorPredictor(self.generator_for(direction))
        if target == "output":
            return lambda pixels: to_unit(predictor.signed_output(pixels)).sum(dim=1)
        if not discriminator_loaded:
            raise ConfigError(f"saliency target 'discriminator': this {name} was loaded from a model folder, which "
                              "holds the generator's weights only; load its run folder or checkpoint to ask the "
                              "discriminator")

        def verdict(pixels: torch.Tensor) -> torch.Tensor:
            return self.verdict(pixels / 127.5 - 1, predictor.signed_output(pixels), direction)

        return verdict

    def verdict(self, condition: torch.Tensor, fake: torch.Tensor, direction: str | None = None) -> torch.Tensor:
        """The discriminator's verdict per item (N,) on generated images `fake` made from `condition`
        (both N x C x H x W in [-1, 1])."""
        raise ConfigError(f"saliency target 'discriminator': {type(self).__name__} does not say which "
                          "discriminator judges its output (it defines no verdict)")


def judged(discriminator, image: torch.Tensor) -> torch.Tensor:
    """`sample_verdicts` of the (unwrapped) discriminator on `image`."""
    return sample_verdicts(unwrap(discriminator)(image))

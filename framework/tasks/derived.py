"""What `Task` and `GeneratorTask` derive by default, so a task written from docs/extending.md
neither declares what its parts already know nor loses pictures and warnings without a word:

- from its `Adversary` parts (any submodule that is one): whether a loss differentiates a
  gradient (WGAN-GP's penalty, R1), which the start-up check must run with gradients for and
  SyncBatchNorm cannot do; and the D-wins / collapse warnings of their health checks;
- from what `val_step` returns: the pictures of a generator, a row per sample of the images it
  returns among "input", "fake" and "real" (N x 3 x H x W, or N x 1 x H x W, floats in [0, 1]),
  for TensorBoard (`visualize`) and tools/test.py --show-dir (`save_visuals`).

Where no picture can be derived, --show-dir is refused in one line naming what is missing, and
TensorBoard's evaluation samples are missing with one warning, not silently.

- from `generator_for` and `verdict`: what a generator's saliency differentiates
  (`GeneratorSaliency`, GeneratorTask.saliency_score) for a task whose generator takes an image
  (pix2pix, CycleGAN):

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

import logging

import torch
from torch import nn

from framework.dist import unwrap
from framework.errors import ConfigError
from framework.inference.generator import GeneratorPredictor, to_unit
from framework.losses.gan import sample_verdicts
from framework.tasks.adversary import Adversary
from framework.visualization.panels import side_by_side, stack_rows, write_named_pngs

logger = logging.getLogger(__name__)

PICTURE_KEYS = ("input", "fake", "real")  # a row's order: what went in, what came out, what was wanted
_WARNED_NO_SAMPLES: set[str] = set()  # task classes already told (once per process, not per evaluation)


def adversaries_of(task: nn.Module) -> list[nn.Module]:
    """The task's Adversary parts, in the order they were assigned."""
    return [module for module in task.modules() if isinstance(module, Adversary)]


def uses_double_backward(task: nn.Module) -> bool:
    return any(adversary.uses_double_backward for adversary in adversaries_of(task))


def adversary_warnings(task: nn.Module, logged: dict[str, float]) -> list[str]:
    return [warning for adversary in adversaries_of(task) for warning in adversary.diagnose(logged)]


def generator_panels(outputs: dict) -> torch.Tensor | None:
    """N x 3 x H x (k W) rows joining the outputs' pictures side by side, or None without a "fake"
    image. An "input" of another size or channel count (a label map, noise) is left out."""
    fake = outputs.get("fake") if isinstance(outputs, dict) else None
    if not _is_picture(fake):
        return None
    pictures = [outputs[key] for key in PICTURE_KEYS if _is_picture(outputs.get(key))
                and outputs[key].shape[0] == fake.shape[0] and outputs[key].shape[2:] == fake.shape[2:]]
    return side_by_side(*(picture.expand(-1, 3, -1, -1) for picture in pictures))


def _is_picture(value) -> bool:
    return (isinstance(value, torch.Tensor) and value.is_floating_point() and value.ndim == 4
            and value.shape[1] in (1, 3))


def no_pictures(task: nn.Module) -> str:
    return (f"{type(task).__name__}'s val_step returns no \"fake\" image (N x 3 x H x W, floats in [0, 1]) "
            "to draw, and the task defines no visualize / save_visuals of its own")


def sample_rows(task: nn.Module, outputs: dict, max_images: int) -> dict:
    """{"samples": a row per sample} for TensorBoard, or {} after one warning per task class."""
    panels = generator_panels(outputs)
    if panels is not None:
        return {"samples": stack_rows(panels, max_images)}
    return no_samples(task, no_pictures(task))


def no_samples(task: nn.Module, reason: str) -> dict:
    """No TensorBoard samples: {} and, the first time for this task class, a warning saying why."""
    if type(task).__name__ not in _WARNED_NO_SAMPLES:
        _WARNED_NO_SAMPLES.add(type(task).__name__)
        logger.warning(f"warning: no evaluation samples in TensorBoard: {reason}")
    return {}


def write_pictures(task: nn.Module, batch: dict, outputs: dict, folder) -> None:
    """One PNG per sample, named after the sample ("name", else its dataset "index")."""
    panels = generator_panels(outputs)
    if panels is None:
        raise ConfigError(f"--show-dir: nothing to write: {no_pictures(task)}")
    if "name" in batch:
        names = list(batch["name"])
    elif "index" in batch:
        names = [f"{index:06d}" for index in torch.as_tensor(batch["index"]).tolist()]
    else:
        raise ConfigError(f"--show-dir: {type(task).__name__}'s batches carry no sample \"name\" or \"index\" "
                          "to name the pictures after")
    write_named_pngs(folder, names, panels)


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
